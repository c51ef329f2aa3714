#!/usr/bin/env bash
# v73 c (one H200): ncu metrics of the two decode kernels, main (m) against exp/decode-ring (b), gpt-oss-120b W4A16 on
# pieces, T 1 and 8 (and Qwen3 T 1): duration, instructions, cycles, stall reasons per issue, shared wavefronts and
# bank conflicts, DRAM bytes. Carry .carry/s.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
B=/tmp/s; mkdir -p $B; [ -f $B/done ] || { xz -dc .carry/s/b.tar.xz | tar xf - -C $B; touch $B/done; }
M='gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
for shape in "gptoss 128 2880 2880 4 swigluoai 1" "gptoss 128 2880 2880 4 swigluoai 8" "qwen3 128 2048 768 8 silu 1"; do
  set -- $shape
  for v in m b; do
    timeout 120 ncu --clock-control none --kernel-name regex:decode_ --launch-skip 2 --launch-count 2 --metrics "$M" \
      $B/$v/cli layer --experts $2 --hidden $3 --inter $4 --tokens $7 --topk $5 --act bf16 --activation $6 \
      --weight-layout pieces --iters 2 --warmup 1 > $R/ncu_$1_T$7_$v.txt 2>&1
    echo "ncu $1 T $7 $v rc $? [$((SECONDS - t0)) s]"
  done
done
python3 bench/results/v73/probe/ncusum.py $R
gzip -f $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
