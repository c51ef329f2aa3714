#!/usr/bin/env bash
# v112 call S (whichever GPU comes; no build there): exp/skew -- consumer warpgroup 1 starts FP4GEMM_SKEW cycles
# (GEMM2 and other plain MoE plans) / FP4GEMM_SKEW_GLU cycles (GEMM1) after the ring's first stage is full, so the
# two warpgroups' epilogues fall out of phase. One CPU-built CLI (nvcc 13.0, sm_90a) run under several settings
# against main's CLI, v106's ab3.sh on the layer suite (W4A16 pieces, checkpoint scales, digests), alternating.
# On an H200 (with .carry/ext312.tar.xz carried) issue 52's table first (v109's call12.sh).
# Carry .carry/peers, .carry/main_cli.tar.xz, .carry/sk_cli.tar.xz [, .carry/ext312.tar.xz] (trim.sh out).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; W=$OUT/w; mkdir -p $W/ab
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
case $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) in
  *H200*) [ -f .carry/ext312.tar.xz ] && { bash bench/results/v109/probe/call12.sh > $OUT/call12.log 2>&1; echo "table rc $? [$((SECONDS - t0)) s]"; tail -32 $OUT/call12.log; } ;;
esac
mkdir -p /tmp/xm /tmp/xk && xz -dc .carry/main_cli.tar.xz | tar xf - -C /tmp/xm && \
  xz -dc .carry/sk_cli.tar.xz | tar xf - -C /tmp/xk || { echo "unpack failed"; exit 3; }
mkdir -p /tmp/ab/m && ln -sf /tmp/xm/tools/fp4gemm /tmp/ab/m/fp4gemm
VARS=${VARS:-"k0:0:0 k3:3000:0 k6:6000:0 k10:10000:0 g6:0:6000"}
names=m
for v in $VARS; do
  IFS=: read n s g <<< "$v"; mkdir -p /tmp/ab/$n
  printf '#!/bin/sh\nFP4GEMM_SKEW=%s FP4GEMM_SKEW_GLU=%s exec /tmp/xk/tools/fp4gemm "$@"\n' $s $g > /tmp/ab/$n/fp4gemm
  chmod +x /tmp/ab/$n/fp4gemm; names="$names $n"
done
echo "unpacked [$((SECONDS - t0)) s]: $names"
ROUNDS=${ROUNDS:-2} bash bench/results/v106/probe/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab $names | tail -24
echo "ab done [$((SECONDS - t0)) s]"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/cS.tgz -C $OUT w && rm -rf $W; echo "all done [$((SECONDS - t0)) s]"
