#!/usr/bin/env bash
# v54 call 10 (one H200): main + the grid routing from 4096 ids (c9: flat at 4096 ids, -0.8 % at 6144): the routing and
# layer GPU tests and memcheck of the routing tests on that build.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R
T=.carry/v54/gpu_tests
timeout 200 $T --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*' > $R/gtest.log 2>&1; echo "gtest rc=$?" | tee -a $R/rc.txt; tail -1 $R/gtest.log
timeout 120 compute-sanitizer --tool memcheck $T --gtest_filter='AlignRouting*' > $R/memcheck.log 2>&1; echo "memcheck rc=$?" | tee -a $R/rc.txt; tail -1 $R/memcheck.log
tar czf $OUT/r.tgz -C $OUT r
