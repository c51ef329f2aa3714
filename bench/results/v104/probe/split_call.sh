#!/usr/bin/env bash
# v104: one call (the device time left): exp/split-scales' A/B (split_ab.sh), then its GPU tests with the knob on
# (split_tests.sh), both binaries from one carried archive (.carry/both_split.tar.xz: pg/fp4gemm, gt/fp4gemm_gpu_tests).
cd "$(dirname "$0")/../../../.."
PG=.carry/both_split.tar.xz bash bench/results/v104/probe/split_ab.sh
GT=.carry/both_split.tar.xz TT=${TT:-150} ST=${ST:-45} TOOLS="${TOOLS:-memcheck racecheck synccheck}" \
  FILTER="${FILTER:-MoePieces*:MoeLayer*:MoeGraph*:Seeds/Moe*:All/MoeLayerCases*:All/MoeCombos*:Cases/*:MoeStreamK*:MoeDeterminism*:MoePairedMainloop*:MoeRandomPieces*}" \
  bash bench/results/v104/probe/split_tests.sh
