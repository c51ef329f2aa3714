#!/usr/bin/env bash
# Prepared in session 115 (v102), not run: v98/v99's independent-lanes micro (bench/micro/consumer_loop.cu, LANES=1)
# with the plain 16-bit epilogue of GEMM2-like tiles (LANES_PLAIN=1: store_tile_smem without tensor maps) instead of
# the GLU one. v99 found that half a tile apart recovers nothing of the GLU epilogue (its instructions and shared-
# memory traffic take what the idle tensor pipe gives back); GEMM2's epilogue is far cheaper per output, and its tiles
# short (12 k-blocks at Qwen3's K 768), so if "apart" recovers most of "no epilogue" there, per-warpgroup tiles
# (the lanes sketch) would pay in GEMM2 (~210 µs of Qwen3 T 4096's 818 on the H200). Seconds of device time.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/lanes
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader | tee $OUT/lanes/gpu.txt
nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc -Iinclude \
  bench/micro/consumer_loop.cu -o /tmp/cl > $OUT/lanes/build.txt 2>&1 || { grep -i error $OUT/lanes/build.txt; exit 3; }
for r in 1 2; do LANES=1 LANES_PLAIN=1 timeout 120 /tmp/cl | tee $OUT/lanes/plain_r$r.txt; done
LANES=1 timeout 200 /tmp/cl | tee $OUT/lanes/glu.txt  # (v99's table beside it, same machine)
