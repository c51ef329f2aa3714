#!/usr/bin/env bash
# v53 call 5: ncu of the decode kernels, register ring (0) against the bulk-copy ring (1), gpt-oss T 1 (case 15) and
# Qwen3 T 8 (case 9), W4A16, branch binaries in .carry/v53.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; B=.carry/v53/fp4gemm_B
for c in 15 9; do for ring in 0 1; do
  FP4GEMM_DECODE_RING=$ring timeout 100 ncu --clock-control none --kernel-name regex:decode_ --launch-skip 4 --launch-count 2 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    --section SchedulerStats --section ComputeWorkloadAnalysis \
    $B bench --suite layer --act bf16 --cases $c --iters 3 --warmup 1 --settle-ms 0 > $R/ncu_c${c}_ring$ring.txt 2>&1
  echo "case $c ring $ring rc=$? $SECONDS s"
done; done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
