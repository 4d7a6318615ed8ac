# Sourced on the lent GPU machine: exports the paths of the dependencies that
# ../shared/device/stage-deps.sh staged into ROOT/.deps (ROOT: the first argument, default $PWD).
deps=${1:-$PWD}/.deps/usr
export CMAKE_PREFIX_PATH=$deps PKG_CONFIG_PATH=$deps/lib/x86_64-linux-gnu/pkgconfig
export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
