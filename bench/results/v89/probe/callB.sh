#!/usr/bin/env bash
# v89 call B (one H200): exp/wide-stages with the class rule that keeps the 160-256-token one-half classes off stage
# pairs (BUNDLE v47c: ws/{cli,gt,py}); main's CLI /tmp/c9/cli unpacked by the call before (carry .carry/v42).
# 1: callA.sh (CLI A/B, 2 rounds; layer suite digests W4A16 all cases, NVFP4 T >= 256).
# 2: issue 52's T 512 / 4096 cells against triton_kernels' layer (v80's table.sh: bench/tk_layer_pieces.py, graph
#    replay, L2 flushed, 100 reps, one round; carry .peers).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
NAME=${NAME:-b}_ab bash bench/results/v89/probe/callA.sh
M=ws TOK=512,4096 ROUNDS=1 HM=0 BUDGET=150 TMO=200 NAME=${NAME:-b}_table bash bench/results/v80/probe/table.sh
