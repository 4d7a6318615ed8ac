#!/usr/bin/env bash
# Installs mlajit's build and test dependencies from Debian's packages (needs root or sudo).
# The CUDA toolkit (NVRTC and headers) is expected at $CUDA_HOME or /usr/local/cuda.
set -euo pipefail
pkgs="cmake make gcc pkg-config libcjson-dev libcriterion-dev libdlpack-dev libxxhash-dev"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends $missing
fi
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/nvrtc.h" ]; then
  echo "install-deps: no CUDA toolkit at $cuda (set CUDA_HOME); mlajit needs its NVRTC" >&2
  exit 1
fi
echo "install-deps: ok (CUDA toolkit at $cuda)"
