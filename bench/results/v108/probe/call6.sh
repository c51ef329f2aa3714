#!/usr/bin/env bash
# v108 call 6: issue 52's H200 table on main (the v103 W4A16 triggers were never measured on an H200). Exits at once
# on any other card (a call for nvidia-h200 may get an H100, and v106 already has main's H100 table). Builds main on
# the machine (v95's table.sh: library, CLI, Python extension in /tmp/b), two sustained rounds of 100
# (bench/tk_layer_pieces.py, triton_kernels' layer in the same run), then the W4A4 NVFP4 cells with main's CLI
# (v106's w4a4_cells.sh; last measured on an H200 in v87). Carry .carry/peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name"
case $name in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
ROUND_REPS=${ROUND_REPS:-100 100} HM=0 SMOKE=0 MAXB=${MAXB:-330} NAME=h6_table bash bench/results/v95/probe/table.sh
if [ $((SECONDS - t0)) -lt ${W4MAX:-520} ] && [ -x /tmp/b/tools/fp4gemm ]; then
  bash bench/results/v106/probe/w4a4_cells.sh /tmp/b/tools/fp4gemm $OUT/w4a4
fi
echo "all done [$((SECONDS - t0)) s]"
