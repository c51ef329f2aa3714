#!/usr/bin/env bash
# v104: main's whole C++ GPU tier (the CPU-built test binary of main ee21c3b = 2d4506b's source, carried as
# .carry/gt_main.tar.xz), then memcheck / racecheck / synccheck of the general-path graph replays (W4A16 with the
# GEMMs' early trigger and the combine as a programmatic dependent; W4A4) and memcheck of the combine suites.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/t; mkdir -p $R /tmp/gt
tar xJf ${GT:-.carry/gt_main.tar.xz} -C /tmp/gt
B=/tmp/gt/gt/fp4gemm_gpu_tests
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
t0=$SECONDS
timeout ${TT:-400} $B --gtest_brief=1 ${FILTER:+--gtest_filter=$FILTER} > $R/gtests.txt 2>&1
echo "gtests rc $? [$((SECONDS - t0)) s]"; grep -E "PASSED|FAILED|tests ran" $R/gtests.txt | head -20
for tool in memcheck racecheck synccheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $B \
    --gtest_filter='MoeLayerGraph.GeneralPath*' > $R/$tool.txt 2>&1
  echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/$tool.txt | head -4
done
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B --gtest_filter='*Combine*' > $R/memcheck_combine.txt 2>&1
echo "memcheck combine rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck_combine.txt | head -4
