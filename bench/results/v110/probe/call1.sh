#!/usr/bin/env bash
# v110 call 1 (whichever GPU comes; no build there): the A/B of exp/piece-prefetch (5570d4a) against main (fec1232's
# kernels = main's), both CLIs CPU-built (nvcc 13.0, sm_90a) and carried: .carry/main_cli.tar.xz (m) and
# .carry/pp_cli.tar.xz (p). v106's ab3.sh on the layer suite (W4A16 pieces, checkpoint scales, digests), ROUNDS rounds
# (default 3) of 100, alternating m / p. Needs `trim.sh out` with KEEP="v95 v102 v106 v108 v109 v110".
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W/ab
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
for v in m p; do
  case $v in m) a=.carry/main_cli.tar.xz;; p) a=.carry/pp_cli.tar.xz;; esac
  mkdir -p /tmp/ab/$v /tmp/x$v && xz -dc $a | tar xf - -C /tmp/x$v && ln -sf /tmp/x$v/tools/fp4gemm /tmp/ab/$v/fp4gemm
done
echo "unpacked [$((SECONDS - t0)) s]"
ROUNDS=${ROUNDS:-3} bash bench/results/v106/probe/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab m p | tail -24
echo "ab done [$((SECONDS - t0)) s]"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/c1.tgz -C $OUT w && rm -rf $W; echo "all done [$((SECONDS - t0)) s]"
