#!/usr/bin/env bash
# v70 a (one H200): branch exp/pieces-9op (74395bc's gtests, .carry/v110t): every Moe* GPU test (pieces and rows, every
# format, layers, random sequences, bad routing) and memcheck of the pieces / sanitizer tests. The branch changes only
# the MXFP4 pieces kernels and the pack kernel; NVFP4 / rows kernels are SASS-identical to main's (whose whole tier ran
# green in v69 d6-d8).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
G=/tmp/v110t; mkdir -p $G; [ -x $G/gt ] || { xz -dc .carry/v110t/gt.xz > $G/gt; chmod +x $G/gt; }
timeout 390 $G/gt --gtest_filter='Moe*:GluDevice*:PlanOrdering*' > $R/gt_moe.txt 2>&1
echo "gt moe rc $? [$((SECONDS - t0)) s]"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt_moe.txt | head -20
grep -E "^\[ RUN" $R/gt_moe.txt | tail -1
timeout 160 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $G/gt \
  --gtest_filter='MoeSanitizer.*:MoeBadRouting.*:MoeLayerPieces.*:MoePieces.*:MoeRandomPieces.*' > $R/memcheck.txt 2>&1
echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
