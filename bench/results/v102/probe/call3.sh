#!/usr/bin/env bash
# v102 (session 115), call 3 (carry .carry/pg_m.tar.xz, .carry/pg_n.tar.xz): the routing's new CTA counts.
# (1) CLI layer suite, W4A16 on pieces with checkpoint-range scales, main's CLI (m, e8c78ff's source) against the
# new rule's (n), alternating, two rounds of 100 reps: the cells whose routing changed (Qwen3 T 256 / 512 / 1024 /
# 4096, gpt-oss T 512 / 1024 / 4096, DeepSeek-V3 T 256 / 1024, Mixtral T 1024 / 4096) and two controls (Qwen3 T 128,
# gpt-oss T 256: 1024 ids, unchanged); digests compared. (2) this tree built there with the tests, the routing /
# layer GPU tests and memcheck of the routing tests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/c3; mkdir -p $R /tmp/ab
export FP4GEMM_DIGEST=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader | tee $R/gpu.txt
for a in m n; do [ -f .carry/pg_$a.tar.xz ] && tar xJf .carry/pg_$a.tar.xz -C /tmp/ab; done  # (one per call fits the carry:
ls /tmp/ab  # call it with PART=tests carrying pg_m, then PART=ab carrying pg_n on the same warm machine)
C=11,12,32,13,14,19,34,20,21,5,6,27,28
if [ "${PART:-all}" != tests ]; then
bash "$(dirname "$0")/ab_layer.sh" m n $C $R
fi
if [ "${PART:-all}" != ab ]; then
B=/tmp/b3
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=OFF \
  -DFP4GEMM_BUILD_PYTHON=OFF > $R/cmake.txt 2>&1 || tail -20 $R/cmake.txt
ninja -C $B tests/fp4gemm_gpu_tests > $R/build.txt 2>&1; echo "build rc $? [$((SECONDS - t0)) s]"; tail -3 $R/build.txt
F='AlignRouting*:AlignRoutingRows*:MoeRouting*:*Routing*:MoeLayer*:MoeGraph*'
timeout 240 $B/tests/fp4gemm_gpu_tests --gtest_brief=1 --gtest_filter="$F" > $R/gtests.txt 2>&1
echo "gtests rc $? [$((SECONDS - t0)) s]"; grep -E "PASSED|FAILED|SKIPPED" $R/gtests.txt | head -20
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/fp4gemm_gpu_tests \
  --gtest_filter='AlignRouting*:AlignRoutingRows*' > $R/memcheck.txt 2>&1
echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -5
fi
tar czf $OUT/c3.tgz -C $OUT c3; echo "call3 done [$((SECONDS - t0)) s]"
