#!/usr/bin/env bash
# Lays out a build made on this machine for the GPU machine (scripts/device_carried.sh):
#   .carry/build/tests/fp4gemm_gpu_tests, .carry/build/tools/fp4gemm  (debug info stripped)
#   .carry/pkg/fp4gemm/  the Python package with the built extension
# Usage: scripts/carry_build.sh BUILD_DIR   (a CMake build with FP4GEMM_BUILD_PYTHON/TESTS/TOOLS=ON)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: scripts/carry_build.sh BUILD_DIR}
mkdir -p .carry/build/tests .carry/build/tools .carry/pkg/fp4gemm
for f in tests/fp4gemm_gpu_tests tools/fp4gemm; do
  if [ -f "$B/$f" ]; then cp "$B/$f" ".carry/build/$f" && strip --strip-debug ".carry/build/$f"; fi
done
rm -f .carry/pkg/fp4gemm/*.py .carry/pkg/fp4gemm/_fp4gemm*.so
cp python/fp4gemm/*.py .carry/pkg/fp4gemm/
rm -rf .carry/pkg/fp4gemm/integrations && cp -r python/fp4gemm/integrations .carry/pkg/fp4gemm/
cp "$B"/python/_fp4gemm*.so .carry/pkg/fp4gemm/ && strip --strip-debug .carry/pkg/fp4gemm/_fp4gemm*.so
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
du -sh .carry/build .carry/pkg
