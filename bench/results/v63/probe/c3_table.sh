#!/usr/bin/env bash
# v63 c3 (one H200, ~7 min): issue 52's table on main after exp/desc-redux (c1's package = main's tree): tk_layer all T,
# one round, and Humming 0.1.19 (bench/humming_layer.py, the wheel carried in .peers/wheels) in the same call.
# Carry .carry/v82 and .peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; V=/tmp/v82; mkdir -p $V $OUT/r
xz -dc .carry/v82/bins.tar.xz | tar xf - -C $V
mkdir -p .carry && rm -rf .carry/pkg && cp -r $V/pkg .carry/
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PYTHONPATH=$PWD/.carry/pkg:$PWD/.peers OUT=$OUT/r/tk TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=200 \
  timeout 260 python3 .peers/tk_layer.py > $OUT/r/tk_layer.txt 2>&1
echo "tk rc=$? [$((SECONDS - t0)) s]"; grep -A 20 "CUDA graph replay" $OUT/r/tk_layer.txt | head -20
tar czf $OUT/r.tgz -C $OUT r
python3 -m pip install --no-deps --no-index .peers/wheels/*.whl --target .peers/site > $OUT/r/pip.txt 2>&1
PYTHONPATH=$PWD/.peers/site:$PWD/.carry/pkg OUT=$OUT/r/hm HML_BUDGET_S=200 timeout 280 python3 bench/humming_layer.py > $OUT/r/humming.txt 2>&1
echo "humming rc=$? [$((SECONDS - t0)) s]"; tail -30 $OUT/r/humming.txt
tar czf $OUT/r.tgz -C $OUT r
