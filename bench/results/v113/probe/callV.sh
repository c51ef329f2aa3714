#!/usr/bin/env bash
# v113 call V (no build there): v95's table.sh (bench/tk_layer_pieces.py, triton_kernels' layer in the same run, two
# sustained rounds of 100) on main 050ed63's CPython 3.12 extension (n) and then on main 9273581's (m, the kernels
# before the rounds search), same machine, back to back. On an H200: issue 52's cells (T 1 / 8 / 64 / 512 / 4096).
# On any other card: T 128 / 256 / 1024, the cells where the CLI's A/B moved most. Carry .carry/peers,
# .carry/nw_ext312.tar.xz, .carry/ext312.tar.xz (trim.sh out).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name"
case $name in *H200*) tok=1,8,64,512,4096 ;; *) tok=${TOKS:-128,256,1024} ;; esac
for b in n m; do
  ext=$([ $b = n ] && echo nw_ext312 || echo ext312)
  rm -rf /tmp/b; mkdir -p /tmp/b/python && xz -dc .carry/$ext.tar.xz | tar xf - -C /tmp/b/python && touch /tmp/b/built
  echo "== $b ($ext) [$((SECONDS - t0)) s]"
  TOK=$tok ROUND_REPS="${ROUND_REPS:-100 100}" HM=0 SMOKE=0 NAME=v_table_$b bash bench/results/v95/probe/table.sh 2>&1 | \
    grep -E "^(gpt|qwen)|tk round|done"
done
echo "all done [$((SECONDS - t0)) s]"
