#!/usr/bin/env bash
# v82 call D (carry .carry/v5): (1) p0 against q1 (evict_first) on weights in rows with linear scales -- the layout
# tk_layer.py and humming_layer.py hand fp4gemm -- where c3's Humming run read gpt-oss T 8 at 186.3 us (v81 c6:
# 169.8); (2) call C. Call E then traces the decode phases: BUNDLE=v6 NAME=e_trace bash .../trace_t1.sh (carry v6).
cd "$(dirname "$0")/../../../.."
BUNDLE=v5 VS="p0 q1" ROUNDS=2 ACT=bf16 WL=rows XARGS="--scales linear" CASES="gptoss 1;gptoss 8;gptoss 16;gptoss 64;qwen3 1;qwen3 8;qwen3 64" \
  NCUCASES="gptoss 8" NAME=d_rows_linear bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[0-9]|^ncu|done"
bash bench/results/v82/probe/callC.sh
