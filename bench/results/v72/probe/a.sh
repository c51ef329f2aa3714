#!/usr/bin/env bash
# Prepared for the next session (not run): branch exp/pair-bookkeeping's gtests (.carry/v115t, built from 0dcf1dd on the
# CPU machine): every MoE / pieces / paired-loop / GLU / layer test, then memcheck of the pieces and sanitizer tests.
# Carry .carry/v115t. Merge the branch if this and next_pair_b.sh are green.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
G=/tmp/v115t; mkdir -p $G; [ -x $G/gt ] || { xz -dc .carry/v115t/gt.xz > $G/gt; chmod +x $G/gt; }
timeout 420 $G/gt --gtest_filter='*Moe*:*Pieces*:*Paired*:*Glu*:*Layer*:-*MoeRandom.*' > $R/gt.txt 2>&1
echo "gt rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt.txt | head -16
timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $G/gt \
  --gtest_filter='*MoeSanitizer*:*BadRouting*:*MoePairedMainloop*:*MoeLayerPieces*' > $R/memcheck.txt 2>&1
echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
