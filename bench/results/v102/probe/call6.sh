#!/usr/bin/env bash
# v102 (session 115), call 6 (carry .carry/pg_n.tar.xz): the routing's launches and the routed pre-pass as
# programmatic dependents (src/kernels/routing.cu, device/prepass.cuh, launch_routed). This tree built there with
# the CLI and the tests (/tmp/b3); the CLI layer suite, c899269's CLI (n: the routing's new CTA counts, CPU-built)
# against this tree's (p, built here), alternating, 2 rounds (cells on the general path, and decode-path cells as controls:
# their kernels and launches did not change); then the GPU tests of the routing, the layer and the MoE graphs.
# PART=tests skips the A/B (a later call on the same machine).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/c6; mkdir -p $R /tmp/ab
export FP4GEMM_DIGEST=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader | tee $R/gpu.txt
[ -f .carry/pg_n.tar.xz ] && tar xJf .carry/pg_n.tar.xz -C /tmp/ab
B=/tmp/b3
if [ ! -f $B/built ]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=ON \
    -DFP4GEMM_BUILD_PYTHON=OFF > $R/cmake.txt 2>&1 || tail -20 $R/cmake.txt
  ninja -C $B tools/fp4gemm tests/fp4gemm_gpu_tests > $R/build.txt 2>&1 && touch $B/built
  echo "build rc $? [$((SECONDS - t0)) s]"; tail -2 $R/build.txt
fi
mkdir -p /tmp/ab/p && cp $B/tools/fp4gemm /tmp/ab/p/fp4gemm
if [ "${PART:-all}" != tests ]; then
C=${CASES:-11,12,32,13,14,19,34,20,21,9,10,15}
bash "$(dirname "$0")/ab_layer.sh" n p $C $R
fi
if [ "${PART:-all}" != ab ]; then
F=${F:-'AlignRouting*:AlignRoutingRows*:MoeRouting*:MoeLayer*:MoeGraph*:MoeGraphCache*:MoeBadRouting*'}
timeout ${TT:-300} $B/tests/fp4gemm_gpu_tests --gtest_brief=1 --gtest_filter="$F" > $R/gtests.txt 2>&1
echo "gtests rc $? [$((SECONDS - t0)) s]"; grep -E "PASSED|FAILED|SKIPPED" $R/gtests.txt | head -20
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/fp4gemm_gpu_tests \
    --gtest_filter='AlignRoutingRows*:MoeLayerGraph.GeneralPath*:MoeLayerGraph.ReplaysWithANewRoutingEachTime' \
    > $R/$tool.txt 2>&1
  echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/$tool.txt | head -4
done
fi
tar czf $OUT/c6.tgz -C $OUT c6; echo "call6 done [$((SECONDS - t0)) s]"
