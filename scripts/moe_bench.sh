#!/bin/bash
# The MoE GEMM against triton_kernels' four shapes (docs/PERF.md), decode, and the dynamic-routing
# loop, through the CLI; logs to $OUT/moe_cli.txt. Usage: scripts/moe_bench.sh [BUILD_DIR]
# Shapes (the peers' script .peers/tk_bench.py has the same E / T / top-k; the CLI draws its own
# uniform routing): (a) E 32, T 36 top-8; (b) E 128, T 256 top-8; (c) E 256, T 256 top-8;
# (d) E 8, T 4096 top-4 (balanced).
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
OUT=${OUT:-device-out}
mkdir -p "$OUT"
bin="$BUILD/tools/fp4gemm"
[ -x "$bin" ] || { echo "moe_bench: $bin not built" >&2; exit 1; }
shapes=("a:--experts 32 --n 4096 --k 7168 --tokens 36 --topk 8"
        "b:--experts 128 --n 1536 --k 2048 --tokens 256 --topk 8"
        "c:--experts 256 --n 2048 --k 7168 --tokens 256 --topk 8"
        "d:--experts 8 --n 4096 --k 7168 --tokens 4096 --topk 4 --routing balanced")
{
  nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
  for act in nvfp4 bf16; do
    for s in "${shapes[@]}"; do
      name=${s%%:*}; args=${s#*:}
      extra=""; [ "$name" = b ] && extra="--dynamic"
      printf '%s %-5s ' "$name" "$act"
      "$bin" moe $args --act "$act" $extra ${MOE_ARGS:-} 2>&1 | grep -E "time:|dynamic" | tr '\n' ' '
      echo
    done
  done
  for act in nvfp4 bf16; do
    printf 'decode T=1 qwen gate-up %-5s ' "$act"
    "$bin" moe --experts 128 --n 1536 --k 2048 --tokens 1 --topk 8 --act "$act" 2>&1 | grep -E "time:" | tr '\n' ' '
    echo
    printf 'decode T=16 dsv3 gate-up %-5s ' "$act"
    "$bin" moe --experts 256 --n 4096 --k 7168 --tokens 16 --topk 8 --act "$act" 2>&1 | grep -E "time:" | tr '\n' ' '
    echo
  done
} | tee "$OUT/moe_cli.txt"
