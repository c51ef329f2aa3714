#!/usr/bin/env bash
# The main job: builds the CLI and runs the benchmark (SPEC 4), floors and peers measured in the same run, one JSON
# per suite under bench/results/:
#   1/4 latest.json               the seed and dense GEMM suites (GPU MODE's grouped cases, seed 004's dense shapes)
#   2/4 latest_dual.json          the dual (SwiGLU) GEMM suite
#   3/4 latest_layer_w4a16.json   the layer suite -- the whole MoE expert layer, what users call -- W4A16 (bf16
#                                 tokens x MXFP4 weights in pieces, checkpoint-range scales)
#   4/4 latest_layer_w4a4.json    the layer suite, W4A4 NVFP4 (weights in pieces)
# A suite that fails does not stop the others; the script then exits non-zero, naming it.
# With arguments it runs `fp4gemm bench <arguments>` alone: --suite all (seed + dense) unless the arguments name a
# suite, its JSON to bench/results/latest.json (--suite all) or latest_<suite>.json unless they name one
# (e.g. `scripts/bench.sh --suite layer --act bf16` writes latest_layer.json).
# The layer against triton_kernels' and Humming's layers (issue 52's table) is bench/tk_layer_pieces.py (needs torch
# and triton_kernels; docs/PERF.md).
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
CLI="$BUILD/tools/fp4gemm"
if ! "$CLI" info >/dev/null 2>&1; then
  echo "[bench] no usable CUDA GPU here ($("$CLI" info 2>&1 | head -1)):"
  echo "[bench] the benchmark times the kernels on an H100/H200, so nothing was timed. The CLI is built:"
  echo "[bench]   $CLI"
  exit 2
fi
mkdir -p bench/results

source scripts/bench_lib.sh
if [ $# -gt 0 ]; then
  bench_args "$@"
  echo "[bench] running: fp4gemm bench ${BENCH_ARGS[*]}"
  exec "$CLI" bench "${BENCH_ARGS[@]}"
fi
bench_main_job "$CLI"
