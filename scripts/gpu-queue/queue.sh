#!/usr/bin/env bash
# Lead side: the queued requests (name, seq, seconds, commit, time queued) and their size.
main=${GPUQ_MAIN:-/work/main}
for d in "$main"/.gpu/*/; do [ -f "$d/REQUEST" ] && echo "$(basename "$d"): $(cat "$d/REQUEST") $(du -sh "$d" | cut -f1)"; done
du -sh "$main/.gpu" "$main/.deps" 2>/dev/null
