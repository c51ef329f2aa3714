#!/usr/bin/env bash
# v106 call 2 (one H200, needs_h200): issue 52's table on main as checked out (v95's table.sh: built there,
# tk_layer_pieces.py, ROUND_REPS rounds), then -- while the call has time -- the W4A4 NVFP4 cells (last measured v87)
# with the CLI that build made: `layer`, weights in pieces, checkpoint values, median of 100, W4A16 beside it as the
# control, one round. Carry .carry/peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS
ROUND_REPS=${ROUND_REPS:-100 100} HM=0 SMOKE=0 MAXB=${MAXB:-300} NAME=h2_table bash bench/results/v95/probe/table.sh
[ -x /tmp/b/tools/fp4gemm ] || { echo "no CLI in /tmp/b"; exit 3; }
[ $((SECONDS - t0)) -lt ${W4MAX:-470} ] || { echo "no time for the W4A4 cells"; exit 0; }
R=$OUT/w; mkdir -p $R
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
for n in gptoss qwen3; do for T in 1 8 64 512 4096; do line="$n T$T:"
  for act in nvfp4 bf16; do
    f=$R/${act}_${n}_t${T}.txt
    timeout 60 /tmp/b/tools/fp4gemm layer $(shape $n) --tokens $T --act $act --weight-layout pieces --values checkpoint \
      --iters 100 --warmup 10 --json $R/${act}_${n}_t${T}.json > $f 2>&1
    line="$line $act $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
  done; echo "$line [$((SECONDS - t0)) s]"; done; done
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/h2_w4a4.tgz -C $OUT w && rm -rf $R; echo "all done [$((SECONDS - t0)) s]"
