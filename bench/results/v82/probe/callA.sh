#!/usr/bin/env bash
# v82 call A: q1 (the evict_first build) decode + pieces gtests, memcheck and racecheck of the wide and long-share
# tests; then p0 (before) against q1 on W4A4 NVFP4 decode cells and on W4A16 with linear scales (wide forced: 64,
# against the general path: 8).
cd "$(dirname "$0")/../../../.."
BUNDLE=v5 M=q1 MODES=tests GF='MoeLayerDecode.*:MoeLayerPieces.*' SANF='MoeLayerDecode.WidePath*:MoeLayerDecode.LongShares*' \
  NAME=a_tests bash bench/results/v79/probe/w.sh 2>&1 | tail -14
BUNDLE=v5 VS="p0 q1" ROUNDS=2 ACT=nvfp4 CASES="gptoss 1;gptoss 8;gptoss 16;gptoss 24;qwen3 1;qwen3 8;qwen3 32;qwen3 64" NCUCASES=" " \
  NAME=a_nvfp4 bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[0-9]|done"
for d in 8 64; do
BUNDLE=v5 VS="p0 q1" ROUNDS=1 ACT=bf16 XARGS="--scales linear --decode-tokens $d" CASES="gptoss 16;gptoss 32;gptoss 64;qwen3 32;qwen3 64" NCUCASES=" " \
  NAME=a_linear_d$d bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[0-9]|done" | sed "s/^/d$d /"
done
for d in 8 64; do
BUNDLE=v5 VS="q1" ROUNDS=1 ACT=nvfp4 WL=pieces XARGS="--decode-tokens $d" CASES="gptoss 24;gptoss 32;gptoss 48;gptoss 64" NCUCASES=" " \
  NAME=a_nvfp4_bound_d$d bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[0-9]|done" | sed "s/^/nvfp4 d$d /"
done
