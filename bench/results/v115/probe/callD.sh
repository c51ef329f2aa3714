#!/usr/bin/env bash
# v115 call D (no build there): on an H200, issue 52's table on main's kernels (050ed63's) from the CPU-built CPython
# 3.12 extension (.carry/ext312.tar.xz: _fp4gemm, built in /work/bx with -DPython_EXECUTABLE=pyenv's 3.12.1), laid
# out as v95's table.sh build folder: ROUND_REPS (two sustained rounds of 100) of bench/tk_layer_pieces.py,
# triton_kernels' layer in the same run. On any other card nothing runs (v113 has main's H100 table).
# Carry .carry/peers .carry/ext312.tar.xz (trim.sh out).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
[[ $name == *H200* ]] || { echo "not an H200: nothing run"; exit 0; }
B=/tmp/b; mkdir -p $B/python && xz -dc .carry/ext312.tar.xz | tar xf - -C $B/python && touch $B/built
PYTHONPATH=$B/python timeout 60 python3 -c "import _fp4gemm; print('extension loads')" 2>&1 | tail -2
ROUND_REPS="${ROUND_REPS:-100 100}" HM=0 SMOKE=0 NAME=d_table_h200 bash bench/results/v95/probe/table.sh
