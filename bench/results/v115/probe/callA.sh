#!/usr/bin/env bash
# v115 call A. On an H200: main as checked out built there (v95's table.sh: CMake, library + CLI + Python extension in
# /tmp/b), issue 52's table in two sustained rounds of 100 and a burst of 20 (bench/tk_layer_pieces.py,
# triton_kernels' layer in the same run). On another card (main's kernels are v113's, whose H100 table exists): only
# the library + CLI. Either way the built CLI is packed under $OUT (nw_cli.tar.xz: main's CLI for later A/Bs).
# Carry .carry/peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
if [[ $name == *H200* || -n ${FORCE_TABLE:-} ]]; then
  ROUND_REPS="${ROUND_REPS:-100 100 20}" HM=0 SMOKE=0 MAXB=${MAXB:-380} NAME=${NAME:-a_table} bash bench/results/v95/probe/table.sh
else
  cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=OFF -DFP4GEMM_BUILD_TOOLS=ON \
    -DFP4GEMM_BUILD_PYTHON=OFF > $OUT/cmake_main.txt 2>&1 && ninja -C /tmp/b tools/fp4gemm > $OUT/build_main.txt 2>&1
  echo "main CLI build rc $? [$((SECONDS - t0)) s]"
fi
[ -x /tmp/b/tools/fp4gemm ] && tar cf - -C /tmp/b tools/fp4gemm | xz -6 -T8 > $OUT/nw_cli.tar.xz && ls -la $OUT
echo "callA done [$((SECONDS - t0)) s]"
