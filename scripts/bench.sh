#!/usr/bin/env bash
# The main job: builds the CLI and runs the benchmark on the seed cases (plus the dense suite),
# floors and peers measured in the same run. Extra arguments go to `fp4gemm bench`.
# Without a GPU it builds the CLI, says that there is nothing to time, and exits with status 2.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
BUILD=${BUILD:-build/release}
# Only the CLI is built here; the tests' setting of an existing folder is left as it is, so that
# this command and the test command work in either order on one folder.
echo "[bench] configuring $BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TOOLS=ON >/dev/null
echo "[bench] building the fp4gemm CLI (the fused kernels take a few minutes)"
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target fp4gemm_cli
if ! "$BUILD/tools/fp4gemm" info >/dev/null 2>&1; then
  echo "[bench] no usable CUDA GPU here ($("$BUILD/tools/fp4gemm" info 2>&1 | head -1)):"
  echo "[bench] the benchmark times the kernels on an H100/H200, so nothing was timed. The CLI is built:"
  echo "[bench]   $BUILD/tools/fp4gemm"
  exit 2
fi
mkdir -p bench/results
echo "[bench] running: fp4gemm bench --suite all --json bench/results/latest.json $*"
exec "$BUILD/tools/fp4gemm" bench --suite all --json "bench/results/latest.json" "$@"
