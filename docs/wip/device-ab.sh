#!/usr/bin/env bash
# The prepared A/B of docs/wip's patches on the lent GPU (repository root, .deps and .gpu carried).
# Prepare on the CPU first (see README.md):
#   git worktree add .gpu/p3d HEAD && (cd .gpu/p3d && git apply ../../docs/wip/dsv4-stream-3d-copies.patch)
#   cp -r kernel_src .gpu/ks_dq && (cd .gpu/ks_dq && patch -p2 < ../../docs/wip/dsv4-dequant-int.patch)
#   nvcc -O3 -std=c++17 -arch=sm_90a -I.gpu/ks_dq -o .gpu/e4m3_bf16_check tools/e4m3_bf16_check.cu   # needs the patch's fp8.cuh
#   nvcc -O3 -std=c++17 -arch=sm_90a -I.gpu/p3d/kernel_src -o .gpu/sgemm_check_3d .gpu/p3d/tools/sgemm_check.cu -lcuda
#   nvcc -O3 -std=c++17 -arch=sm_90a -Ikernel_src -o .gpu/sgemm_check tools/sgemm_check.cu -lcuda
#   caches: build/mlajit precompile --preset dsv4-flash --arch sm_90a --cache-dir .gpu/lc (tree),
#           the same with .gpu/p3d's mlajit into .gpu/lc3d, and MLAJIT_KERNEL_DIR=$PWD/.gpu/ks_dq into .gpu/lcdq
# Usage: bash docs/wip/device-ab.sh 1   (builds, checks, layer tests), then ... 2 (benches)
set -u
OUT=${OUT:-/tmp/o}; mkdir -p $OUT
. scripts/device-env.sh "$PWD"   # not the script's own $1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
cases="dsv4-swa-T1 dsv4-hca-T1 dsv4-swa-T4 dsv4-hca-T4 dsv4-swa-T16 dsv4-hca-T16 dsv4-swa-T64 dsv4-hca-T64 dsv4-swa-T640 dsv4-hca-T640"
if [ "${1:-}" = 1 ]; then
  (BUILD_DIR=build-gpu bash scripts/build.sh > $OUT/build.log 2>&1; echo "rc $?" >> $OUT/build.log) &
  (cd .gpu/p3d && BUILD_DIR=build-3d bash scripts/build.sh > $OUT/build-3d.log 2>&1; echo "rc $?" >> $OUT/build-3d.log) &
  .gpu/e4m3_bf16_check > $OUT/e4m3.log 2>&1; el "e4m3 check rc $?: $(tail -1 $OUT/e4m3.log)"
  timeout 90 .gpu/sgemm_check > $OUT/sgemm.log 2>&1; timeout 90 .gpu/sgemm_check_3d > $OUT/sgemm3d.log 2>&1
  wait; el "builds: $(tail -1 $OUT/build.log) / $(tail -1 $OUT/build-3d.log)"
  MLAJIT_CACHE_DIR=.gpu/lcdq MLAJIT_KERNEL_DIR=$PWD/.gpu/ks_dq timeout 200 build-gpu/tests/test_dsv4_layer_gpu --jobs 16 > $OUT/layer-dq.log 2>&1
  el "layer (dequant patch) rc $?"; tail -2 $OUT/layer-dq.log
  MLAJIT_CACHE_DIR=.gpu/lc3d timeout 200 .gpu/p3d/build-3d/tests/test_dsv4_layer_gpu --jobs 16 > $OUT/layer-3d.log 2>&1
  el "layer (3-D patch) rc $?"; tail -2 $OUT/layer-3d.log
  sq() { grep -E "^res " $1 | sed -E 's/^(.{34}).*: ([A-Za-z]+) .*  ([0-9.]+) us  ([0-9.]+) TB.*/\1 \2 \3 us \4 TB\/s/'; }
  paste <(sq $OUT/sgemm.log) <(sq $OUT/sgemm3d.log | cut -c35-)
else
  # bench TAG MLAJIT BINARY [VAR=VALUE ...]: case $c through one variant, a line tagged TAG
  bench() { local tag=$1 bin=$2; shift 2
    env "$@" timeout 40 $bin bench --iters 10 --case $c 2>&1 | grep "^$c " | sed "s/^/$tag /" >> $OUT/bench.txt; }
  for c in $cases; do
    bench "tree" build-gpu/mlajit MLAJIT_CACHE_DIR=.gpu/lc
    bench "3d  " .gpu/p3d/build-3d/mlajit MLAJIT_CACHE_DIR=.gpu/lc3d
    bench "dq  " build-gpu/mlajit MLAJIT_CACHE_DIR=.gpu/lcdq MLAJIT_KERNEL_DIR=$PWD/.gpu/ks_dq
    el "$c"
  done
  cut -c1-170 $OUT/bench.txt
fi
