#!/usr/bin/env bash
# v99 (session 112): bench/micro/routing_grid.cu -- the layer's routing, single block against the grid form at
# 1024 / 512 / 256 / 128 ids per CTA, graph-timed, outputs compared byte for byte. Seconds. Logs under $OUT/routing.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/routing
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader | tee $OUT/routing/gpu.txt
nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/micro/routing_grid.cu -o /tmp/rg \
  > $OUT/routing/build.txt 2>&1 || { head $OUT/routing/build.txt; exit 3; }
for r in 1 2; do timeout 120 /tmp/rg 2>&1 | tee $OUT/routing/run$r.txt; done
