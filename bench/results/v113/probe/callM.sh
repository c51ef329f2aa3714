#!/usr/bin/env bash
# v113 call M: the MoE schedule micro (bench/micro/moe_schedule_cost.cu), CPU-built binaries carried in .carry/ms/
# (base = main's schedule, sub = main's with stamps inside step 3, new = the candidate). On an H200 the
# issue-52 table first (v111's callT.sh; carry .carry/peers, .carry/main_cli.tar.xz, .carry/ext312.tar.xz too).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name"
mkdir -p $OUT/m
for b in ${BINS:-base sub}; do
  [ -x .carry/ms/$b ] || continue
  for r in 1 2; do .carry/ms/$b ${REPS:-20} > $OUT/m/${b}_r$r.txt 2>&1; echo "$b r$r rc $?"; done
done
for b in ${BINS:-base sub}; do echo "== $b"; grep -v "sub (CTA" $OUT/m/${b}_r2.txt | head -40; done
grep "sub (CTA" $OUT/m/sub_r2.txt | awk 'NR%'${REPS:-20}'==0' | head -40
case $name in *H200*) bash bench/results/v111/probe/callT.sh ;; esac
