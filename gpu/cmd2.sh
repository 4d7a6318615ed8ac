# fqkn request 2: the dense path's decode cutting its own schedule (no metadata kernel) vs
# MLAJIT_FAKEQUANT_DENSE_SCHED=metadata (the previous launches), same binary and cache.
export MLAJIT_CACHE_DIR=$PWD/gpu/cache
T=build-gpu/tests/test_fakequant_decode_gpu
s=$SECONDS
for f in kv_sweep invariant_to_page_size_and_batch_no_quant invariant_to_page_size_and_batch_kv_quant splits_no_quant_bf16_out; do
  MLT_FQ_RUNTIMES=04 timeout 9 $T --filter "fakequant_decode_gpu/$f" > $OUT/test_$f.txt 2>&1; echo "test $f rc=$? t=$((SECONDS-s))"; tail -2 $OUT/test_$f.txt
done
for v in self:none meta:none self:kv meta:kv self:none meta:none; do
  r=$((56 - (SECONDS - s))); [ $r -lt 5 ] && break
  [ $r -gt 12 ] && r=12
  if [ ${v%%:*} = meta ]; then export MLAJIT_FAKEQUANT_DENSE_SCHED=metadata; else unset MLAJIT_FAKEQUANT_DENSE_SCHED; fi
  f=$OUT/bench_${v%%:*}_${v##*:}_$SECONDS.txt
  timeout $r stdbuf -oL -eL build-gpu/mlajit bench --case fakequant-decode-${v##*:} > $f 2>&1
  echo "bench $v rc=$? t=$((SECONDS-s))"; head -30 $f
done
