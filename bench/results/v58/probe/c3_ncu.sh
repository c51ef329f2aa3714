#!/usr/bin/env bash
# ncu of the decode kernels: main's register ring vs the 3-deep TMA ring (promotion 128B), Mixtral T 1 and gpt-oss T 1:
# where does the TMA ring's stream5 advantage go? Carry .carry/v58z.
set -uo pipefail
R=$OUT/r; mkdir -p $R; V=/tmp/v58; mkdir -p $V
for f in .carry/v58z/fp4gemm_main.xz .carry/v58z/fp4gemm_tma3.xz; do xz -dc $f > $V/$(basename $f .xz); chmod +x $V/$(basename $f .xz); done
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --iters 3 --warmup 2 --tokens 1"
M="layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --act bf16 --iters 3 --warmup 2 --tokens 1"
for v in main tma3; do for c in G M; do
  FP4GEMM_EXP_PROMO=2 timeout 150 ncu --clock-control none -k regex:decode_ --launch-skip 4 --launch-count 2 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats --section LaunchStats --section Occupancy \
    $V/fp4gemm_$v ${!c} > $R/ncu_${c}_$v.txt 2>&1
  echo "$c $v rc=$?"
done; done
tar czf $OUT/r.tgz -C $OUT r
for f in $R/ncu_*; do echo "== $f"; grep -E "decode_|Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|Registers Per|Shared Memory Configuration Size|Achieved Occupancy" $f | head -40; done
