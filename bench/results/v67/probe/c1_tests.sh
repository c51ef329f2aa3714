#!/usr/bin/env bash
# v67 c1 (one H200; carry .carry/v102t): feat/pieces' GPU tier, the whole gtest binary (built on the CPU machine:
# nvcc 13.0, sm_90a, Release). Leaves it in /tmp/v102 for c1b's sanitizer run.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v102; mkdir -p $V; xz -dc .carry/v102t/bins.tar.xz | tar xf - -C $V; ls $V
t0=$SECONDS; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt 2>&1
timeout 480 $V/fp4gemm_gpu_tests > $R/gpu_tier.txt 2>&1; echo "gpu tier rc $? [$((SECONDS - t0)) s]"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests from .* ran" $R/gpu_tier.txt | head -30
grep -E "Pieces" $R/gpu_tier.txt | grep -E "OK|FAILED" | head -40
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
