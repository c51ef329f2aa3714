#!/usr/bin/env bash
# Call 4: the layer cases where main is > 1 % slower than 399676a, kernel by kernel (ncu durations,
# caches flushed before each kernel, per-kernel averages over the runs); general path on both.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./out}; mkdir -p "$OUT"
t0=$SECONDS
while read -r name args; do
  [ -z "$name" ] && continue
  for side in A B; do
    bin=.carry/cliOld/fp4gemm; extra=""; [ $side = B ] && bin=.carry/cliNew/fp4gemm && extra="--decode-tokens 0"
    echo "== $name $side"
    timeout 150 ncu --clock-control none --print-summary per-kernel --metrics gpu__time_duration.sum $bin layer $args $extra --warmup 2 --iters 3 2>&1 |
      grep -E "^  [a-z_].*\(|gpu__time_duration|invocations|Invocations" | sed 's/  */ /g' | cut -c1-150
    timeout 60 $bin layer $args $extra --warmup 10 --iters 100 2>&1 | grep -E "^time" | cut -c1-80
  done
  echo "[$name] $((SECONDS - t0)) s"
done <<LIST 2>&1 | tee "$OUT/layer_kernels.txt"
qwen3_nvfp4_T1 --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 1 --act nvfp4
qwen3_bf16_T4096 --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 4096 --act bf16
gptoss_nvfp4_T1024 --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 1024 --act nvfp4 --activation swigluoai
mixtral_nvfp4_T1024 --experts 8 --hidden 4096 --inter 14336 --topk 2 --tokens 1024 --act nvfp4
LIST
