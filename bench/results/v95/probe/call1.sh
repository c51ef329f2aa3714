#!/usr/bin/env bash
# v95 call 1 (one GPU): callI's CLI A/B first (quiet machine), then main's build on this machine (table.sh
# PHASE=build) in the background beside callI's digests and GLU gtests, then table.sh's smoke test and rounds.
# Carry .carry/v94b, .carry/v95i, .carry/peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; P=bench/results/v95/probe
ROUNDS=${ROUNDS:-2} DIG=0 GT=0 NAME=i_ab bash $P/callI.sh
TESTS=${TESTS:-ON} PHASE=build NAME=t_build bash $P/table.sh > $OUT/t_build.txt 2>&1 &
ROUNDS=0 DIG=1 GT=1 GTT=${GTT:-150} NAME=i_dig bash $P/callI.sh
wait; echo "build side: $(grep -E 'build rc|cmake failed' $OUT/t_build.txt) [$((SECONDS - t0)) s]"
[ "${TABLE:-1}" = 1 ] && [ $((SECONDS - t0)) -lt ${TLATE:-400} ] && \
  ROUND_REPS="${ROUND_REPS:-100 100}" HM=0 MAXB=9999 NAME=t_table bash $P/table.sh
echo "call1 done [$((SECONDS - t0)) s]"
