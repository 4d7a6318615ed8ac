#!/usr/bin/env bash
# On the lent GPU machine: build, every GPU test in parallel (the CPU-only tests run in CI), then
# each BENCH_CASES case as its own `mlajit bench --case` with a time limit; logs under $OUT.
# Usage (repository root, .deps carried): BENCH_CASES="flashmla-dense-s1 dsv4" bash scripts/device-gpu-run.sh
# PRECOMPILE="dsv4-flash" also compiles those presets into the benches' cache while the tests run
# (so that no bench case spends its time limit in NVRTC).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mlajit-out}; mkdir -p "$OUT"
. scripts/device-env.sh
export BUILD_DIR=build-gpu
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt 2>&1
git log --oneline -1 >> $OUT/gpu.txt 2>&1
bash scripts/build.sh > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; echo BUILD FAILED; exit 1; }
el build ok
pre=""
for p in ${PRECOMPILE:-}; do pre="$pre --preset $p"; done
[ -n "$pre" ] && { build-gpu/mlajit precompile $pre --jobs 4 --quiet > $OUT/precompile.log 2>&1 & }
# The DSV4 layer test compiles the dsv4-flash kernels (tens of seconds each): its cache is filled
# first with 8 jobs while the other GPU tests run, then it runs alone with 16 jobs.
lc=build-gpu/test-cache/test_dsv4_layer_gpu; mkdir -p $lc
build-gpu/mlajit precompile --preset dsv4-flash --jobs 8 --quiet --cache-dir $lc > $OUT/layer-precompile.log 2>&1 &
lp=$!
timeout 330 ctest --test-dir build-gpu -R '_gpu$|test_jit' -E test_dsv4_layer_gpu -j 6 --output-on-failure --timeout 320 > $OUT/ctest.log 2>&1
el "ctest rc $?"; grep -E "tests passed|tests failed|Passed|Failed|Skipped|Timeout" $OUT/ctest.log | tail -12
wait $lp; el "layer precompile rc $?"
MLAJIT_CACHE_DIR=$lc timeout 200 build-gpu/tests/test_dsv4_layer_gpu --jobs 16 > $OUT/layer.log 2>&1
el "test_dsv4_layer_gpu rc $?"; tail -3 $OUT/layer.log
wait; [ -n "$pre" ] && el "precompile done: $(tail -1 $OUT/precompile.log)"
build-gpu/mlajit info > $OUT/bench.txt 2>&1
for c in ${BENCH_CASES:-}; do
  timeout 45 stdbuf -oL build-gpu/mlajit bench --case $c >> $OUT/bench.txt 2>&1 || echo "case $c rc $?" >> $OUT/bench.txt
  el "bench $c"
done
grep -vE "^(mlajit bench|date|device|command|ceilings)" $OUT/bench.txt | cut -c1-150 | tail -80
