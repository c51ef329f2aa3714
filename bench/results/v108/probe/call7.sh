#!/usr/bin/env bash
# v108 call 7: on an H200, call6.sh (issue 52's H200 table on main, one round here). On any other card, or on any
# card with NOTABLE=1, per-pipe issue of main's general MoE GEMMs (carried CPU-built CLI .carry/main_cli.tar.xz,
# cbab00c): ncu --clock-control none, the layer's second GEMM1 / GEMM2 launches at CELLS ("shape T" pairs, comma
# separated; default the cells v108's fold lost most on and gpt-oss T 512, where it did not), NT seconds each.
# Run in v108 as NOTABLE=1 CELLS="gptoss 4096,gptoss 512" on an H200 (ncu_h200/). Carry .carry/peers and
# .carry/main_cli.tar.xz (trim.sh out with KEEP="v95 v102 v106 v108").
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name"
[ "${NOTABLE:-0}" = 1 ] || case $name in *H200*) ROUND_REPS="${ROUND_REPS:-100}" MAXB=${MAXB:-260} exec bash bench/results/v108/probe/call6.sh ;; esac
mkdir -p /tmp/xm && xz -dc .carry/main_cli.tar.xz | tar xf - -C /tmp/xm; C=/tmp/xm/tools/fp4gemm; R=$OUT/ncu; mkdir -p $R
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
M='regex:sm__inst_executed_pipe_[a-z_]+\.avg\.pct_of_peak_sustained_active$'
M="$M,regex:sm__pipe_[a-z_]+_cycles_active\.avg\.pct_of_peak_sustained_active$"
M="$M,sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,gpu__time_duration.sum"
IFS=, read -ra CL <<< "${CELLS:-gptoss 4096,qwen3 4096,gptoss 512,qwen3 1024}"
for c in "${CL[@]}"; do set -- $c
  timeout ${NT:-150} ncu --clock-control none --kernel-name regex:fused_grouped_gemm --launch-skip 2 --launch-count 2 \
    --metrics "$M" $C layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint \
    --iters 2 --warmup 1 > $R/${1}_t$2.txt 2>&1
  echo "$1 T$2 rc $? [$((SECONDS - t0)) s]"
  grep -E "fused_grouped_gemm|pct_of_peak|duration" $R/${1}_t$2.txt | sed -E 's/ +/ /g' | cut -c1-150 | head -40
done
echo "all done [$((SECONDS - t0)) s]"
