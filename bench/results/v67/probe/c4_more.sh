#!/usr/bin/env bash
# v67 c4 (right after c3, warm machine: /tmp/v102/fp4gemm and /tmp/v92/cli_old from c2 / c3): c3's cells again (3 more
# rounds), then a second layer-suite round and the MoE suite W4A4 NVFP4, feat rows (A) against pieces (B), digests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
[ -x /tmp/v102/fp4gemm ] && [ -x /tmp/v92/cli_old ] || { echo "cold machine: nothing to run"; exit 0; }
t0=$SECONDS; R=$OUT/r
bash bench/results/v67/probe/c3_cell.sh > /dev/null 2>&1; rm -rf /tmp/c3r; mkdir -p /tmp/c3r; tar xzf $OUT/r.tgz -C /tmp/c3r; rm -f $OUT/r.tgz
mkdir -p $R/ab; cp /tmp/c3r/r/cells.txt $R/cells2.txt
echo "cells [$((SECONDS - t0)) s]"
export FP4GEMM_DIGEST=1
for wl in rows pieces; do s=A; [ $wl = pieces ] && s=B
  timeout 60 /tmp/v102/fp4gemm bench --suite layer --act bf16 --weight-layout $wl --settle-ms 100 --json $R/ab/layer_${s}2.json > $R/ab/layer_${s}2.txt 2>&1
  timeout 100 /tmp/v102/fp4gemm bench --suite moe --act nvfp4 --weight-layout $wl --settle-ms 100 --json $R/ab/moe_nvfp4_${s}1.json > $R/ab/moe_nvfp4_${s}1.txt 2>&1
  echo "$wl [$((SECONDS - t0)) s]"; done
python3 bench/results/v50/probe/ab_compare.py $R/ab 2>&1 | tee $R/ab/compare.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
