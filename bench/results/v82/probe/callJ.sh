#!/usr/bin/env bash
# v82 call J, prepared, not run (the session's device time was spent): where the fused kernel's gate/up shares end --
# per warp ("share walked", a new trace phase) and per CTA (its latest warp, and its warps' spread). Carry .carry/v12
# (t2/cli_trace: main's tools/fp4gemm built with -DFP4GEMM_TRACE=ON). If the per-CTA spread of warps is most of the
# 4-5 us between the median CTA's arrival and the last one's (gpt-oss T 8), a chunk-level rebalance inside the CTA pays;
# if whole CTAs are late, it does not.
cd "$(dirname "$0")/../../../.."
BUNDLE=v12 M=t2 NAME=j_trace bash bench/results/v82/probe/trace_t1.sh 2>&1 | grep -E "^==|^time|stream-K done|share walked|first chunk|exit|per CTA"
