# fqkn request (combined): (a) the dense path's decode cutting its own schedule vs
# MLAJIT_FAKEQUANT_DENSE_SCHED=metadata (same binary and cache); (b) the magic-add E2M1 NVFP4
# element (this tree) vs the base's kernel sources (gpu/ks_old), both on the metadata launches.
export MLAJIT_CACHE_DIR=$PWD/gpu/cache
T=build-gpu/tests/test_fakequant_decode_gpu
s=$SECONDS
for f in kv_sweep invariant_to_page_size_and_batch_no_quant invariant_to_page_size_and_batch_kv_quant; do
  MLT_FQ_RUNTIMES=04 timeout 7 $T --filter "fakequant_decode_gpu/$f" > $OUT/test_$f.txt 2>&1; echo "test $f rc=$? t=$((SECONDS-s))"; tail -2 $OUT/test_$f.txt
done
for v in self:new:none meta:new:none meta:new:kv meta:old:kv self:new:kv self:new:none meta:new:none; do
  r=$((57 - (SECONDS - s))); [ $r -lt 4 ] && break
  [ $r -gt 9 ] && r=9
  IFS=: read sc tr cs <<< "$v"
  if [ $sc = meta ]; then export MLAJIT_FAKEQUANT_DENSE_SCHED=metadata; else unset MLAJIT_FAKEQUANT_DENSE_SCHED; fi
  if [ $tr = old ]; then export MLAJIT_KERNEL_DIR=$PWD/gpu/ks_old; else unset MLAJIT_KERNEL_DIR; fi
  f=$OUT/bench_${sc}_${tr}_${cs}_$SECONDS.txt
  timeout $r stdbuf -oL -eL build-gpu/mlajit bench --case fakequant-decode-$cs > $f 2>&1
  echo "bench $v rc=$? t=$((SECONDS-s))"; head -30 $f
done
