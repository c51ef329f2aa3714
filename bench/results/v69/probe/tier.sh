#!/usr/bin/env bash
# v69 d: the whole GPU tier of main d01c3fa (gtests in .carry/v106t: plan_on_pieces, kNvPieces, CliGpu skips with its reason) in three gtest shards
# (GTEST_TOTAL_SHARDS=3), one call each: bash tier.sh 0|1|2; shard 2 adds memcheck of the pieces / sanitizer tests.
# bash tier.sh py: the Python GPU tier with the extension of .carry/v105p beside the package sources.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
if [ "$1" = py ]; then
  V=/tmp/v105p; mkdir -p $V; xz -dc .carry/v105p/bins.tar.xz | tar xf - -C $V
  cp $V/_fp4gemm*.so python/fp4gemm/
  (cd tests/python && PYTHONPATH=../../python timeout 500 python3 -m pytest -q -m gpu > $R/py_gpu.txt 2>&1; echo "py gpu rc $? [$((SECONDS - t0)) s]")
  tail -8 $R/py_gpu.txt
else
  V=/tmp/v106t; mkdir -p $V; [ -x $V/gt ] || xz -dc .carry/v106t/bins.tar.xz | tar xf - -C $V
  GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$1 timeout 520 $V/gt > $R/shard$1.txt 2>&1
  echo "shard $1 rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests from .* ran" $R/shard$1.txt | head -20
  grep -E "^\[ RUN" $R/shard$1.txt | tail -1
  if [ "$1" = 2 ]; then
    timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $V/gt \
      --gtest_filter='MoeSanitizer.*:MoeBadRouting.*:MoeLayerPieces.*:FusedSanitizer.*' > $R/memcheck.txt 2>&1
    echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
  fi
fi
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
