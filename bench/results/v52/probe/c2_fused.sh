#!/usr/bin/env bash
# Session 67, call 2 (one H200): the split-K decode kernel (FP4GEMM_DECODE_FUSED=1) -- its tests
# (MoeLayerDecode.* runs it beside the two kernels and the general path), memcheck and racecheck on
# it, then the A/B timing against the two kernels (fused_ab.py). Carry .carry/build .carry/pkg.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg"
R=$OUT/r; mkdir -p $R; t0=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.txt
BIN=.carry/build/tests/fp4gemm_gpu_tests
timeout 120 $BIN --gtest_filter='MoeLayerDecode*:*MoeLayerCases.*/case0:*MoeLayerBiases*' > $R/gtest.log 2>&1
echo "gtest rc=$? $((SECONDS - t0)) s"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|error" $R/gtest.log | head -12
TOKENS=1,2,3,4 ROUNDS=2 timeout 200 python3 bench/results/v52/probe/fused_ab.py > $R/ab.txt 2>&1
echo "ab rc=$? $((SECONDS - t0)) s"; cat $R/ab.txt | cut -c1-400
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN --gtest_filter='MoeLayerDecode.Every*' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.log | head -4
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN --gtest_filter='MoeLayerDecode.Every*' > $R/racecheck.log 2>&1
echo "racecheck rc=$? $((SECONDS - t0)) s"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" $R/racecheck.log | head -4
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
