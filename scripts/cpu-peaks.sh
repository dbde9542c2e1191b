#!/bin/sh
# What one core, and both cores at once, of this machine issue per second: 512- and 256-bit int8 dot products,
# f32 FMAs, and a mix (scripts/cpu_peaks/peaks.c). The ceilings under docs/performance.md's prefill and attention
# figures: e.g. a 512-bit vpdpbusd is 64 multiply-adds, so G/s × 64 is the int8 GMAC/s a core can reach.
# Usage: scripts/cpu-peaks.sh [cores] (default: every core `nproc` lists, one copy each, after one alone).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${TMPDIR:-/tmp}/ember-cpu-peaks
cc -O2 -o "$out" "$here/cpu_peaks/peaks.c"
grep -m1 -E '^cpu family' /proc/cpuinfo || true
grep -m1 -E '^model[[:space:]]' /proc/cpuinfo || true
echo "== one core"
"$out"
cores=${1:-$(nproc)}
echo "== $cores cores at once (each line per core)"
i=1
while [ "$i" -lt "$cores" ]; do
    "$out" > "$out.$i" &
    i=$((i + 1))
done
"$out"
wait
i=1
while [ "$i" -lt "$cores" ]; do
    cat "$out.$i"
    rm -f "$out.$i"
    i=$((i + 1))
done
