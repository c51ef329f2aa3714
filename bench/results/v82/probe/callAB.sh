#!/usr/bin/env bash
# v82: one call for the evict_first build q1 -- decode + pieces gtests, memcheck / racecheck of the wide and long-share
# tests, then issue 52's table (one sustained 100-rep round and a 20-rep burst, triton_kernels and Humming same call).
# Carry .carry/v5 and .peers.
cd "$(dirname "$0")/../../../.."
BUNDLE=v5 M=q1 MODES=tests GF='MoeLayerDecode.*:MoeLayerPieces.*' SANF='MoeLayerDecode.WidePath*:MoeLayerDecode.LongShares*' \
  NAME=ab_tests bash bench/results/v79/probe/w.sh 2>&1 | tail -14
BUNDLE=v5 M=q1 ROUND_REPS="${ROUND_REPS:-100 20}" HBUDGET=120 HTMO=150 NAME=ab_table bash bench/results/v80/probe/table.sh 2>&1 | tail -60
