#!/usr/bin/env bash
# v67 c1c (one H200; carry .carry/v102t, rebuilt: the decode kernels' rows path back to its own addressing, the layer
# test's decode-path expectation fixed): the GPU tier's suites that c1's 480 s did not reach and that run changed code
# (the parametrized MoE / layer suites, the GLU pieces seeds), the pieces tests again, then compute-sanitizer memcheck
# of the pieces tests (the decode kernels on pieces, the repack, the bad arguments).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v102; mkdir -p $V; xz -dc .carry/v102t/bins.tar.xz | tar xf - -C $V
t0=$SECONDS; R=$OUT/r; mkdir -p $R
timeout 250 $V/fp4gemm_gpu_tests --gtest_filter='MoePieces.*:MoeLayerPieces.*:Seeds/MoeGluPieces*:All/*:Cases/*:Seeds/MoeRandom*' > $R/gpu_rest.txt 2>&1
echo "gpu rest rc $? [$((SECONDS - t0)) s]"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests from .* ran" $R/gpu_rest.txt | head -20; grep -E "^\[----------\] .*ms total" $R/gpu_rest.txt
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $V/fp4gemm_gpu_tests \
  --gtest_filter='MoePieces.BadArgumentsNamed:MoeLayerPieces.*' > $R/memcheck.txt 2>&1
echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -5
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
