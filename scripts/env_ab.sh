#!/usr/bin/env bash
# A/B of one fp4gemm CLI command under environment variants, alternating rounds in one call (so
# clocks and neighbours drift alike for every variant): one line per (round, variant, command).
# Usage: scripts/env_ab.sh ROUNDS 'VARIANT1' 'VARIANT2' ... -- fp4gemm-args...
#   a variant is ENV=VALUE[,ENV=VALUE] or a bare label (no change); BIN=path inside a variant runs
#   that variant on another build of the CLI (e.g. the last commit's, for a before/after A/B);
#   each printed line is the command's last line matching $KEEP (default "time|us").
# BIN=path picks the CLI (default build/device/tools/fp4gemm).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BIN:-build/device/tools/fp4gemm}
rounds=$1; shift
variants=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do variants+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#variants[@]} -gt 0 ] && [ $# -gt 0 ] || { echo "usage: $0 ROUNDS VARIANT... -- ARGS..." >&2; exit 2; }
for r in $(seq 1 "$rounds"); do
  for v in "${variants[@]}"; do
    envs=(); [[ "$v" == *=* ]] && IFS=, read -ra envs <<< "$v"
    bin=$B; kept=()
    for e in "${envs[@]}"; do if [[ "$e" == BIN=* ]]; then bin=${e#BIN=}; else kept+=("$e"); fi; done
    out=$(timeout 300 env "${kept[@]}" "$bin" "$@" 2>&1)
    echo "$out" | grep -E "${KEEP:-time|us}" | sed "s|^|round $r  $v  |"
  done
done
