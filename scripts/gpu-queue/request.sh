#!/usr/bin/env bash
# Helper side: queue one GPU request. Run from the root of a git worktree.
# Usage: bash request.sh NAME SECONDS CMDFILE
#   NAME: the helper's name; SECONDS: the device time the command needs (capped by the lead);
#   CMDFILE: a bash script run on the device in the snapshot's root, with the snapshot built
#   in build-gpu/ (scripts/build.sh), the staged deps exported and $OUT its output folder
#   (keep it under 8 MB).
# The snapshot is every tracked and untracked-not-ignored file of the worktree (a precompiled
# kernel cache may travel this way: keep it small). The lead runs the queue; the results land in
# $GPUQ_RESULTS/NAME/SEQ/ (default /work/wt/results) with a DONE file when they are there.
# A helper has one slot: queuing again before the results are back replaces the pending
# request (same SEQ).
set -euo pipefail
name=$1; secs=$2; cmd=$3
main=${GPUQ_MAIN:-/work/main}; results=${GPUQ_RESULTS:-/work/wt/results}
[ -f "$cmd" ] || { echo "no command file $cmd"; exit 1; }
mkdir -p "$results/$name"
seq=$(( $(ls "$results/$name" | grep -c '^[0-9]*$' || true) + 1 ))
dest=$main/.gpu/$name
rm -rf "$dest.tmp"; mkdir -p "$dest.tmp/src"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$dest.tmp/src"
cp "$cmd" "$dest.tmp/cmd.sh"
echo "$seq $secs $(git rev-parse --short HEAD) $(date -u +%H:%M:%S)" > "$dest.tmp/REQUEST"
rm -rf "$dest"; mv "$dest.tmp" "$dest"
echo "queued $name/$seq ($(du -sh "$dest" | cut -f1)); results will be in $results/$name/$seq/ (DONE marks them)"
