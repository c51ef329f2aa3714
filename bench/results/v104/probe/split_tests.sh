#!/usr/bin/env bash
# v104: exp/split-scales' GPU tests with the knob on (FP4GEMM_EXP_SPLIT_SCALES=1: every MoE plan's two-half classes
# copy their scale atoms from two warps): the MoE suites of the CPU-built test binary in 4 shards (tests_full.sh's
# runner), then memcheck / racecheck / synccheck of the general-path graph replays and of the MoE pieces suite.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export FP4GEMM_EXP_SPLIT_SCALES=1
GT=${GT:-.carry/both_split.tar.xz} RDIR=st TT=${TT:-330} \
  FILTER="${FILTER:-*Moe*:*moe*:*Layer*:*Pieces*:*Combine*:*Routing*:Cases/*:Seeds/Moe*}" \
  bash bench/results/v104/probe/tests_full.sh
R=$OUT/st; B=/tmp/gt/gt/fp4gemm_gpu_tests; t0=$SECONDS
for tool in ${TOOLS:-memcheck racecheck synccheck}; do
  timeout ${ST:-80} compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 $B \
    --gtest_filter='MoeLayerGraph.GeneralPath*:MoePieces.*' > $R/$tool.txt 2>&1
  echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/$tool.txt | head -4
done
