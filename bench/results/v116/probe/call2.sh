#!/usr/bin/env bash
# v116 call 2 (the machine warm from call 1: /tmp/b holds main's build, tests included). PHASE=tier (default): main's
# C++ GPU tier in 3 shards (~200-250 s alone on 16 cores; nothing else built or run beside it), then memcheck on the
# MoE / layer / ordering filter (scripts/device_carried.sh's, plus the stream-K and pieces tests) with the time left.
# PHASE=san: memcheck, then racecheck and synccheck on three of those tests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; BUDGET=${BUDGET:-575}; R=$OUT/r2; mkdir -p $R; B=/tmp/b
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
[ -f $B/built ] || { echo "no build in /tmp/b (the machine is not call 1's): run call1.sh with NOTABLE=1 first"; exit 3; }
T=$B/tests/fp4gemm_gpu_tests
F='*PlanOrdering*:*MoeLayerCases.*/case0:*MoeLayerCases.*/case4:*MoeLayerCases.*/case9:MoeLayerGraph*:MoeLayerPrequantised*:MoeGluShapes.ModelShapedTilesAndBothHeights:MoeGluShapes.StreamKSplitTiles:MoeStreamK.*:MoePieces*:MoeLayerPieces*'
memcheck() {
  timeout $1 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter="$F" > $R/sanitizer_memcheck.log 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" $R/sanitizer_memcheck.log | head -6
}
if [ "${PHASE:-tier}" = tier ]; then
  for i in 0 1 2; do
    GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout $((BUDGET < 450 ? BUDGET - 30 : 420)) $T --gtest_brief=1 > $R/gpu_shard$i.log 2>&1 &
  done; wait
  for i in 0 1 2; do echo "-- shard $i"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED TEST|tests ran" $R/gpu_shard$i.log | head -8; done
  echo "gpu tier [$((SECONDS - t0)) s]"
  left=$((BUDGET - (SECONDS - t0))); [ $left -gt 60 ] && memcheck $left
else
  memcheck 330
  for tool in racecheck synccheck; do
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $T \
      --gtest_filter='MoeGluShapes.StreamKSplitTiles:MoeStreamK.*:*MoeLayerCases.*/case0' > $R/sanitizer_$tool.log 2>&1
    echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|HAZARD|tests ran|PASSED|FAILED" $R/sanitizer_$tool.log | head -6
  done
fi
tar czf $OUT/r2_${PHASE:-tier}.tgz -C $OUT r2 && rm -rf $R
echo "call2 done [$((SECONDS - t0)) s]"
