#!/usr/bin/env bash
# v103: exp/fused-trigger's GPU tests, the CPU-built test binary carried (.carry/gt_ft.tar.xz: gt/fp4gemm_gpu_tests of
# the branch): the layer, graph, routing, quantiser and combine suites, then memcheck / racecheck / synccheck of the
# general-path graph replays (GEMM1 -> GEMM2 -> combine with the early trigger, W4A16 and W4A4).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/t; mkdir -p $R /tmp/gt
tar xJf ${GT:-.carry/gt_ft.tar.xz} -C /tmp/gt
B=/tmp/gt/gt/fp4gemm_gpu_tests
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
timeout 300 $B --gtest_brief=1 --gtest_filter="${FILTER:-*Quantiz*:MoeLayer*:MoeGraph*:AlignRouting*:MoeBadRouting*:*Combine*}" > $R/gtests.txt 2>&1
echo "gtests rc $?"; grep -E "PASSED|FAILED" $R/gtests.txt | head
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 $B \
    --gtest_filter='MoeLayerGraph.GeneralPath*' > $R/$tool.txt 2>&1
  echo "$tool rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $R/$tool.txt
done
