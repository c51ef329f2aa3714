#!/usr/bin/env bash
# Where the general path's time goes at the cells below triton_kernels (Qwen3 T 64, gpt-oss T 8, Qwen3 T 512): ncu
# durations and throughputs of every kernel of one layer call (main's CLI). Carry .carry/v58z.
set -uo pipefail
R=$OUT/r; mkdir -p $R; V=/tmp/v58; mkdir -p $V
xz -dc .carry/v58z/fp4gemm_main.xz > $V/fp4gemm_main; chmod +x $V/fp4gemm_main
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --iters 1 --warmup 1"
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --iters 1 --warmup 1"
for c in "G 8" "Q 64" "Q 512"; do set -- $c; n=${1}$2; B=${!1}
  timeout 120 $V/fp4gemm_main $B --tokens $2 > $R/cli_$n.txt 2>&1
  timeout 150 ncu --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats $V/fp4gemm_main $B --tokens $2 > $R/ncu_$n.txt 2>&1
  echo "$n rc=$?"; done
tar czf $OUT/r.tgz -C $OUT r
for f in $R/ncu_*; do echo "== $f"; grep -E "^  [a-z_:<>0-9 ]+\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Issued Warp|Registers Per|Grid Size" $f | sed 's/(DecodeLayerArgs)//' | cut -c1-130 | tail -80; done
