#!/usr/bin/env bash
# v54 call 5 (one H200): main aa172c4 (f16 NVFP4 decode, kernel 2's acq_rel tail, block-aligned shares), built on the
# CPU machine (.carry/build, .carry/pkg): randomized GPU tier (fresh seed), the layer / MoE Python GPU tests, memcheck
# of the decode test through the CLI binary's tests, then issue 52's table with triton_kernels' layer in the same run.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg" TK_NUM_WARPS=8
R=$OUT/r; mkdir -p $R; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
T=.carry/build/tests/fp4gemm_gpu_tests
timeout 100 $T --gtest_filter='MoeLayer*' > $R/gtest.log 2>&1; echo "gtest rc=$?" | tee -a $R/rc.txt; tail -1 $R/gtest.log
FP4GEMM_RANDOM_LONG=80 FP4GEMM_RANDOM_SEED=$RANDOM timeout 120 python3 -m pytest -q -x -m gpu tests/python/test_random_sequences.py > $R/random.log 2>&1; echo "random rc=$?" | tee -a $R/rc.txt; tail -1 $R/random.log
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/python/test_moe_layer_gpu.py tests/python/test_moe_gpu.py > $R/py.log 2>&1
echo "python rc=$?" | tee -a $R/rc.txt; tail -1 $R/py.log; snap tests
PYTHONPATH="$PWD/.carry/pkg:$PWD/.peers" OUT=$R TKL_TOKENS=1,2,4,8,64,512,4096 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=260 \
  timeout 330 python3 .peers/tk_layer.py > $R/tk_layer.txt 2>&1
echo "tk_layer rc=$?" | tee -a $R/rc.txt; snap tk_layer
