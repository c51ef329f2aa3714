#!/usr/bin/env bash
# v82 call G (carry .carry/v9: r1 = main 98dfa1c's CLI; d1 = the probe FP4GEMM_EXP_DSCALES=1: MXFP4 pieces' blocked
# scales read by the decode kernels from a plan-time copy whose atoms hold each 16-row block's words contiguously).
# d1 gtests (decode + pieces; the probe's copy is stale after in-place weight updates: those tests are expected to
# fail), memcheck of the wide + long-share tests; r1 / d1 alternated, two rounds; ncu DRAM bytes of the decode kernels.
cd "$(dirname "$0")/../../../.."
BUNDLE=v9 M=d1 MODES=tests GF='MoeLayerDecode.*:MoeLayerPieces.*' SANF='MoeLayerDecode.WidePath*:MoeLayerDecode.LongShares*' \
  NAME=g_tests bash bench/results/v79/probe/w.sh 2>&1 | tail -30
BUNDLE=v9 VS="r1 d1" ROUNDS=2 ACT=bf16 WL=pieces NCUCASES="gptoss 8;qwen3 64" \
  CASES="gptoss 1;gptoss 4;gptoss 8;gptoss 16;gptoss 32;gptoss 64;qwen3 1;qwen3 8;qwen3 16;qwen3 32;qwen3 64" \
  NAME=g_ab bash bench/results/v82/probe/ab_l2.sh 2>&1 | grep -E "^r[0-9]|^ncu|done" | sed -E 's/Context 1, Stream [0-9]+, Device 0, CC 9.0//g; s/lts__t_sectors_srcunit_tex_op_read.sum sector [0-9,]+\|//g'
