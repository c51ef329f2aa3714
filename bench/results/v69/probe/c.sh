#!/usr/bin/env bash
# v69 c (one H200): ncu of the fused MoE GEMM (W4A16, CLI `moe`) at issue 52's general-path cells: is it bound by
# issue (instructions per weight) or by memory? gpt-oss GEMM1-as-plain (5760 x 2880) T 64 / 512, GEMM2 T 64;
# Qwen3 GEMM1 (1536 x 2048) T 64. Carry .carry/v107c (main's CLI).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
C=/tmp/v107c; mkdir -p $C; xz -dc .carry/v107c/fp4gemm.xz > $C/fp4gemm; chmod +x $C/fp4gemm
for job in g1:5760:2880:4:64 g1:5760:2880:4:512 g2:2880:2880:4:64 q1:1536:2048:8:64; do
  IFS=: read nm n k tk T <<< "$job"
  timeout 150 ncu --clock-control none -k regex:fused --launch-skip 5 --launch-count 1 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section InstructionStats --section LaunchStats --section Occupancy \
    $C/fp4gemm moe --experts 128 --n $n --k $k --tokens $T --topk $tk --act bf16 --iters 10 --warmup 2 > $R/ncu_${nm}_T$T.txt 2>&1
  echo "$nm T$T rc $? [$((SECONDS - t0)) s]"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Issue Slots Busy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Executed Instructions  |Registers Per|Achieved Occupancy|L2 Hit|L1/TEX Hit" $R/ncu_${nm}_T$T.txt | sed 's/  */ /g' | head -24
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
