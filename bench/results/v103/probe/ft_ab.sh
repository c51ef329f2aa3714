#!/usr/bin/env bash
# (Superseded by ft_one.sh, which needs one CLI; .carry/pg_w4.tar.xz was removed in session 116 as stale.)
# v103: exp/fused-trigger A/B. Two calls on one warm machine, each carrying one CPU-built CLI:
#   PART=main (carry .carry/pg_w4.tar.xz: main's kernels and launches as of 47cb47f -- exp/w4a4-pdl's CLI)
#   PART=ab   (carry .carry/pg_ft.tar.xz: the branch's CLI), then the layer suite W4A16 and W4A4 NVFP4 on pieces,
#             main / branch alternating, 2 rounds each, digests compared (v102's ab_layer.sh).
# Prediction: general-path cells (T >= 128 Qwen3, >= 256 gpt-oss) -1..-3 % (GEMM2's prologue and ring fill beside
# GEMM1's tail, the combine's launch beside GEMM2's), decode-path controls unchanged.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/ab
case "${PART:-ab}" in
  main) mkdir -p /tmp/ab/x && tar xJf .carry/pg_w4.tar.xz -C /tmp/ab/x && rm -rf /tmp/ab/main && mv /tmp/ab/x/w4 /tmp/ab/main && ls /tmp/ab ;;
  ab)
    tar xJf .carry/pg_ft.tar.xz -C /tmp/ab && ls /tmp/ab
    nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
    C=${CASES:-11,12,32,13,14,19,34,20,21,9,15}
    mkdir -p $OUT/w16 $OUT/w4
    ACT=bf16 bash bench/results/v102/probe/ab_layer.sh main ft $C $OUT/w16
    ACT=nvfp4 bash bench/results/v102/probe/ab_layer.sh main ft $C $OUT/w4 ;;
esac
