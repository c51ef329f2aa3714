#!/usr/bin/env bash
# v84 call A (one H200): v83's prepared calls L and K, timing halves in one call (carry .carry/v26: p0 = main 0e2210d's
# CLI; wi = exp/wide-inline-routing (v83/probe/wide_inline_routing_probe.patch on main) CLI + GPU tests; b0 / b40 / b80 =
# v83/probe/warp_weights_lanes_probe.patch on main built with -DWARP_BETA_MILLI=0 / 40 / 80, b40 with its GPU tests).
# The bundle: tar of /tmp/bun/{p0,wi,b0,b40,b80} (stripped), xz with a 192 MiB dictionary (the binaries share most bytes).
cd "$(dirname "$0")/../../../.."
export BUNDLE=${BUNDLE:-v26}
VS="p0 wi" ROUNDS=2 NCUCASES=" " NAME=l_ab16 \
  CASES="gptoss 9;gptoss 16;gptoss 32;gptoss 64;qwen3 9;qwen3 16;qwen3 32;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done|unpacked"
VS="p0 wi" ROUNDS=2 NCUCASES=" " NAME=l_ab44 ACT=nvfp4 \
  CASES="gptoss 16;gptoss 32;qwen3 16;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done"
VS="p0 b0 b40 b80" ROUNDS=2 NCUCASES=" " NAME=k_ab \
  CASES="gptoss 1;gptoss 8;gptoss 16;gptoss 64;qwen3 1;qwen3 8;qwen3 64" bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[12]|done"
