#!/usr/bin/env bash
# v95 call 2 (one GPU): main's build on this machine (table.sh PHASE=build: lib, CLI, Python extension) gives m3
# (main's v93 kernels); il = exp/drain-ilp de0c240's cli / gt carried uncompressed in .carry/v95i/il (their
# fatbins do not compress: both bundles did not fit the carry). Then callI: A/B, digests, GLU gtests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; P=bench/results/v95/probe
TESTS=OFF PHASE=build NAME=t_build bash $P/table.sh
mkdir -p /tmp/m3 && ln -sf /tmp/b/tools/fp4gemm /tmp/m3/cli && rm -rf /tmp/il && ln -s $PWD/.carry/v95i/il /tmp/il
BUNDLES= ROUNDS=${ROUNDS:-2} GTT=${GTT:-150} NAME=i2 bash $P/callI.sh
echo "call2 done [$((SECONDS - t0)) s]"
