#!/usr/bin/env bash
# Prepared for the next session (v70 spent its device time): the whole C++ GPU tier on main's kernels as merged in v70
# (9-op pieces decode in both formats). .carry/v111t holds the gtests of 3e603f7, whose device code and GPU tests equal
# main 0b4bbba's (later commits changed the Python binding, Python tests and docs only). One call per shard:
#   bash next_session.sh 0|1|2   carry .carry/v111t   (shard 2 adds memcheck of the pieces / sanitizer tests)
# The Python GPU tier of main's final extension ran in v70 h1 (.carry/v113p).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
G=/tmp/v111t; mkdir -p $G; [ -x $G/gt ] || { xz -dc .carry/v111t/gt.xz > $G/gt; chmod +x $G/gt; }
GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$1 timeout 520 $G/gt > $R/shard$1.txt 2>&1
echo "shard $1 rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests from .* ran" $R/shard$1.txt | head -20
if [ "$1" = 2 ]; then
  timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $G/gt \
    --gtest_filter='*MoeSanitizer*:*BadRouting*:*FusedSanitizer*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
fi
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
