#!/usr/bin/env bash
# v109 call 11 (run inline on the warm H100 after call10.sh, which had laid out the carried CLI in /tmp/b): ncu source
# counters and warp states of the gpt-oss layer's two general GEMMs (W4A16 pieces, T 512 and 4096, --clock-control
# none), the SASS source page exported as CSV and cut on the machine to the rows with samples (the whole page, 247k
# rows, was over the device tool's size limit), plus scripts/ncu_sass_stalls.py's summary.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/s; mkdir -p $R; C=/tmp/b/tools/fp4gemm
for T in 512 4096; do
  timeout 100 ncu --clock-control none --kernel-name regex:fused_grouped_gemm --launch-skip 2 --launch-count 2 \
    --section SourceCounters --section WarpStateStats -o /tmp/s_t$T -f $C layer --experts 128 --hidden 2880 \
    --inter 2880 --topk 4 --activation swigluoai --tokens $T --act bf16 --weight-layout pieces --values checkpoint \
    --iters 2 --warmup 1 > $R/t$T.log 2>&1; echo "T$T rc $?"
  ncu --import /tmp/s_t$T.ncu-rep --page source --csv --print-source sass > /tmp/s_t$T.csv 2>&1
  python3 scripts/ncu_sass_stalls.py /tmp/s_t$T.csv --top 40 > $R/stalls_t$T.txt 2>&1
  awk -F'","' 'NR<=2 || ($3+0)>0' /tmp/s_t$T.csv | xz -9 > $R/sass_nonzero_t$T.csv.xz
done
