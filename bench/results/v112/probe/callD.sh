#!/usr/bin/env bash
# v112 call D (whichever GPU comes; no build there): how much of the down GEMM's prologue is on the layer's critical
# path. exp/skew's CLI spins FP4GEMM_PRO_DELAY cycles at the start of every plain MoE kernel (the layer's GEMM2)
# before its schedule; v106's ab3.sh on the layer suite (W4A16 pieces, checkpoint scales, digests) at 0 / 5,000 /
# 10,000 / 20,000 cycles against main's CLI, alternating. Carry .carry/main_cli.tar.xz, .carry/sk_cli.tar.xz.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W/ab
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
mkdir -p /tmp/xm /tmp/xk && xz -dc .carry/main_cli.tar.xz | tar xf - -C /tmp/xm && \
  xz -dc .carry/sk_cli.tar.xz | tar xf - -C /tmp/xk || { echo "unpack failed"; exit 3; }
mkdir -p /tmp/ab/m && ln -sf /tmp/xm/tools/fp4gemm /tmp/ab/m/fp4gemm
names=m
for d in ${DELAYS:-0 5000 10000 20000}; do
  n=d$((d / 1000)); mkdir -p /tmp/ab/$n
  printf '#!/bin/sh\nFP4GEMM_PRO_DELAY=%s exec /tmp/xk/tools/fp4gemm "$@"\n' $d > /tmp/ab/$n/fp4gemm
  chmod +x /tmp/ab/$n/fp4gemm; names="$names $n"
done
echo "unpacked [$((SECONDS - t0)) s]: $names"
ROUNDS=${ROUNDS:-2} bash bench/results/v106/probe/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab $names | tail -24
echo "ab done [$((SECONDS - t0)) s]"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/cD.tgz -C $OUT w && rm -rf $W; echo "all done [$((SECONDS - t0)) s]"
