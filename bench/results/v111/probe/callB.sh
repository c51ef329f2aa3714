#!/usr/bin/env bash
# v111 call B: exp/piece-slots' C++ GPU tier (3 shards) and compute-sanitizer memcheck (device_carried.sh's filter,
# which reaches the small classes' stream-K pieces) and racecheck / synccheck on a few MoE layer tests, on the
# CPU-built (nvcc 13.0, sm_90a) test binary and CLI carried as .carry/ps_build.tar.xz (build folder /work/sb, baked
# into the tests: linked there).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p .carry/build && xz -dc .carry/ps_build.tar.xz | tar xf - -C .carry/build || { echo "unpack failed"; exit 3; }
echo "unpacked [$((SECONDS - t0)) s]"
FP4GEMM_BUILD_DIR=/work/sb OUT=$OUT bash scripts/device_carried.sh gpu; echo "gpu tier rc $? [$((SECONDS - t0)) s]"
F='*PlanOrdering*:*MoeLayerCases.*/case0:*MoeLayerCases.*/case4:*MoeLayerCases.*/case9:MoeLayerGraph*:MoeLayerPrequantised*:MoeGluShapes.ModelShapedTilesAndBothHeights:MoeGluShapes.StreamKSplitTiles:MoePieces*:MoeLayerPieces*'
timeout ${ST:-150} compute-sanitizer --tool memcheck --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
  --gtest_filter="$F" > $OUT/sanitizer_memcheck.log 2>&1; echo "memcheck rc $? [$((SECONDS - t0)) s]"
grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" $OUT/sanitizer_memcheck.log | head -8
for tool in racecheck synccheck; do
  timeout ${RT:-60} compute-sanitizer --tool $tool --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
    --gtest_filter='MoeGluShapes.StreamKSplitTiles:*MoeLayerCases.*/case0' > $OUT/sanitizer_$tool.log 2>&1
  echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|HAZARD|tests ran|PASSED|FAILED" $OUT/sanitizer_$tool.log | head -6
done
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "all done [$((SECONDS - t0)) s]"
