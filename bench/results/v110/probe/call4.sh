#!/usr/bin/env bash
# v110 call 4 (whichever GPU comes). On an H200: issue 52's table first (v109's call12.sh: main's carried CLI and
# extension, tk same run, two rounds of 100, then the W4A4 cells). Then main's C++ GPU tier (3 shards) on main's
# CPU-built test binary (.carry/main_tests.tar.xz, build folder /work/mb) and CLI (.carry/main_cli.tar.xz), and
# memcheck on device_carried.sh's filter plus the GLU MoE tests that faulted on exp/piece-prefetch (calls 2 and 3):
# does main pass them on this card and toolchain? Carry .carry/peers, .carry/main_cli.tar.xz, .carry/ext312.tar.xz,
# .carry/main_tests.tar.xz (trim.sh out, KEEP="v95 v102 v106 v108 v109 v110").
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name"
case $name in
  *H200*) bash bench/results/v109/probe/call12.sh > $OUT/call12.log 2>&1; echo "table rc $? [$((SECONDS - t0)) s]"
          tail -30 $OUT/call12.log ;;
esac
mkdir -p .carry/build && xz -dc .carry/main_tests.tar.xz | tar xf - -C .carry/build && \
  xz -dc .carry/main_cli.tar.xz | tar xf - -C .carry/build || { echo "unpack failed"; exit 3; }
if [ $((SECONDS - t0)) -lt ${TIER_BEFORE:-330} ]; then
  FP4GEMM_BUILD_DIR=/work/mb OUT=$OUT bash scripts/device_carried.sh gpu; echo "gpu tier rc $? [$((SECONDS - t0)) s]"
fi
F='*PlanOrdering*:*MoeLayerCases.*/case0:*MoeLayerCases.*/case4:*MoeLayerCases.*/case9:MoeLayerGraph*:MoeLayerPrequantised*:MoeGluShapes.*:Seeds/MoeGlu.RandomCasesMatchTheReference/0'
timeout ${ST:-150} compute-sanitizer --tool memcheck --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
  --gtest_filter="$F" > $OUT/sanitizer_memcheck.log 2>&1; echo "memcheck rc $? [$((SECONDS - t0)) s]"
grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" $OUT/sanitizer_memcheck.log | head -8
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "all done [$((SECONDS - t0)) s]"
