#!/usr/bin/env bash
# Prepared for the next session (not run): main's (the pieces merge, cdff395) GPU-tier suites that v67 did not run on
# that build, and the compute-sanitizer pass the project's CI uses, with main's gtests carried in .carry/v103m (built by
# .ci/run on the CPU machine). Two shards on one H200 would not help (one GPU); the split below keeps each call < 600 s.
#   bash ... 1: the pointer-array suites (their kernels are main's before the merge up to parameter offsets)
#   bash ... 2: the rows GLU seeds, the remaining MoE / layer suites, memcheck of the MoE and layer sanitizer tests
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v103m; mkdir -p $V; [ -x $V/fp4gemm_gpu_tests ] || xz -dc .carry/v103m/bins.tar.xz | tar xf - -C $V
t0=$SECONDS; R=$OUT/r; mkdir -p $R
if [ "${1:-1}" = 1 ]; then
  f='Seeds/FusedRandom*:Spec/FusedSeedShapes*:Formats/PlanOrdering*:Launches/RunSafetySerialised*:Fused*:RunSafety*:PlanOrdering*:Seeds/DualGemm/*:DualGemmShapes*'
else
  f='Seeds/MoeGlu/*:MoeGluShapes*:MoeStreamK*:MoeRouting*:MoeGraph*:MoeLayer*:MoeTuning*:MoeDeterminism*:MoeStreams*'
fi
timeout 480 $V/fp4gemm_gpu_tests --gtest_filter="$f" > $R/tier$1.txt 2>&1
echo "tier $1 rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests from .* ran" $R/tier$1.txt | head -20
if [ "${1:-1}" = 2 ]; then
  timeout 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $V/fp4gemm_gpu_tests \
    --gtest_filter='MoeSanitizer.*:MoeBadRouting.*:MoeLayerPieces.*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
fi
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
