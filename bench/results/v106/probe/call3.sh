#!/usr/bin/env bash
# v106 call 3 (one H200, needs_h200): issue 52's table on main (v95's table.sh: main built there, tk_layer_pieces.py,
# two rounds of 100), then the A/B of exp/rot-decode on the layer suite (v102's ab_layer.sh: m = the CLI just built
# from main, r = exp/rot-decode's CLI and f = exp/wide-fold's, CPU-built (nvcc 13.0, sm_90a) and carried in
# .carry/rot_cli.tar.xz / .carry/fold_cli.tar.xz (v106/probe/ab3.sh); W4A16
# pieces, checkpoint scales, digests, ROUNDS rounds), then, while the call has time, the W4A4 NVFP4 cells (call2.sh's
# loop). Carry .carry/peers, .carry/rot_cli.tar.xz and .carry/fold_cli.tar.xz.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W
ROUND_REPS=${ROUND_REPS:-100 100} HM=0 SMOKE=0 MAXB=${MAXB:-300} NAME=h3_table bash bench/results/v95/probe/table.sh
[ -x /tmp/b/tools/fp4gemm ] || { echo "no CLI in /tmp/b"; exit 3; }
mkdir -p /tmp/ab/m; ln -sf /tmp/b/tools/fp4gemm /tmp/ab/m/fp4gemm; clis=m
for v in r f; do  # r: exp/rot-decode (.carry/rot_cli.tar.xz), f: exp/wide-fold (.carry/fold_cli.tar.xz)
  case $v in r) a=.carry/rot_cli.tar.xz;; f) a=.carry/fold_cli.tar.xz;; esac
  [ -f $a ] || continue
  mkdir -p /tmp/ab/$v /tmp/x$v && xz -dc $a | tar xf - -C /tmp/x$v && ln -sf /tmp/x$v/tools/fp4gemm /tmp/ab/$v/fp4gemm && clis="$clis $v"
done
mkdir -p $W/ab; ROUNDS=${ROUNDS:-2} bash bench/results/v106/probe/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab $clis | tail -20
echo "ab done [$((SECONDS - t0)) s]"
if [ $((SECONDS - t0)) -lt ${W4MAX:-470} ]; then
  bash bench/results/v106/probe/w4a4_cells.sh /tmp/b/tools/fp4gemm $W
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/h3.tgz -C $OUT w && rm -rf $W; echo "all done [$((SECONDS - t0)) s]"
