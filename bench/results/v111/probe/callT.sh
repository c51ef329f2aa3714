#!/usr/bin/env bash
# v111 call T: issue 52's H200 table on main's carried CLI and extension (v109's call12.sh: two sustained rounds of
# 100, tk same run), W4A4 cells only if time is left (W4MAX). On any other card: nothing (exit at once).
# Carry .carry/peers, .carry/main_cli.tar.xz, .carry/ext312.tar.xz (trim.sh out).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "card: $name"
case $name in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
W4MAX=${W4MAX:-200} bash bench/results/v109/probe/call12.sh > $OUT/call12.log 2>&1; echo "rc $?"; tail -40 $OUT/call12.log
