#!/usr/bin/env bash
# v61 c4 (one H200, ~6 min): main with the early trigger and the bounds 8 / 6 (W4A16 past H 3072)
# (carry .carry/v71: bp.tar.xz = .carry/build + .carry/pkg of that build, and .peers): its GPU tests, memcheck,
# racecheck on both scale layouts, issue 52's table (tk_layer.py, 100 reps, all T) and the Python GPU tier
# (the decode bound's default is now 8 tokens at these shapes: gpt-oss T 8 on the decode path).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
xz -dc .carry/v71/bp.tar.xz | tar xf - -C .carry
export FP4GEMM_CLI=$PWD/.carry/build/tools/fp4gemm
timeout 200 .carry/build/tests/fp4gemm_gpu_tests --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
timeout 150 compute-sanitizer --tool memcheck .carry/build/tests/fp4gemm_gpu_tests --gtest_filter='MoeLayerDecode.Every*:MoeLayerBiases*' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $R/memcheck.log | tail -1)"
for sl in blocked linear; do
  timeout 100 compute-sanitizer --tool racecheck $FP4GEMM_CLI layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --decode-tokens 8 --iters 1 --warmup 1 --act bf16 --values checkpoint --scales $sl --activation swigluoai > $R/racecheck_$sl.log 2>&1
  echo "racecheck $sl rc=$? $(grep -E 'RACECHECK SUMMARY' $R/racecheck_$sl.log | tail -1) [$((SECONDS - t0)) s]"; done
tar czf $OUT/r.tgz -C $OUT r
PYTHONPATH=$PWD/.carry/pkg:$PWD/.peers OUT=$R TKL_TOKENS=1,2,4,8,64,512,4096 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=200 \
  timeout 300 python3 .peers/tk_layer.py > $R/tk_layer.txt 2>&1
echo "tk_layer rc=$? [$((SECONDS - t0)) s]"; tar czf $OUT/r.tgz -C $OUT r
grep -A16 "CUDA graph replay" $R/tk_layer.txt | head -17
PYTHONPATH=$PWD/.carry/pkg timeout 190 python3 -m pytest -q -m gpu tests/python -x -p no:cacheprovider > $R/pytest_gpu.txt 2>&1
echo "pytest rc=$? [$((SECONDS - t0)) s]"; tail -3 $R/pytest_gpu.txt; tar czf $OUT/r.tgz -C $OUT r
