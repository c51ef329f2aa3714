#!/usr/bin/env bash
# Session 67, call 7 (one H200): the Python layer / MoE GPU tests again after the fused_experts cache fix
# (options compared as the layer's floats), then issue 52's table on main's final build with
# triton_kernels' layer in the same run (.peers = ../shared/peers, carried): W4A16, T 1, 2, 4, 8, 64, 512,
# 4096, 100 reps per case.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg" TK_NUM_WARPS=8
R=$OUT/r; mkdir -p $R; t0=$SECONDS
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/python/test_moe_layer_gpu.py tests/python/test_moe_gpu.py \
  tests/python/test_dual_gpu.py > $R/py.log 2>&1
echo "python rc=$? $((SECONDS - t0)) s"; grep -E "^(FAILED|ERROR)|passed|failed" $R/py.log | tail -6
PYTHONPATH="$PWD/.carry/pkg:$PWD/.peers" OUT=$R TKL_TOKENS=1,2,4,8,64,512,4096 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=280 \
  timeout 400 python3 .peers/tk_layer.py > $R/tk_layer.txt 2>&1
echo "tk_layer rc=$? $((SECONDS - t0)) s"; grep -vE "^\s*$" $R/tk_layer.txt | tail -40
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
