#!/usr/bin/env bash
# v82 call H (carry .carry/v10: r1 = main 98dfa1c's cli, gt, Python module): the whole C++ GPU tier in 6 shards, CLI
# memcheck / synccheck of the decode path on rows and pieces (W4A16 and W4A4), the layer's Python GPU tests.
cd "$(dirname "$0")/../../../.."
BUNDLE=v10 M=r1 NSH=6 SHT=430 PYT=430 NAME=h_val \
  SANS_LIST="memcheck bf16 rows 8;memcheck bf16 rows 3;synccheck bf16 pieces 8;memcheck nvfp4 pieces 3;memcheck mxfp4 rows 8;memcheck bf16 pieces 8" \
  PYTESTS="test_moe_layer_gpu.py test_pieces.py test_random_sequences.py test_lifetimes_gpu.py" \
  bash bench/results/v78/probe/val.sh 2>&1 | tail -60
