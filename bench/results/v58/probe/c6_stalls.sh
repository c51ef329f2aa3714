#!/usr/bin/env bash
# The decode kernels' warp stall reasons (ncu metrics, per issued instruction): main's register ring vs the TMA ring
# at 24 warps x 2 stages; gpt-oss T 1, Mixtral T 1, Qwen3 T 8. Carry .carry/v58z.
set -uo pipefail
R=$OUT/r; mkdir -p $R; V=/tmp/v58; mkdir -p $V
for f in fp4gemm_main fp4gemm_w24s2; do xz -dc .carry/v58z/$f.xz > $V/$f; chmod +x $V/$f; done
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --iters 3 --warmup 2 --tokens 1"
M="layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --act bf16 --iters 3 --warmup 2 --tokens 1"
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --iters 3 --warmup 2 --tokens 8"
S=""; for r in barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle membar mio_throttle misc no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait; do
  S="$S,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
S="${S:1},smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"
for v in main w24s2; do for c in G M Q; do
  FP4GEMM_EXP_PROMO=2 timeout 150 ncu --clock-control none -k regex:decode_ --launch-skip 4 --launch-count 2 --metrics $S \
    $V/fp4gemm_$v ${!c} > $R/st_${c}_$v.txt 2>&1; echo "$c $v rc=$?"; done; done
tar czf $OUT/r.tgz -C $OUT r
for f in $R/st_*; do echo "== $(basename $f)"; grep -E "decode_|stalled|issue_active|inst_executed|dram__|duration" $f | awk '{ if ($1 ~ /void/) print $2; else if ($NF+0 > 0.05 || $1 !~ /stalled/) printf "  %s %s\n", $1, $NF }' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'; done
