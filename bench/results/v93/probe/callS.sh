#!/usr/bin/env bash
# v93 call S (one H200): compute-sanitizer memcheck and racecheck of exp/glu-drain's GLU epilogue (gd: BUNDLE v93g):
# the MoE GLU shapes (pieces and rows, split tiles, both tile heights) and the dual GEMM's shared
# epilogue.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/s; mkdir -p $R
if [ -n "${BUNDLE:-}" ]; then H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
  [ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }; fi
[ -x /tmp/gd/gt ] || { echo "no /tmp/gd/gt (carry .carry/v93g with BUNDLE=v93g)"; exit 3; }
F=${SF:-'MoeGluPiecesShapes.*:MoeGluShapes.*:DualGemmShapes.SharedEpilogueGivesTheOwnersBits'}
for tool in memcheck racecheck; do
  timeout ${ST:-200} compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 /tmp/gd/gt \
    --gtest_filter="$F" > $R/$tool.txt 2>&1
  echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $R/$tool.txt | head -6
done
gzip -f $R/*.txt; tar czf $OUT/${NAME:-s}.tgz -C $OUT s && rm -rf $R; echo "done [$((SECONDS - t0)) s]"
