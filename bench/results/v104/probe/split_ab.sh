#!/usr/bin/env bash
# v104: exp/split-scales A/B. One carried CLI (.carry/both_split.tar.xz: pg/fp4gemm, built on the CPU machine from the branch), two
# arms by the knob FP4GEMM_EXP_SPLIT_SCALES: 0 (main's producers: one warp copies both halves' scale atoms) / 1 (warps 1
# and 3 a half each). Layer suite, W4A16 and W4A4 NVFP4, pieces, alternating, ROUNDS rounds of 100.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
tar xJf ${PG:-.carry/both_split.tar.xz} -C /tmp pg && mkdir -p /tmp/ab/m /tmp/ab/s
for k in m s; do v=0; [ $k = s ] && v=1
  printf '#!/bin/sh\nFP4GEMM_EXP_SPLIT_SCALES=%s exec /tmp/pg/fp4gemm "$@"\n' $v > /tmp/ab/$k/fp4gemm; chmod +x /tmp/ab/$k/fp4gemm; done
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
C=${CASES:-11,12,32,13,14,18,19,34,20,21}
export ROUNDS=${ROUNDS:-3}
mkdir -p $OUT/w16 $OUT/w4
ACT=bf16 bash bench/results/v102/probe/ab_layer.sh m s $C $OUT/w16
ACT=nvfp4 bash bench/results/v102/probe/ab_layer.sh m s $C $OUT/w4
rm -f $OUT/*/layer_*.txt
