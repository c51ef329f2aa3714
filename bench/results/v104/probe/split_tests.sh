#!/usr/bin/env bash
# v104: exp/split-scales' GPU tests with the knob on (FP4GEMM_EXP_SPLIT_SCALES=1: every MoE plan's two-half classes
# copy their scale atoms from two warps): the MoE suites of the CPU-built test binary (.carry/gt_split.tar.xz), then
# memcheck / racecheck / synccheck of the general-path graph replays and of the MoE pieces suite.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export FP4GEMM_EXP_SPLIT_SCALES=1
R=$OUT/st; mkdir -p $R /tmp/gt
tar xJf ${GT:-.carry/gt_split.tar.xz} -C /tmp/gt
B=/tmp/gt/gt/fp4gemm_gpu_tests
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
t0=$SECONDS; F="${FILTER:-*Moe*:*moe*:*Layer*:*Pieces*:*Combine*:*Routing*:Cases/*:Seeds/Moe*}"
N=4
for i in $(seq 0 $((N - 1))); do
  GTEST_TOTAL_SHARDS=$N GTEST_SHARD_INDEX=$i timeout ${TT:-330} $B --gtest_brief=1 --gtest_filter="$F" > $R/shard$i.txt 2>&1 &
done
wait
for i in $(seq 0 $((N - 1))); do
  echo "shard $i: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|tests? from .* ran' $R/shard$i.txt | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' $R/shard$i.txt | head -20
done
echo "[$((SECONDS - t0)) s]"
for tool in ${TOOLS:-memcheck racecheck synccheck}; do
  timeout ${ST:-80} compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 $B \
    --gtest_filter='MoeLayerGraph.GeneralPath*:MoePieces.*' > $R/$tool.txt 2>&1
  echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/$tool.txt | head -4
done
