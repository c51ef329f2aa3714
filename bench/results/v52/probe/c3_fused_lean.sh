#!/usr/bin/env bash
# Session 67, call 3 (one H200): the split-K kernel with its down loop slimmed (per-item constants
# hoisted, code bit offsets recorded when the copies are issued): tests, A/B against the two kernels,
# and ncu of both paths' kernels at gpt-oss W4A16 T 1 (where the time goes).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg"
R=$OUT/r; mkdir -p $R; t0=$SECONDS
BIN=.carry/build/tests/fp4gemm_gpu_tests
timeout 100 $BIN --gtest_filter='MoeLayerDecode*:*MoeLayerBiases*' > $R/gtest.log 2>&1
echo "gtest rc=$? $((SECONDS - t0)) s"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/gtest.log | head -8
TOKENS=1,2,4 ROUNDS=2 timeout 150 python3 bench/results/v52/probe/fused_ab.py > $R/ab.txt 2>&1
echo "ab rc=$? $((SECONDS - t0)) s"; grep -v "^  GEMM\|^#" $R/ab.txt | cut -c1-330
MODELS=gptoss ACTS=bf16 TOKENS=1 ROUNDS=1 REPS=2 timeout 200 ncu --clock-control none --graph-profiling node \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
  -k regex:decode python3 bench/results/v52/probe/fused_ab.py > $R/ncu.txt 2>&1
echo "ncu rc=$? $((SECONDS - t0)) s"
grep -E "decode_(gate_up|down_combine|fused)|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc Active|Stall" $R/ncu.txt | head -60
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
