#!/usr/bin/env bash
# v109 call 12: call10.sh's layout of the carried CPU-built CLI and CPython 3.12 extension, then on an H200 v108's
# call6.sh (issue 52's table: ROUND_REPS rounds, default two of 100, then the W4A4 NVFP4 cells); on any other card
# one short round (20 reps) of the same table, which checks that the carried extension runs the whole harness.
# Carry .carry/peers, .carry/main_cli.tar.xz, .carry/ext312.tar.xz (trim.sh out, KEEP="v95 v102 v106 v108 v109").
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; B=/tmp/b; mkdir -p $B/python
xz -dc .carry/main_cli.tar.xz | tar xf - -C $B && xz -dc .carry/ext312.tar.xz | tar xf - -C $B/python && touch $B/built
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name [$((SECONDS - t0)) s]"
case $name in
  *H200*) ROUND_REPS="${ROUND_REPS:-100 100}" MAXB=${MAXB:-260} exec bash bench/results/v108/probe/call6.sh ;;
  *) ROUND_REPS=20 HM=0 SMOKE=0 NAME=h1_short bash bench/results/v95/probe/table.sh ;;
esac
echo "all done [$((SECONDS - t0)) s]"
