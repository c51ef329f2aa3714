#!/usr/bin/env bash
# v111 call AB (whichever GPU comes; no build there): the A/B of exp/piece-slots (p) against main (m), both CLIs
# CPU-built (nvcc 13.0, sm_90a) -- v106's ab3.sh on the layer suite (W4A16 pieces, checkpoint scales, digests), ROUNDS
# rounds (default 3) of 100, alternating m / p -- then the branch's C++ GPU tier (3 shards) and memcheck (device_carried.sh's
# filter), and racecheck / synccheck on two MoE tests. Carry .carry/peers, .carry/main_cli.tar.xz, .carry/ps_build.tar.xz
# (its tests and CLI; build folder /work/sb) with trim.sh out (KEEP="v95 v102 v106 v108 v109 v110 v111").
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W/ab; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
mkdir -p .carry/build /tmp/ab/m /tmp/ab/p /tmp/xm && xz -dc .carry/main_cli.tar.xz | tar xf - -C /tmp/xm && \
  xz -dc .carry/ps_build.tar.xz | tar xf - -C .carry/build || { echo "unpack failed"; exit 3; }
ln -sf /tmp/xm/tools/fp4gemm /tmp/ab/m/fp4gemm; ln -sf $PWD/.carry/build/tools/fp4gemm /tmp/ab/p/fp4gemm
echo "unpacked [$((SECONDS - t0)) s]"
ROUNDS=${ROUNDS:-3} bash bench/results/v106/probe/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab m p | tail -24
echo "ab done [$((SECONDS - t0)) s]"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/cAB_ab.tgz -C $OUT w && rm -rf $W
FP4GEMM_BUILD_DIR=/work/sb OUT=$OUT bash scripts/device_carried.sh gpu; echo "gpu tier rc $? [$((SECONDS - t0)) s]"
F='*PlanOrdering*:*MoeLayerCases.*/case0:*MoeLayerCases.*/case4:*MoeLayerCases.*/case9:MoeLayerGraph*:MoeLayerPrequantised*:MoeGluShapes.ModelShapedTilesAndBothHeights:MoeGluShapes.StreamKSplitTiles:MoePieces*:MoeLayerPieces*'
timeout ${ST:-120} compute-sanitizer --tool memcheck --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
  --gtest_filter="$F" > $OUT/sanitizer_memcheck.log 2>&1; echo "memcheck rc $? [$((SECONDS - t0)) s]"
grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" $OUT/sanitizer_memcheck.log | head -8
for tool in racecheck synccheck; do
  [ $((SECONDS - t0)) -gt 520 ] && break
  timeout ${RT:-30} compute-sanitizer --tool $tool --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
    --gtest_filter='MoeGluShapes.StreamKSplitTiles:*MoeLayerCases.*/case0' > $OUT/sanitizer_$tool.log 2>&1
  echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|HAZARD|tests ran|PASSED|FAILED" $OUT/sanitizer_$tool.log | head -6
done
echo "all done [$((SECONDS - t0)) s]"
