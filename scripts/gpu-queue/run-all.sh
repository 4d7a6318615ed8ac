#!/usr/bin/env bash
# Device side (lead): builds every queued snapshot under .gpu/ in parallel, then runs their
# commands one after another (one GPU), each under min(its SECONDS, CAP) seconds; each request's
# output folder goes back as $OUT/NAME.tgz. Usage on the device (repository root,
# .deps and .gpu carried): CAP=60 bash scripts/gpu-queue/run-all.sh
set -u
root=$PWD; OUT=${OUT:-/tmp/gpuq-out}; CAP=${CAP:-60}; work=/tmp/gpuq; mkdir -p "$OUT" "$work"
. "$root/scripts/device-env.sh" "$root"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
names=()
for d in "$root"/.gpu/*/; do
  [ -f "$d/REQUEST" ] || continue
  n=$(basename "$d"); names+=("$n"); mkdir -p "$work/$n"; cp "$d/REQUEST" "$work/$n/"
  ( cd "$d/src" && rm -rf .deps && ln -s "$root/.deps" .deps &&
    BUILD_DIR=build-gpu bash scripts/build.sh > "$work/$n/build.log" 2>&1; echo $? > "$work/$n/build.rc" ) &
done
wait; el "built ${names[*]}"
for n in "${names[@]}"; do
  d=$root/.gpu/$n; read -r seq secs rest < "$d/REQUEST"; lim=$(( secs < CAP ? secs : CAP ))
  if [ "$(cat "$work/$n/build.rc")" = 0 ]; then
    ( cd "$d/src" && OUT=$work/$n timeout "$lim" bash ../cmd.sh > "$work/$n/log.txt" 2>&1; echo $? > "$work/$n/rc" )
  else echo build-failed > "$work/$n/rc"; tail -30 "$work/$n/build.log"; fi
  el "$n/$seq rc $(cat "$work/$n/rc") (limit $lim s)"; tail -4 "$work/$n/log.txt" 2>/dev/null | cut -c1-200
  tar -czf "$OUT/$n.tgz" -C "$work" "$n"
done
el done
