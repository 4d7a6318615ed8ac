#!/usr/bin/env bash
# Configures and builds mlajit into ${BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cuda=${CUDA_HOME:-/usr/local/cuda}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
      -DCUDAToolkit_ROOT="$cuda" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
