#!/usr/bin/env bash
# Builds mlajit and runs its whole test suite. GPU tests run when a GPU is present and report as
# skipped otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
