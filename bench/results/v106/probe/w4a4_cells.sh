#!/usr/bin/env bash
# v106: issue 52's W4A4 NVFP4 cells (last measured v87) with one CLI. Usage: w4a4_cells.sh CLI OUTDIR
# `layer`, weights in pieces, checkpoint values, median of 100 (graph replay inside the CLI); one line per cell.
set -uo pipefail
cli=$1 W=$2; t0=$SECONDS; mkdir -p $W
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
for n in gptoss qwen3; do for T in 1 8 64 512 4096; do
  f=$W/nvfp4_${n}_t${T}.txt
  timeout 30 $cli layer $(shape $n) --tokens $T --act nvfp4 --weight-layout pieces --values checkpoint \
    --iters 100 --warmup 10 --json $W/nvfp4_${n}_t${T}.json > $f 2>&1
  echo "$n T$T: nvfp4 $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2) [$((SECONDS - t0)) s]"
done; done
