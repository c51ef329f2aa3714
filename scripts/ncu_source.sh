#!/usr/bin/env bash
# Per-instruction (SASS) stall samples of the fused kernel on one problem, as CSV, for reading
# where the consumer warps wait. Usage: scripts/ncu_source.sh OUTFILE.csv [fp4gemm args...]
# (default problem: seed case 1). Needs build/device.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build/device}/tools/fp4gemm
out=$1; shift
args=("$@"); [ ${#args[@]} -eq 0 ] && args=(grouped --m 80,176,128,72,64,248,96,160 --n 4096 --k 7168 --layout blocked)
rep=/tmp/ncu_source_$$
timeout 300 ncu --clock-control none --section SourceCounters --section WarpStateStats --import-source no \
  -k regex:fused_grouped_gemm -s 1 -c 1 -f -o "$rep" "$B" "${args[@]}" --iters 2 --warmup 1 > /dev/null 2>&1
ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$out" 2> "$out.err" ||
  { ncu --help | grep -iE -A2 "page|print-source" > "$out.err"; }
wc -l "$out"
