#!/usr/bin/env bash
# Lead side: after a device run of run-all.sh, unpack each NAME.tgz of FILES_AT into
# $GPUQ_RESULTS/NAME/SEQ/ and drop the request from .gpu/ (unless the helper queued a newer one).
# Usage: bash collect.sh FILES_AT
set -euo pipefail
at=$1; main=${GPUQ_MAIN:-/work/main}; results=${GPUQ_RESULTS:-/work/wt/results}
for t in "$at"/*.tgz; do
  n=$(basename "$t" .tgz); tmp=$(mktemp -d); tar -xzf "$t" -C "$tmp"
  read -r seq rest < "$tmp/$n/REQUEST"; dst=$results/$n/$seq
  rm -rf "$dst"; mkdir -p "$dst"; cp -r "$tmp/$n/." "$dst/"; touch "$dst/DONE"; rm -rf "$tmp"
  if [ -f "$main/.gpu/$n/REQUEST" ] && [ "$(cut -d' ' -f1 "$main/.gpu/$n/REQUEST")" = "$seq" ]; then
    rm -rf "$main/.gpu/$n"; fi
  echo "$n/$seq: rc $(cat "$dst/rc" 2>/dev/null)"
done
