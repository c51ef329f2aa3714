#!/usr/bin/env bash
# Call 3: (1) exp/decode-tail-prefetch (.carry/pkgT, FP4GEMM_EXP_PREFETCH = chunks per warp of kernel 2's
# down weights that kernel 1 prefetches into L2 after its own stream; 0 = none) against main (.carry/pkg),
# decode path W4A16 + W4A4 T 1-4, L2 write-flushed, two interleaved rounds; (2) the flush kinds (write /
# read / none) on main; (3) ncu of GEMM2's plain MXFP4 MoE kernel at gpt-oss W4A16 T 8 (32 one-row experts):
# 399676a's CLI against main's.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
t0=$SECONDS
dab() { PYTHONPATH=$PWD/$1 FP4GEMM_EXP_PREFETCH=$3 ACTS=bf16,nvfp4 TOKENS=1,2,3,4 timeout 120 python3 .carry/probe/decode_ab.py $2 2>&1 | grep -v Warning; }
for rnd in 1 2; do
  dab .carry/pkg main 0
  dab .carry/pkgT pf0 0
  dab .carry/pkgT pf3 3
  dab .carry/pkgT pf8 8
  dab .carry/pkgT pfall 100000
  echo "[round $rnd] $((SECONDS - t0)) s"
done 2>&1 | tee "$OUT/decode_ab.txt"
PYTHONPATH=$PWD/.carry/pkg FLUSH=write,read,none TOKENS=1,4,8,64 ACTS=bf16 timeout 150 python3 .carry/probe/decode_ab.py flush 2>&1 | grep -v Warning | tee "$OUT/flush_probe.txt"
echo "[flush] $((SECONDS - t0)) s"
M="gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_sleeping_per_warp_active.pct,smsp__warp_issue_stalled_no_instruction_per_warp_active.pct,smsp__inst_executed.sum,launch__registers_per_thread,launch__grid_size,launch__occupancy_limit_registers"
for side in ${NCU_SIDES:-A B}; do
  bin=.carry/cliOld/fp4gemm; [ $side = B ] && bin=.carry/cliNew/fp4gemm
  echo "== $side: moe E128 N2880 K2880 T8 top4 bf16 (GEMM2 of gpt-oss T 8)"
  timeout 120 ncu --clock-control none -k regex:"fused_grouped_gemm" -s 3 -c 2 --metrics $M $bin moe --experts 128 --n 2880 --k 2880 --tokens 8 --topk 4 --act bf16 --iters 5 2>&1 |
    grep -E "fused_grouped|duration|dram__|cycles|issue_active|hmma|stalled|inst_exec|registers|grid_size|occupancy" | sed 's/  */ /g' | cut -c1-160
  echo "   (the same, time only, 100 reps)"; timeout 60 $bin moe --experts 128 --n 2880 --k 2880 --tokens 8 --topk 4 --act bf16 --iters 100 2>&1 | grep -iE "time|us" | head -4
done 2>&1 | tee "$OUT/ncu_gemm2.txt"
echo "[ncu] $((SECONDS - t0)) s"
