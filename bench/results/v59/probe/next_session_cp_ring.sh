#!/usr/bin/env bash
# For the next session (one H200, ~6 min): why the cp.async ring (branch decode-cp-ring, fa1a689) is 4-12 % faster on every
# decode cell of the CLI (blocked scales) but 8 / 12 % slower at Qwen3 T 4 / 8 in tk_layer (linear scales, interleaved
# w13, ids sorted per token; v59 c9 against v58's table). Carry .carry/pkg_ring (the branch's package), .carry/pkg_main (main's,
# 1efc4d5's kernels) and .peers.
#   1. c10_qwen_tk.py with both packages, twice: linear vs blocked scales x interleaved/swigluoai vs stacked/silu x ids
#      sorted or not, Qwen3 T 1 / 4 / 8 (the condition that makes the ring slower)
#   2. tk_layer.py with both packages in the same call (Qwen3 and gpt-oss, T 1-8: a same-run baseline for the table)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for r in 1 2; do for v in pkg_main pkg_ring; do
  PYTHONPATH=$PWD/.carry/$v timeout 150 python3 bench/results/v59/probe/c10_qwen_tk.py $v > $R/c10_${v}_$r.txt 2>&1
done; done; echo "[$((SECONDS - t0)) s] c10"; tar czf $OUT/r.tgz -C $OUT r
for v in pkg_main pkg_ring; do mkdir -p $R/tk_$v
  PYTHONPATH=$PWD/.carry/$v:$PWD/.peers OUT=$R/tk_$v TKL_TOKENS=1,2,4,8 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=120 \
    timeout 200 python3 .peers/tk_layer.py > $R/tk_$v/tk_layer.txt 2>&1
done; echo "[$((SECONDS - t0)) s] tk_layer"; tar czf $OUT/r.tgz -C $OUT r
paste <(sort $R/c10_pkg_main_1.txt) <(sort $R/c10_pkg_ring_1.txt) | head -30
for v in pkg_main pkg_ring; do echo "== $v"; grep -A16 "CUDA graph replay" $R/tk_$v/tk_layer.txt | head -12; done
