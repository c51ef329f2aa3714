#!/usr/bin/env bash
# v88 call S (one H200): where the general GEMM1's warps stall at gpt-oss-120b T 512 (main's CLI, c9 = 6efc626's build,
# BUNDLE v42): ncu SourceCounters (hot SASS by stall samples) and WarpStateStats of the first GEMM1 launch.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
timeout 170 ncu --clock-control none --print-kernel-base function -k regex:fused_grouped_gemm -c 1 \
  --section SourceCounters --section WarpStateStats --section InstructionStats --print-details all \
  /tmp/c9/cli layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai --tokens 512 --act bf16 \
  --weight-layout pieces --values checkpoint --iters 1 --warmup 0 > $R/ncu_src_gptoss_t512.txt 2>&1
echo "ncu rc $? [$((SECONDS - t0)) s]"
sed -n '/fused_grouped_gemm (/,$p' $R/ncu_src_gptoss_t512.txt | grep -vE "^ *-+ *$" | cut -c1-160 | head -90
tar czf $OUT/${NAME:-s}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"
