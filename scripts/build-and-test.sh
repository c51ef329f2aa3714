#!/usr/bin/env bash
# The test command: installs dependencies, builds everything, runs the host tier (C++ and Python)
# and the GPU tier (skipped, visibly and with the reason, when there is no GPU). Fails when a tier
# ran no test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
BUILD=${BUILD:-build/release}
JOBS=${JOBS:-$(nproc)}
# Tests and tools ON explicitly: the folder may have been configured by bench.sh (tests off).
echo "[test] configuring $BUILD (tests on)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=ON >/dev/null
echo "[test] building with $JOBS jobs (the fused kernels take a few minutes)"
cmake --build "$BUILD" -j "$JOBS"

echo "[test] C++ tiers (ctest)"
ctest_log="$BUILD/ctest.log"
ctest --test-dir "$BUILD" --output-on-failure --no-tests=error 2>&1 | tee "$ctest_log"
ran=$(sed -n 's/.*tests passed.* out of \([0-9]*\).*/\1/p' "$ctest_log" | tail -1)
if [ -z "$ran" ] || [ "$ran" -eq 0 ]; then
  echo "[test] ERROR: ctest ran no test in $BUILD" >&2
  exit 1
fi
if grep -qE "gpu_tier .*(Skipped|Not Run)" "$ctest_log"; then
  # The GPU binary prints its reason on the first line and exits 77 (CTest's "skipped").
  reason=$("$BUILD/tests/fp4gemm_gpu_tests" 2>&1 | head -1 || true)
  echo "[test] C++ GPU tier: ${reason:-skipped (no reason printed)}"
fi

echo "[test] Python tiers"
if [ -f pyproject.toml ] && [ -d tests/python ]; then
  # One CUDA compile per checkout: the package links the library just built in $BUILD (its
  # fp4gemmTargets.cmake) instead of compiling the kernels again; only the binding is compiled.
  # (its own scikit-build folder: a later plain `pip install .` must not inherit the cached setting)
  prebuilt=$(cd "$BUILD" && pwd)
  with_progress "building and installing the Python package (pip install . linking $BUILD's library)" \
    build/pip-install.log python3 -m pip install --no-build-isolation . \
    -C "cmake.define.FP4GEMM_PREBUILT_DIR=$prebuilt" -C "build-dir=build/py-prebuilt/{wheel_tag}"
  python3 -m pytest -q -rs tests/python
else
  echo "[test] ERROR: tests/python or pyproject.toml missing" >&2
  exit 1
fi
echo "[test] all tiers passed (GPU tiers: see the skip reasons above, if any)"
