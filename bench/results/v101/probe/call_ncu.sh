#!/usr/bin/env bash
# v101 (session 114): where exp/producer-gather3's GEMM1 stalls. ncu (clocks not locked) of the first MoE GEMM
# (GEMM1, the GLU kernel) of one Qwen3 layer run at T tokens (env T, default 512; v101 ran 512 on form 1 and 4096
# on form 3), arm d (the GEMM gathers) and e (the pre-pass gathers): warp states and per-SASS-instruction stall
# samples, printed on the machine (the reports stay there). Unpacks the branch's CLI from .carry/pg_d.tar.xz.
# Logs: /tmp/pb, tarred into $OUT/ncu.tgz (the per-instruction CSVs, ~2 MB each compressed, were read here and
# not kept in bench/results).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=/tmp/pb; mkdir -p $A /tmp/pg
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for t in .carry/pg_*.tar.xz; do [ -f "$t" ] && tar xJf "$t" -C /tmp/pg; done
for v in d e; do
  unset FP4GEMM_EXP_PREPASS_GATHER; [ $v = e ] && export FP4GEMM_EXP_PREPASS_GATHER=1
  timeout 240 ncu --clock-control none -k regex:fused_grouped_gemm --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters --section SchedulerStats --section MemoryWorkloadAnalysis \
    -f -o $A/src_$v /tmp/pg/d/fp4gemm layer --experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai \
    --tokens ${T:-512} --act bf16 --weight-layout pieces --values checkpoint --iters 1 --warmup 0 > $A/ncu_run_$v.txt 2>&1
  echo "ncu $v rc $? [$((SECONDS - t0)) s]"
  ncu -i $A/src_$v.ncu-rep --print-details all > $A/ncu_$v.txt 2>&1
  ncu -i $A/src_$v.ncu-rep --page source --csv --print-source sass > $A/sass_$v.csv 2>&1
  echo "sass $v: $(wc -l < $A/sass_$v.csv) lines"
done
rm -f $A/*.ncu-rep
tar czf $OUT/ncu.tgz -C /tmp pb/ncu_run_d.txt pb/ncu_run_e.txt pb/ncu_d.txt pb/ncu_e.txt pb/sass_d.csv pb/sass_e.csv
echo "done [$((SECONDS - t0)) s]"
