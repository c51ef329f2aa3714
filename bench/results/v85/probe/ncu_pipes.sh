#!/usr/bin/env bash
# v85 c5 / c6: where the 16-column consume's +10 % goes -- ncu on the wide kernels, p0 against c16b (BUNDLE v31), W4A16 on
# pieces: c5 pipe utilisation (gpt-oss-120b T 128, Qwen3-30B-A3B T 64), c6 (METRICS=stall_metrics.txt, CASES=gptoss) the
# issue-stall reasons per issue.
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; }
M=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active
[ -n "${METRICS:-}" ] && M=$(cat bench/results/v85/probe/$METRICS)
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai --tokens 128";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu --tokens 64";; esac; }
for n in ${CASES:-gptoss qwen3}; do
  for v in ${VS:-p0 c16b}; do
    timeout 120 ncu --clock-control none --print-kernel-base function -k regex:"decode_gate_up|decode_down" -s 2 -c 2 --metrics $M \
      /tmp/$v/cli layer $(shape $n) --act bf16 --weight-layout pieces --values checkpoint --iters 2 --warmup 1 > $R/${v}_$n.txt 2>&1
    echo "== $v $n"; grep -E "decode_|pct|sum|ratio" $R/${v}_$n.txt | sed 's/  */ /g; s/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -34
  done
done
tar czf $OUT/${NAME:-pipes}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"
