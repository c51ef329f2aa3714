#!/usr/bin/env bash
# v74 d (one H200): issue 52's decode cells (bench/tk_layer_pieces.py around the peers' tk_layer.py, graph replay, L2
# flushed, TKL_REPS reps, T 1 and 8) on build y's extension (the merged decode change). Carry .carry/z and .peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/z/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/z/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; }
cp /tmp/y/py/_fp4gemm*.so python/fp4gemm/
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PYTHONPATH=$PWD/python:$PWD/.peers OUT=$R/tkp TKL_REPS=100 TKL_SILU=0 TKL_TOKENS=${TOK:-1,8} TKL_BUDGET_S=${BUDGET:-100} \
  timeout ${TMO:-170} python3 bench/tk_layer_pieces.py .peers/tk_layer.py > $R/tk_layer_pieces.txt 2>&1
echo "tk pieces rc=$? [$((SECONDS - t0)) s]"; grep -A 12 "CUDA graph replay" $R/tk_layer_pieces.txt | head -14
gzip -f $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
