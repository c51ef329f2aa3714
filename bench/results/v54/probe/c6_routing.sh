#!/usr/bin/env bash
# v54 call 6 (one H200): the layer's routing over a grid of CTAs (branch routing-grid). M = main aa172c4, R = routing-grid.
# Tests on R: routing (incl. the new grid test), MoeLayer*, memcheck of the routing rows test; then layer cases with
# T x k >= 8192 (and T 256 controls) bf16 / nvfp4, 2 interleaved rounds.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
T=.carry/v54/gpu_tests_R
timeout 150 $T --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*' > $R/gtest.log 2>&1; echo "gtest rc=$?" | tee -a $R/rc.txt; tail -1 $R/gtest.log
grep -E "FAILED|OK \] AlignRoutingRows" $R/gtest.log | head
timeout 150 compute-sanitizer --tool memcheck $T --gtest_filter='AlignRoutingRows*' > $R/memcheck.log 2>&1; echo "memcheck rc=$?" | tee -a $R/rc.txt; tail -1 $R/memcheck.log
timeout 100 compute-sanitizer --tool racecheck $T --gtest_filter='AlignRoutingRows*' > $R/racecheck.log 2>&1; echo "racecheck rc=$?" | tee -a $R/rc.txt; tail -1 $R/racecheck.log
snap tests
export FP4GEMM_DIGEST=1
for rnd in 1 2; do for side in M R; do for act in bf16 nvfp4; do
  timeout 150 .carry/v54/fp4gemm_$side bench --suite layer --act $act --cases 5,6,7,12,13,14,20,21,27,28 --settle-ms 100 \
    > $R/layer_${act}_$side$rnd.txt 2>&1
done; snap "round $rnd $side"; done; done
