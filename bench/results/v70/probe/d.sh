#!/usr/bin/env bash
# v70 d (one H200): issue 52's table on merged main (125f216; its extension = .carry/v110p, the branch's, same code):
# triton_kernels' layer and fp4gemm's on weights packed once into pieces with blocked scales (bench/tk_layer_pieces.py
# around the peers' unchanged tk_layer.py), 100 reps, graph replay, L2 flushed. Carry .carry/v110p and .peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
V=/tmp/v110p; mkdir -p $V; [ -f $V/done ] || { xz -dc .carry/v110p/bins.tar.xz | tar xf - -C $V; touch $V/done; }
cp $V/_fp4gemm*.so python/fp4gemm/
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PYTHONPATH=$PWD/python:$PWD/.peers OUT=$R/tkp TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=${BUDGET:-230} \
  timeout 330 python3 bench/tk_layer_pieces.py .peers/tk_layer.py > $R/tk_layer_pieces.txt 2>&1
echo "tk pieces rc=$? [$((SECONDS - t0)) s]"; grep -A 24 "CUDA graph replay" $R/tk_layer_pieces.txt | head -26
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
