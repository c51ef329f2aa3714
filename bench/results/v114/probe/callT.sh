#!/usr/bin/env bash
# v114 call T (whichever GPU comes; no build there): BRANCH (BUILD: p2_build = exp/prologue2 8e0f079, sw_build = exp/split-wider2)'s C++ GPU tier (3 shards), memcheck of the
# MoE / layer / pieces filter, racecheck and synccheck on two MoE tests -- v113's callP.sh without its A/B.
# Carry .carry/${BUILD:-p2_build}.tar.xz (the branch's CLI + gpu tests, built in /work/mb) with trim.sh out.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
mkdir -p .carry/build && xz -dc .carry/${BUILD:-p2_build}.tar.xz | tar xf - -C .carry/build || { echo "unpack failed"; exit 3; }
FP4GEMM_BUILD_DIR=/work/mb OUT=$OUT bash scripts/device_carried.sh gpu; echo "gpu tier rc $? [$((SECONDS - t0)) s]"
F='*PlanOrdering*:*MoeLayerCases.*/case0:*MoeLayerCases.*/case4:*MoeLayerCases.*/case9:MoeLayerGraph*:MoeLayerPrequantised*:MoeGluShapes.ModelShapedTilesAndBothHeights:MoeGluShapes.StreamKSplitTiles:MoeGluShapes.SplitLastRound*:MoeStreamK.*:MoePieces*:MoeLayerPieces*'
timeout ${ST:-120} compute-sanitizer --tool memcheck --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
  --gtest_filter="$F" > $OUT/sanitizer_memcheck.log 2>&1; echo "memcheck rc $? [$((SECONDS - t0)) s]"
grep -E "ERROR SUMMARY|Invalid|tests ran|PASSED|FAILED" $OUT/sanitizer_memcheck.log | head -8
for tool in racecheck synccheck; do
  timeout ${RT:-30} compute-sanitizer --tool $tool --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
    --gtest_filter='MoeGluShapes.StreamKSplitTiles:MoeStreamK.WideClassesSplitLastRound:*MoeLayerCases.*/case0' > $OUT/sanitizer_$tool.log 2>&1
  echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|HAZARD|tests ran|PASSED|FAILED" $OUT/sanitizer_$tool.log | head -6
done
echo "all done [$((SECONDS - t0)) s]"
