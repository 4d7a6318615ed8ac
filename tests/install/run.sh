#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs a consumer through
# find_package(mlajit) (shared and static) and through pkg-config.
# Usage: run.sh <build dir> <source dir>
set -euo pipefail
build=$1; src=$2
work=$(mktemp -d /tmp/mlajit-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/install" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
libdir=$(dirname "$(find "$work/prefix" -name 'libmlajit.so' | head -1)")
export LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}"
"$work/consumer/consumer_shared"
"$work/consumer/consumer_static"
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
cc -o "$work/consumer_pc" "$src/tests/install/consumer.c" $(pkg-config --cflags --libs mlajit)
"$work/consumer_pc"
echo "install test: 3 consumers built and ran"
