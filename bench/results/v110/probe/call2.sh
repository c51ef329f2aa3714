#!/usr/bin/env bash
# v110 call 2: exp/piece-prefetch's C++ GPU tier (3 shards) and compute-sanitizer memcheck on the CPU-built (nvcc 13.0,
# sm_90a) test binary and CLI, carried as .carry/pp_build.tar.xz (build folder /work/pb, baked into the tests: linked
# there), and the Python package with the branch's extension (.carry/pp_pkg.tar.xz), via scripts/device_carried.sh's
# gpu and python steps; memcheck on the layer / MoE / ordering / pieces tests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p .carry/build .carry/pkg && xz -dc .carry/pp_build.tar.xz | tar xf - -C .carry/build && \
  xz -dc .carry/pp_pkg.tar.xz | tar xf - -C .carry/pkg || { echo "unpack failed"; exit 3; }
echo "unpacked [$((SECONDS - t0)) s]"
FP4GEMM_BUILD_DIR=/work/pb OUT=$OUT bash scripts/device_carried.sh gpu; echo "gpu tier rc $? [$((SECONDS - t0)) s]"
F=${SAN_FILTER:-*PlanOrdering*:*MoeLayerCases.*/case0:*MoeLayerCases.*/case4:*MoeLayerCases.*/case9:MoeLayerGraph*:MoeLayerPrequantised*:MoePieces*:MoeLayerPieces*}
timeout ${ST:-300} compute-sanitizer --tool memcheck --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
  --gtest_filter="$F" > $OUT/sanitizer_memcheck.log 2>&1; echo "memcheck rc $? [$((SECONDS - t0)) s]"
grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" $OUT/sanitizer_memcheck.log | head -8
timeout ${PT:-280} env FP4GEMM_BUILD_DIR=/work/pb OUT=$OUT bash scripts/device_carried.sh python; echo "python rc $? [$((SECONDS - t0)) s]"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
echo "all done [$((SECONDS - t0)) s]"
