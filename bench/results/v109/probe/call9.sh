#!/usr/bin/env bash
# v109 call 9: on an H200, v108's call6.sh (issue 52's H200 table on main with v103's W4A16 trigger, built on the
# machine, triton_kernels' layer in the same run, then the W4A4 NVFP4 cells). On any other card, v108's call8.sh
# (per-SASS-instruction stall samples of the general MoE GEMMs from the carried CPU-built CLI). Carry .carry/peers and
# .carry/main_cli.tar.xz (trim.sh out with KEEP="v95 v102 v106 v108 v109").
set -uo pipefail
cd "$(dirname "$0")/../../../.."
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name"
case $name in
  *H200*) ROUND_REPS="${ROUND_REPS:-100}" MAXB=${MAXB:-260} exec bash bench/results/v108/probe/call6.sh ;;
  *) exec bash bench/results/v108/probe/call8.sh ;;
esac
