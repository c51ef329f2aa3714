#!/usr/bin/env bash
# v89 call Q (one H200): exp/wide-stages e135402's build (ws, BUNDLE v47b, unpacked by call A): the MoE / pieces gtests
# that walk the token classes, k-block counts and split-K, then compute-sanitizer memcheck and racecheck of the paired
# mainloop's and the tile edges' tests (the stage-pair barrier protocol).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
F='MoePairedMainloop.*:MoeRouting.*:MoeGluPiecesShapes.*:MoeGluShapes.*:MoePieces.*:MoeRandomPieces.*:MoeRandom.*:MoeDeterminism.*:MoeLayerPieces.*:MoeGluPieces.*:MoeGlu.*'
if [ "${GT:-1}" = 1 ]; then
timeout 240 /tmp/ws/gt --gtest_filter="$F" > $R/gt.txt 2>&1
echo "gt rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt.txt | head -20
fi
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 /tmp/ws/gt \
    --gtest_filter='MoePairedMainloop.*:MoeRouting.TokenTileEdges:MoeGluPiecesShapes.*' > $R/$tool.txt 2>&1
  echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/$tool.txt | head -6
done
gzip -f $R/*.txt; tar czf $OUT/${NAME:-q}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"
