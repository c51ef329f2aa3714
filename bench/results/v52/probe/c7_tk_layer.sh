#!/usr/bin/env bash
# Session 67, call 7 (one H200): issue 52's table on main's final build, triton_kernels' layer in the same
# run (.peers = ../shared/peers, carried): W4A16, T 1, 2, 4, 8, 64, 512, 4096, 100 reps per case.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg:$PWD/.peers" TK_NUM_WARPS=8
R=$OUT/r; mkdir -p $R
OUT=$R TKL_TOKENS=1,2,4,8,64,512,4096 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=400 timeout 520 python3 .peers/tk_layer.py > $R/tk_layer.txt 2>&1
echo "rc=$?"; grep -vE "^\s*$" $R/tk_layer.txt | tail -45
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
