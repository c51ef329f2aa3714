#!/usr/bin/env bash
# v113 call U (whichever GPU comes; no build there): issue 52's table on main 050ed63 (the class split's rounds
# search), its CPU-built CLI and CPython 3.12 extension laid out as v109's call12.sh does, then v95's table.sh:
# ROUND_REPS rounds (default two sustained rounds of 100) of bench/tk_layer_pieces.py, triton_kernels' layer in the
# same run; no Humming, no W4A4. First (if carried) .carry/ms/sub2: the micro with stamps in the rounds search. Carry .carry/peers, .carry/nw_cli.tar.xz, .carry/nw_ext312.tar.xz (trim.sh out).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; B=/tmp/b; mkdir -p $B/python
xz -dc .carry/${CLI:-nw_cli}.tar.xz | tar xf - -C $B && xz -dc .carry/${EXT:-nw_ext312}.tar.xz | tar xf - -C $B/python && touch $B/built
[ -x .carry/ms/sub2 ] && { .carry/ms/sub2 20 > $OUT/sub2.txt 2>&1; grep -A1 "sub:" $OUT/sub2.txt | sed -n 37,48p; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name [$((SECONDS - t0)) s]"
ROUND_REPS="${ROUND_REPS:-100 100}" HM=0 SMOKE=0 NAME=u_table bash bench/results/v95/probe/table.sh
echo "all done [$((SECONDS - t0)) s]"
