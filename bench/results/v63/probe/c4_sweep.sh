#!/usr/bin/env bash
# v63 c4 (one H200, ~2 min): mixtral down T 1024 (c0/c2: +2-4 % against 399676a, ncu: same SM-active cycles, a longer
# tail) under the schedule's knobs, 399676a's CLI (A) and main's (D): tile tokens and the wide / narrow cost models.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v82; mkdir -p $V $OUT/r; xz -dc .carry/v82/bins.tar.xz | tar xf - -C $V
M="moe --experts 8 --n 4096 --k 14336 --tokens 1024 --topk 2 --scales linear --out f16 --values full --iters 60"
for act in bf16 nvfp4; do for knob in "" FP4GEMM_TILE_TOKENS=128 FP4GEMM_TILE_TOKENS=144 FP4GEMM_TILE_TOKENS=192 FP4GEMM_TILE_TOKENS=240 \
    FP4GEMM_WIDE_COST=140 FP4GEMM_WIDE_COST=190 FP4GEMM_NARROW_COST=300 FP4GEMM_NARROW_COST=430 FP4GEMM_RING_KB=160; do
  line="$act ${knob:-default}:"
  for side in A D; do bin=$V/cli_old; [ $side = D ] && bin=$V/build/tools/fp4gemm
    t=$(env $knob timeout 60 $bin $M --act $act 2>&1 | grep -m1 '^time' | awk '{print $2}'); line="$line $side $t"; done
  echo "$line"; done; done | tee $OUT/r/sweep.txt
