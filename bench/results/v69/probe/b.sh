#!/usr/bin/env bash
# v69 b (one H200): (1) the MoE GEMMs of issue 52's T 64 / 512 cells (gpt-oss GEMM1 as a plain 5760 x 2880 GEMM,
# GEMM2 2880 x 2880, top-4; Qwen3 1536 x 2048 and 2048 x 768, top-8; W4A16) under each live Tuning knob
# (CLI `moe`, L2 flushed, median of 100), 2 rounds; (2) main d01c3fa's pieces / CLI gtests (.carry/v106t).
# Carry .carry/v107c (main's CLI, 09:16 build: d01c3fa changed no device code) and .carry/v106t.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
C=/tmp/v107c; mkdir -p $C; xz -dc .carry/v107c/fp4gemm.xz > $C/fp4gemm; chmod +x $C/fp4gemm
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
if [ -d .carry/v106t ]; then G=/tmp/v106t; mkdir -p $G; xz -dc .carry/v106t/bins.tar.xz | tar xf - -C $G
  FP4GEMM_CLI=$C/fp4gemm timeout 120 $G/gt --gtest_filter='MoePieces*:MoeRandomPieces*:CliGpu*:MoeLayerPieces*' > $R/gt_pieces.txt 2>&1
  echo "gt pieces rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $R/gt_pieces.txt | head -8
fi
shapes="g1:5760:2880:4 g2:2880:2880:4 q1:1536:2048:8 q2:2048:768:8"
cfgs="base pieces TILE_TOKENS=8 TILE_TOKENS=16 TILE_TOKENS=32 NARROW_ROWS=128 NARROW_ROWS=256 RING_KB=96 RING_KB=160 SPLIT_K=0 MOE_SPLIT_GAIN=0:0"
for round in 1 2; do [ $((SECONDS - t0)) -gt 300 ] && break; for T in 64 512; do for sh in $shapes; do
  IFS=: read nm n k tk <<< "$sh"
  for cfg in $cfgs; do
    extra=""; envs=""
    case $cfg in base) ;; pieces) extra="--weight-layout pieces" ;; *) envs="FP4GEMM_$cfg" ;; esac
    f=$R/${nm}_T${T}_${cfg//[=:]/_}_r$round.txt
    env $envs timeout 60 $C/fp4gemm moe --experts 128 --n $n --k $k --tokens $T --topk $tk --act bf16 $extra > $f 2>&1
    echo "$round T$T $nm $cfg $(grep -oE 'time: [0-9.]+ us \(median of [0-9]+, min [0-9.]+\)' $f | sed 's/median of [0-9]*, //') $(grep -oE '[0-9.]+ TB/s' $f)"
  done
  grep "^plan:" $R/${nm}_T${T}_base_r$round.txt | cut -c1-300
done; done; echo "[round $round: $((SECONDS - t0)) s]"; done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
