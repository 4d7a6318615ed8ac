#!/usr/bin/env bash
# The main job on a fresh machine: install the dependencies, build, show what mlajit sees and
# fill the kernel cache with the default preset (for this machine's GPU, or for sm_100a and sm_90a
# without one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
build=${BUILD_DIR:-build}
"$build/mlajit" info
"$build/mlajit" precompile --preset dsv4-flash
