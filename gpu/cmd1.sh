# fqkn request 1: NVFP4 element with the magic-add E2M1 (decode_sm90.cu fq_e2m1_mag) vs the base.
export MLAJIT_CACHE_DIR=$PWD/gpu/cache
T=build-gpu/tests/test_fakequant_decode_gpu
s=$SECONDS
MLT_FQ_RUNTIMES=4 timeout 14 $T --filter 'fakequant_decode_gpu/kv_sweep' > $OUT/test_kv.txt 2>&1; echo "test kv_sweep rc=$? t=$((SECONDS-s))"
MLT_FQ_RUNTIMES=04 timeout 8 $T --filter 'fakequant_decode_gpu/invariant_to_page_size_and_batch_kv_quant' > $OUT/test_inv.txt 2>&1; echo "test inv rc=$? t=$((SECONDS-s))"
tail -3 $OUT/test_kv.txt $OUT/test_inv.txt
for v in new old new old; do
  r=$((45 - (SECONDS - s))); [ $r -lt 8 ] && break
  [ $r -gt 16 ] && r=16
  if [ $v = old ]; then export MLAJIT_KERNEL_DIR=$PWD/gpu/ks_old; else unset MLAJIT_KERNEL_DIR; fi
  f=$OUT/bench_${v}_$SECONDS.txt
  timeout $r stdbuf -oL -eL build-gpu/mlajit bench --case fakequant-decode-kv > $f 2>&1
  echo "bench $v rc=$? t=$((SECONDS-s))"; cat $f | head -30
done
