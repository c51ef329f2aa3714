#!/usr/bin/env bash
# v83 call K, prepared, not run (the session's device time was spent): the fair warp-weights probe (branch
# exp/warp-weights-lanes = probe/warp_weights_lanes_probe.patch on 02e6d63): the CTA's chunks shared in proportion to
# weights linear in the warp index, the starts held one per lane (no division on the hand-off's path). Carry .carry/v24:
# p0 = main's CLI; b0 / b40 / b80 = the branch built with -DWARP_BETA_MILLI=0 / 40 / 80 (b0: the mechanism's own cost,
# main's split); b40/gt = the GPU tests at 40 (correctness: decode + pieces tests, memcheck and racecheck of the wide
# and long-share tests). Rebuild the bundle if .carry/v24 is gone: NVCC_APPEND_FLAGS="-DWARP_BETA_MILLI=N" ninja
# fp4gemm_cli in a Release build of the branch.
cd "$(dirname "$0")/../../../.."
BUNDLE=v24 M=b40 MODES=tests GF='MoeLayerDecode.*:MoeLayerPieces.*' SANF='MoeLayerDecode.WidePath*:MoeLayerDecode.LongShares*' \
  NAME=k_tests bash bench/results/v79/probe/w.sh 2>&1 | tail -14
BUNDLE=v24 VS="p0 b0 b40 b80" ROUNDS=2 NCUCASES=" " NAME=k_ab \
  CASES="gptoss 1;gptoss 8;gptoss 16;gptoss 64;qwen3 1;qwen3 8;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done"
