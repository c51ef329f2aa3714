#!/usr/bin/env bash
# v69 g (one H200, the session's last ~110 device seconds): branch exp/pieces-9op's gtests (.carry/v110t; pack_pieces
# with the format: MXFP4 pieces in the 9-op bit order, NVFP4 pieces the rows' bits): every pieces test -- plain, GLU,
# random, layer, bad arguments (the format refused by name) -- against the reference and the rows plans.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
G=/tmp/v110t; mkdir -p $G; xz -dc .carry/v110t/gt.xz > $G/gt; chmod +x $G/gt
timeout 45 $G/gt --gtest_filter='MoePieces*:MoeRandomPieces*:MoeGluPieces*:MoeLayerPieces*' > $R/gt_pieces.txt 2>&1
echo "gt pieces rc $? [$((SECONDS - t0)) s]"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt_pieces.txt | head -12
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
