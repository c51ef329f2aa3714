#!/usr/bin/env bash
# v60 c6: two more rounds of issue 52's decode cells (tk_layer.py, T 1 / 2 / 4 / 8, 100 reps, graph replay) with c3's
# package (= main's decode kernels), for the median / min / max over rounds (c3 is round 1). Carry .carry/v63 and .peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
xz -dc .carry/v63/bp.tar.xz | tar xf - -C .carry pkg
for rnd in 2 3; do mkdir -p $R/tk$rnd
  PYTHONPATH=$PWD/.carry/pkg:$PWD/.peers OUT=$R/tk$rnd TKL_TOKENS=1,2,4,8 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=120 \
    timeout 150 python3 .peers/tk_layer.py > $R/tk$rnd/tk_layer.txt 2>&1
  echo "round $rnd rc=$? [$((SECONDS - t0)) s]"; grep -A10 "CUDA graph replay" $R/tk$rnd/tk_layer.txt | head -11
done; tar czf $OUT/r.tgz -C $OUT r
