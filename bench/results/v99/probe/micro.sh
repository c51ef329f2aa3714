#!/usr/bin/env bash
# v99 (session 112): bench/micro/consumer_loop.cu's LANES table again, every CTA and tile now writing fresh output
# lines (v98's run had all 132 SMs store into the same 128 KB), then ncu on the 256-row x 128-token lane at 45
# k-blocks: in step (launch 2) against half a tile apart (launch 10), warp states and issue. Logs under $OUT/micro.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/micro
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee $OUT/micro/gpu.txt
s=$SECONDS
nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc -Iinclude -lineinfo \
  bench/micro/consumer_loop.cu -o /tmp/cl > $OUT/micro/build.txt 2>&1 || { grep -v C7519 $OUT/micro/build.txt | head; exit 3; }
echo "built in $((SECONDS - s)) s"
LANES=1 timeout 120 /tmp/cl 2>&1 | tee $OUT/micro/lanes.txt
for skip in 1 9; do
  LANES=1 LANES_ONE=1 timeout 200 ncu --clock-control none -k regex:lanes_loop --launch-skip $skip --launch-count 1 \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats \
    --section MemoryWorkloadAnalysis /tmp/cl > $OUT/micro/ncu_skip$skip.txt 2>&1
  grep -E "lanes_loop|Duration|Issue Slots Busy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Stall|Executed Ipc|Pipe|Mem Busy|Max Bandwidth" \
    $OUT/micro/ncu_skip$skip.txt | head -40
done
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
