#!/usr/bin/env bash
# v109 call 13 (run inline on the warm H100 after call12.sh had laid out the carried CLI in /tmp/b): every kernel of
# one layer call at T 512, Qwen3 and gpt-oss (W4A16 pieces, checkpoint scales, ncu --clock-control none, time, DRAM,
# L2, SM and issue metrics). ncu serialises the launches, so programmatic overlap is not in these times.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
C=/tmp/b/tools/fp4gemm
for s in "qwen3:--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu" \
         "gptoss:--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"; do
  n=${s%%:*}; a=${s#*:}
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum \
    $C layer $a --tokens 512 --act bf16 --weight-layout pieces --values checkpoint --iters 1 --warmup 1 \
    > $OUT/layer_kernels_${n}_t512.txt 2>&1
done
