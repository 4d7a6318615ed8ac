#!/usr/bin/env bash
# On the lent GPU machine (no package registry): build with the dependencies staged by
# ../shared/device/stage-deps.sh .deps (carried with the run), run the whole test suite and the
# benchmarks. Logs go to $OUT. Usage: bash scripts/device-run.sh [test|bench|all] [ctest args...]
# CTEST_JOBS (default 4): parallel tests; BENCH_CASES: space-separated `mlajit bench --case` names
# (default: every case).
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}; shift || true
out=${OUT:-/tmp/mlajit-out}
mkdir -p "$out"
. scripts/device-env.sh
export BUILD_DIR=build-gpu
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv > "$out/gpu.txt" 2>&1
if ! bash scripts/build.sh > "$out/build.log" 2>&1; then
  tail -50 "$out/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "build ok"
rc=0
if [ "$what" = test ] || [ "$what" = all ]; then
  ctest --test-dir build-gpu --output-on-failure -j "${CTEST_JOBS:-4}" "$@" > "$out/ctest.log" 2>&1 || rc=1
  grep -E "tests passed|tests failed|Failed|\*\*\*|Skipped|Not Run" "$out/ctest.log" | tail -30
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  build-gpu/mlajit info > "$out/info.txt" 2>&1
  cases=(); for c in ${BENCH_CASES:-}; do cases+=(--case "$c"); done
  stdbuf -oL build-gpu/mlajit bench "${cases[@]}" --json "$out/bench.json" > "$out/bench.txt" 2>&1 || rc=1
  cat "$out/info.txt" "$out/bench.txt"
fi
exit $rc
