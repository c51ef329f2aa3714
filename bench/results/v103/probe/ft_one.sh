#!/usr/bin/env bash
# v103: exp/fused-trigger in one call with one carried CLI (.carry/pg_ft.tar.xz, the branch with its A/B knob):
# arm "main" = the same binary with FP4GEMM_EXP_NO_TRIGGER=1 (the layer's GEMMs do not trigger: GEMM2 and the combine
# launch when the GEMM before them ends, as on main; only the combine's programmatic launch attribute stays), arm "ft" =
# the trigger. The layer suite W4A16 and W4A4 NVFP4 on pieces, alternating, 2 rounds (v102's ab_layer.sh), then
# compute-sanitizer memcheck of a general-path layer run (Qwen3 T 512, W4A16 and W4A4) with the trigger.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/ab/main && tar xJf .carry/pg_ft.tar.xz -C /tmp/ab
printf '#!/bin/sh\nFP4GEMM_EXP_NO_TRIGGER=1 exec /tmp/ab/ft/fp4gemm "$@"\n' > /tmp/ab/main/fp4gemm && chmod +x /tmp/ab/main/fp4gemm
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/gpu.txt
C=${CASES:-11,12,32,13,14,19,34,20,21,9,15}
mkdir -p $OUT/w16 $OUT/w4 $OUT/san
ACT=bf16 bash bench/results/v102/probe/ab_layer.sh main ft $C $OUT/w16
ACT=nvfp4 bash bench/results/v102/probe/ab_layer.sh main ft $C $OUT/w4
for act in bf16 nvfp4; do
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/ab/ft/fp4gemm layer --experts 128 --hidden 2048 \
    --inter 768 --tokens 512 --topk 8 --act $act --weight-layout pieces --iters 3 --warmup 1 > $OUT/san/memcheck_$act.txt 2>&1
  echo "memcheck $act rc $?"; grep -E "ERROR SUMMARY" $OUT/san/memcheck_$act.txt
done
