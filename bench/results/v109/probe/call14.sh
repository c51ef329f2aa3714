#!/usr/bin/env bash
# v109 call 14 (inline on the same warm H100): call11.sh's source-counter run for the Qwen3 layer at T 512 (W4A16
# pieces), the SASS CSV cut to rows with samples (the Kernel Name and header lines kept, one table per GEMM).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/q; mkdir -p $R; C=/tmp/b/tools/fp4gemm; T=512
timeout 100 ncu --clock-control none --kernel-name regex:fused_grouped_gemm --launch-skip 2 --launch-count 2 \
  --section SourceCounters --section WarpStateStats --section SchedulerStats -o /tmp/q_t$T -f $C layer --experts 128 \
  --hidden 2048 --inter 768 --topk 8 --activation silu --tokens $T --act bf16 --weight-layout pieces \
  --values checkpoint --iters 2 --warmup 1 > $R/qwen3_t$T.log 2>&1
ncu --import /tmp/q_t$T.ncu-rep --page details --print-details all > $R/qwen3_t${T}_details.txt 2>&1
ncu --import /tmp/q_t$T.ncu-rep --page source --csv --print-source sass > /tmp/q_t$T.csv 2>&1
awk -F'","' 'NR<=2 || /^"Kernel Name"/ || /^"Address"/ || ($3+0)>0' /tmp/q_t$T.csv | xz -9 > $R/qwen3_sass_nonzero_t$T.csv.xz
python3 scripts/ncu_sass_stalls.py /tmp/q_t$T.csv --top 30 > $R/qwen3_stalls_t$T.txt 2>&1
