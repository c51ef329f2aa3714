#!/bin/bash
# ncu of the MoE GEMM's two kernels (pre-pass, GEMM) on a few shapes: durations, DRAM bytes,
# issue and tensor-pipe activity. Usage: scripts/ncu_moe.sh [BUILD_DIR]  (needs ncu; clocks as they are)
cd "$(dirname "$0")/.."
B=${1:-build/device}/tools/fp4gemm
M="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,sm__cycles_active.avg,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_sleeping_per_warp_active.pct,smsp__warp_issue_stalled_dispatch_stall_per_warp_active.pct"
while read -r name args; do
  [ -z "$name" ] && continue
  echo "== $name: fp4gemm moe $args"
  timeout 120 ncu --clock-control none -k regex:"fused_grouped_gemm|dequant_activations" -s 4 -c 2 --metrics $M $B moe $args --iters 3 2>&1 |
    grep -E "fused_grouped|dequant_act|duration|dram__|lts__|cycles|issue_active|hmma|stalled" | sed 's/  */ /g'
done <<LIST
${NCU_SHAPES:-decode1 --experts 128 --n 1536 --k 2048 --tokens 1 --topk 8 --act nvfp4
b --experts 128 --n 1536 --k 2048 --tokens 256 --topk 8 --act nvfp4
c --experts 256 --n 2048 --k 7168 --tokens 256 --topk 8 --act nvfp4
c16 --experts 256 --n 2048 --k 7168 --tokens 256 --topk 8 --act bf16}
LIST
