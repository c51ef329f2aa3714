#!/usr/bin/env bash
# v103: exp/fused-trigger gated (GEMM1 triggers only where GEMM2 follows it directly; not before W4A4's separate
# intermediate quantiser). One carried CLI (.carry/pg_ft2.tar.xz), three arms by the knob FP4GEMM_EXP_TRIGGER:
# none (main's launches), ft (the gated default), all (the first form: GEMM1 triggers before the quantiser too).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
tar xJf .carry/pg_ft2.tar.xz -C /tmp && mkdir -p /tmp/ab/none /tmp/ab/ft /tmp/ab/all
cp /tmp/ft2/fp4gemm /tmp/ab/ft/fp4gemm
for k in none all; do printf '#!/bin/sh\nFP4GEMM_EXP_TRIGGER=%s exec /tmp/ab/ft/fp4gemm "$@"\n' $k > /tmp/ab/$k/fp4gemm; chmod +x /tmp/ab/$k/fp4gemm; done
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
C=${CASES:-12,32,13,14,19,34,20,21}
export ROUNDS=${ROUNDS:-3}
mkdir -p $OUT/w4 $OUT/w4all $OUT/w16
ACT=nvfp4 bash bench/results/v102/probe/ab_layer.sh none ft $C $OUT/w4
[ -n "${ALL:-}" ] && ACT=nvfp4 bash bench/results/v102/probe/ab_layer.sh none all $C $OUT/w4all
[ -z "${SKIP16:-}" ] && ACT=bf16 bash bench/results/v102/probe/ab_layer.sh none ft $C $OUT/w16
rm -f $OUT/*/layer_*.txt
