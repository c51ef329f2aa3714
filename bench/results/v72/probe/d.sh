#!/usr/bin/env bash
# v72 d (one H200): issue 52's table (bench/tk_layer_pieces.py around the peers' tk_layer.py; 100 reps, graph replay,
# L2 flushed) with the Python extension PYEXT (py_new: exp/pair-barrier, py_main: main) unpacked into /tmp/v116
# by c.sh's calls. Carry .peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
B=/tmp/v116; mkdir -p $B
for c in v116n v116m; do [ -f $B/$c.done ] || [ ! -f .carry/$c/b.tar.xz ] || { xz -dc .carry/$c/b.tar.xz | tar xf - -C $B; touch $B/$c.done; }; done
cp $B/${PYEXT:-py_new}/_fp4gemm*.so python/fp4gemm/
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PYTHONPATH=$PWD/python:$PWD/.peers OUT=$R/tkp TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=${BUDGET:-230} \
  timeout 330 python3 bench/tk_layer_pieces.py .peers/tk_layer.py > $R/tk_layer_pieces.txt 2>&1
echo "tk pieces rc=$? [$((SECONDS - t0)) s]"; grep -A 24 "CUDA graph replay" $R/tk_layer_pieces.txt | head -26
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
