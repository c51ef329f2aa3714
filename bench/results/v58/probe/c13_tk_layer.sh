#!/usr/bin/env bash
# Issue 52's table at 1efc4d5's kernels (.carry/pkg): tk_layer.py, the same run as triton_kernels, graph replay, L2
# flushed, 100 reps. Carry .carry/pkg .peers.
set -uo pipefail
R=$OUT/r; mkdir -p $R
PYTHONPATH="$PWD/.carry/pkg:$PWD/.peers" OUT=$R TKL_TOKENS=1,2,4,8,64,512,4096 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=200 \
  timeout 250 python3 .peers/tk_layer.py > $R/tk_layer.txt 2>&1
echo "tk_layer rc=$?"; tar czf $OUT/r.tgz -C $OUT r
grep -A30 "median us per layer" $R/tk_layer.txt | head -40
