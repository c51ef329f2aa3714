#!/usr/bin/env bash
# v56 call 9 (one H200): the working tree (warp-parallel decode routing, batched token staging, L2::128B weight loads),
# built on the CPU machine: routing / layer GPU tests (incl. the new top-8 decode cases), sanitizers on the decode test,
# randomized tier (fresh seed), layer / MoE Python GPU tests, then tk_layer's table (same run as triton_kernels).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg" TK_NUM_WARPS=8
R=$OUT/r; mkdir -p $R; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
T=.carry/build/tests/fp4gemm_gpu_tests
timeout 200 $T --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*' > $R/gtest.log 2>&1; echo "gtest rc=$?" | tee -a $R/rc.txt; tail -1 $R/gtest.log
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool $T --gtest_filter='MoeLayerDecode.Every*' > $R/$tool.log 2>&1; echo "$tool rc=$?" | tee -a $R/rc.txt; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/$tool.log | tail -2
done; snap sanitizers
FP4GEMM_RANDOM_LONG=80 FP4GEMM_RANDOM_SEED=$RANDOM timeout 120 python3 -m pytest -q -x -m gpu tests/python/test_random_sequences.py > $R/random.log 2>&1; echo "random rc=$?" | tee -a $R/rc.txt; tail -1 $R/random.log
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/python/test_moe_layer_gpu.py tests/python/test_moe_gpu.py > $R/py.log 2>&1
echo "python rc=$?" | tee -a $R/rc.txt; tail -1 $R/py.log; snap tests
PYTHONPATH="$PWD/.carry/pkg:$PWD/.peers" OUT=$R TKL_TOKENS=1,2,4,8,64,512,4096 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=240 \
  timeout 300 python3 .peers/tk_layer.py > $R/tk_layer.txt 2>&1
echo "tk_layer rc=$?" | tee -a $R/rc.txt; snap tk_layer
grep -A30 "median us per layer" $R/tk_layer.txt | head -40
