#!/usr/bin/env bash
# v83 call L, prepared, not run (the session's device time was spent): the wide decode path without its pre-pass
# (branch exp/wide-inline-routing = probe/wide_inline_routing_probe.patch, which applies to main c24f40f): every CTA of both wide kernels
# numbers the slots from the ids itself instead of waiting for the one-CTA pre-pass (~4.5 us under ncu at T 64, serial
# before kernel 1's first copies: kernel 1's first chunk at ~8.8 us against ~5 in the fused kernel, c5). Carry
# .carry/v25: p0 = main's CLI, wi = the branch's CLI and GPU tests. Rebuild the bundle from the branch if it is gone.
# Then: its decode / pieces tests (W4A16 and W4A4 wide included), memcheck and racecheck of the wide and long-share
# tests; p0 / wi on the wide cells, W4A16 and W4A4 NVFP4, two rounds.
cd "$(dirname "$0")/../../../.."
BUNDLE=v25 M=wi MODES=tests GF='MoeLayerDecode.*:MoeLayerPieces.*' SANF='MoeLayerDecode.WidePath*:MoeLayerDecode.LongShares*' \
  NAME=l_tests bash bench/results/v79/probe/w.sh 2>&1 | tail -14
BUNDLE=v25 VS="p0 wi" ROUNDS=2 NCUCASES=" " NAME=l_ab16 \
  CASES="gptoss 9;gptoss 16;gptoss 32;gptoss 64;qwen3 9;qwen3 16;qwen3 32;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done"
BUNDLE=v25 VS="p0 wi" ROUNDS=2 NCUCASES=" " NAME=l_ab44 ACT=nvfp4 \
  CASES="gptoss 16;gptoss 32;qwen3 16;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done"
