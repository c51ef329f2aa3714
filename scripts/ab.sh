#!/usr/bin/env bash
# A/B timings of the seed cases with `fp4gemm grouped` (L2 flushed, median): one line per
# (variant, case). Usage: scripts/ab.sh [ENV=VALUE,...|LABEL]...  e.g. scripts/ab.sh base FP4GEMM_SPLIT_K=0
# (a variant without '=' is only a label: no environment change).
# BIN=path/to/fp4gemm picks another build; LAYOUT=blocked|linear (default linear); EXTRA=1 more shapes.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BIN:-build/device/tools/fp4gemm}
cases=("case1|--m 80,176,128,72,64,248,96,160 --n 4096 --k 7168" "case2|--m 40,76,168,72,164,148,196,160 --n 7168 --k 2048"
       "case3|--m 192,320 --n 3072 --k 4096" "case4|--m 128,384 --n 4096 --k 1536" "dense1|--m 8192 --n 8192 --k 1024"
       "dense2|--m 2048 --n 2048 --k 512")
# EXTRA=1 adds the schedule calibration shapes of docs/PERF.md v10-v11 (N 4096, K 2048).
[ -n "${EXTRA:-}" ] && cases+=("t200x2|--m 200,200 --n 4096 --k 2048" "t256|--m 256 --n 4096 --k 2048" "t512|--m 512 --n 4096 --k 2048"
                               "t64x4|--m 64,64,64,64 --n 4096 --k 2048" "t1024|--m 1024 --n 4096 --k 2048")
for variant in "${@:-base}"; do
  envs=(); [[ "$variant" == *=* ]] && IFS=, read -ra envs <<< "$variant"
  for c in "${cases[@]}"; do
    name=${c%%|*}; args=${c#*|}
    line=$(timeout 60 env "${envs[@]}" "$B" grouped $args --layout "${LAYOUT:-linear}" --iters ${ITERS:-100} 2>&1 | tail -1)
    printf '%-40s %-7s %s\n' "$variant" "$name" "$line"
  done
done
