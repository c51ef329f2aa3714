#!/usr/bin/env bash
# v71 d (one H200): the whole C++ GPU tier on main's kernels (c1d4412: the 9-operation pieces decode in both formats, never
# run whole). .carry/v111t holds the gtests of 3e603f7, whose device code and GPU tests equal main's (later commits: the
# Python binding, Python tests, docs, and a SASS-identical refactor of dequant.cuh). Four shards, two per call:
#   bash d.sh 0 1      bash d.sh 2 3 memcheck      (carry .carry/v111t)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
G=/tmp/v111t; mkdir -p $G; [ -x $G/gt ] || { xz -dc .carry/v111t/gt.xz > $G/gt; chmod +x $G/gt; }
for s in "$@"; do
  [ "$s" = memcheck ] && continue
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s timeout 265 $G/gt > $R/shard$s.txt 2>&1
  echo "shard $s rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/shard$s.txt | head -12
  grep -E "^\[ RUN" $R/shard$s.txt | tail -1
done
if [[ " $* " == *" memcheck "* ]]; then
  timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $G/gt \
    --gtest_filter='*MoeSanitizer*:*BadRouting*:*FusedSanitizer*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
fi
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
