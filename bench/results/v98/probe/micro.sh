#!/usr/bin/env bash
# v98 (prepared in session 111; the first call of the next session, seconds): bench/micro/consumer_loop.cu's LANES
# and LONE tables (the independent-lanes sketch of PERF.md v98), built on the GPU machine. Logs under $OUT/micro.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/micro
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee $OUT/micro/gpu.txt
s=$SECONDS
nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc -Iinclude \
  bench/micro/consumer_loop.cu -o /tmp/cl > $OUT/micro/build.txt 2>&1 || { grep -v C7519 $OUT/micro/build.txt | head; exit 3; }
echo "built in $((SECONDS - s)) s"
for mode in LANES LONE; do
  env $mode=1 timeout 120 /tmp/cl 2>&1 | tee $OUT/micro/$(echo $mode | tr A-Z a-z).txt
done
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
