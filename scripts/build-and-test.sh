#!/usr/bin/env bash
# The test command: installs dependencies, builds everything, runs the host tier (C++ and Python)
# and the GPU tier (skipped, visibly, when there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
BUILD=${BUILD:-build/release}
JOBS=${JOBS:-$(nproc)}
echo "[test] configuring $BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
echo "[test] building with $JOBS jobs (the fused kernels take a few minutes)"
cmake --build "$BUILD" -j "$JOBS"
echo "[test] C++ tiers (ctest)"
ctest --test-dir "$BUILD" --output-on-failure
echo "[test] Python host tier"
if [ -f pyproject.toml ] && [ -d tests/python ]; then
  python3 -m pip install -q --no-build-isolation . >/dev/null
  python3 -m pytest -q -rs tests/python
fi
echo "[test] all tiers passed (see above for the GPU tier's status)"
