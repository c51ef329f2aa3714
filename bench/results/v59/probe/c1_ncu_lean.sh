#!/usr/bin/env bash
# v59 c1: why exp/decode-lean (same loop instruction counts) is +50 % at Qwen3 T 1: warp-state stalls of both decode
# kernels, main (1efc4d5) vs lean (3e7d4bd), Qwen3 and gpt-oss W4A16 T 1, checkpoint scales.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v59; mkdir -p $V
for f in .carry/v59/fp4gemm_*.xz; do n=$(basename $f .xz); xz -dc $f > $V/$n; chmod +x $V/$n; done
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --values checkpoint --tokens 1 --iters 1 --warmup 1"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --values checkpoint --tokens 1 --iters 1 --warmup 1"
for v in main lean; do for c in Q G; do
  timeout 100 ncu --clock-control none -k regex:decode_ --launch-skip 2 --launch-count 2 \
    --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats --section SpeedOfLight --section MemoryWorkloadAnalysis \
    -o $R/${c}_$v $V/fp4gemm_$v ${!c} > $R/${c}_$v.log 2>&1
  ncu -i $R/${c}_$v.ncu-rep --page details --csv > $R/${c}_$v.csv 2>&1
  ncu -i $R/${c}_$v.ncu-rep --page raw --csv > $R/${c}_${v}_raw.csv 2>&1
done; done
tar czf $OUT/r.tgz -C $OUT r
for f in $R/*.csv; do echo "== $f"; grep -E '"(Duration|Executed Instructions|Issue Slots Busy|No Eligible|Stall No Instruction|Warp Cycles Per Issued Instruction)"' $f | awk -F'","' '{print $5, $(NF-2), $NF}' | head -20; done 2>/dev/null | grep -v raw | head -80
