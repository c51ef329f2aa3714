#!/usr/bin/env bash
# v111 call A (whichever GPU comes; no build there). On an H200 first: issue 52's table on main's carried CLI and
# CPython 3.12 extension (v109's call12.sh: tk same run, two rounds of 100, then the W4A4 cells). Then the A/B of
# exp/piece-slots (p) against main (m), both CLIs CPU-built (nvcc 13.0, sm_90a): v106's ab3.sh on the layer suite
# (W4A16 pieces, checkpoint scales, digests), ROUNDS rounds (default 3) of 100, alternating m / p.
# Carry .carry/peers, .carry/main_cli.tar.xz, .carry/ext312.tar.xz, .carry/ps_cli.tar.xz
# (trim.sh out with KEEP="v95 v102 v106 v108 v109 v110 v111").
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W/ab
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
case $name in
  *H200*) bash bench/results/v109/probe/call12.sh > $OUT/call12.log 2>&1; echo "table rc $? [$((SECONDS - t0)) s]"
          tail -32 $OUT/call12.log ;;
esac
for v in m p; do
  case $v in m) a=.carry/main_cli.tar.xz;; p) a=.carry/ps_cli.tar.xz;; esac
  mkdir -p /tmp/ab/$v /tmp/x$v && xz -dc $a | tar xf - -C /tmp/x$v && ln -sf /tmp/x$v/tools/fp4gemm /tmp/ab/$v/fp4gemm
done
echo "unpacked [$((SECONDS - t0)) s]"
ROUNDS=${ROUNDS:-3} bash bench/results/v106/probe/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab m p | tail -24
echo "ab done [$((SECONDS - t0)) s]"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/cA.tgz -C $OUT w && rm -rf $W; echo "all done [$((SECONDS - t0)) s]"
