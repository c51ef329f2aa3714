#!/usr/bin/env bash
# v103 call 1: unpack main's CPU-built CLI for the exp/w4a4-pdl A/B (v102's next_w4a4_pdl.sh PART=main), then v102's
# prepared lanes micro with GEMM2's plain epilogue (next_lanes_plain.sh).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
PART=main bash bench/results/v102/probe/next_w4a4_pdl.sh
bash bench/results/v102/probe/next_lanes_plain.sh
