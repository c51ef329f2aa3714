#!/usr/bin/env bash
# v106 call 2 (one H200, needs_h200): issue 52's table on main as checked out (v95's table.sh: built there,
# tk_layer_pieces.py, ROUND_REPS rounds), then -- while the call has time -- the W4A4 NVFP4 cells (last measured v87)
# with the CLI that build made (probe/w4a4_cells.sh: `layer`, weights in pieces, checkpoint values, median of 100).
# Carry .carry/peers. Not run (no H200 came).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS
ROUND_REPS=${ROUND_REPS:-100 100} HM=0 SMOKE=0 MAXB=${MAXB:-300} NAME=h2_table bash bench/results/v95/probe/table.sh
[ -x /tmp/b/tools/fp4gemm ] || { echo "no CLI in /tmp/b"; exit 3; }
[ $((SECONDS - t0)) -lt ${W4MAX:-470} ] || { echo "no time for the W4A4 cells"; exit 0; }
R=$OUT/w; mkdir -p $R
bash bench/results/v106/probe/w4a4_cells.sh /tmp/b/tools/fp4gemm $R
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/h2_w4a4.tgz -C $OUT w && rm -rf $R; echo "all done [$((SECONDS - t0)) s]"
