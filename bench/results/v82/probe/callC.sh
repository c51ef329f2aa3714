#!/usr/bin/env bash
# v82 call C (q1): p0 against q1 on W4A4 NVFP4 decode cells and on W4A16 with linear scales (wide forced: 64, against
# the general path: 8); NVFP4's wide bound at gpt-oss's experts; then ncu DRAM bytes of the general path at T 512 / 4096.
cd "$(dirname "$0")/../../../.."
BUNDLE=${CB:-v5} VS="p0 q1" ROUNDS=1 ACT=nvfp4 CASES="gptoss 1;gptoss 8;gptoss 16;qwen3 1;qwen3 8;qwen3 64" NCUCASES=" " \
  NAME=c_nvfp4 bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[0-9]|done"
for d in 8 64; do
BUNDLE=${CB:-v5} VS="p0 q1" ROUNDS=1 ACT=bf16 XARGS="--scales linear --decode-tokens $d" CASES="gptoss 16;gptoss 32;gptoss 64;qwen3 64" NCUCASES=" " \
  NAME=c_linear_d$d bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[0-9]|done" | sed "s/^/linear d$d /"
done
for d in 8 64; do
BUNDLE=${CB:-v5} VS="q1" ROUNDS=1 ACT=nvfp4 XARGS="--decode-tokens $d" CASES="gptoss 24;gptoss 32;gptoss 48;gptoss 64" NCUCASES=" " \
  NAME=c_nvfp4_bound_d$d bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[0-9]|done" | sed "s/^/nvfp4 d$d /"
done
BUNDLE=${CB:-v5} M=q1 CASES="gptoss 512 blocked -1;qwen3 512 blocked -1;qwen3 4096 blocked -1" NAME=c_ncu_general \
  bash bench/results/v82/probe/ncu_cells.sh 2>&1 | tail -30
