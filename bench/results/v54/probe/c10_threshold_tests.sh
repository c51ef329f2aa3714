#!/usr/bin/env bash
# v54 call 10 (one H200), and call 11 on the commit after (count_per_warp, mma_16816): the grid routing from 4096 ids: the routing and
# layer GPU tests and memcheck of the routing tests on that build.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R
T=.carry/v54/gpu_tests
timeout 200 $T --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*' > $R/gtest.log 2>&1; echo "gtest rc=$?" | tee -a $R/rc.txt; tail -1 $R/gtest.log
timeout 120 compute-sanitizer --tool memcheck $T --gtest_filter='AlignRouting*' > $R/memcheck.log 2>&1; echo "memcheck rc=$?" | tee -a $R/rc.txt; tail -1 $R/memcheck.log
tar czf $OUT/r.tgz -C $OUT r
