#!/usr/bin/env bash
# The main job: builds the CLI and runs the benchmark on the seed cases (plus the dense suite),
# floors and peers measured in the same run. Extra arguments go to `fp4gemm bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
BUILD=${BUILD:-build/release}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target fp4gemm_cli
mkdir -p bench/results
exec "$BUILD/tools/fp4gemm" bench --suite all --json "bench/results/latest.json" "$@"
