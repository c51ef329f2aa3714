#!/usr/bin/env bash
# Prepared for the next session (v69 ran out of device time): verify branch exp/pieces-9op (74395bc; v53's 9-op decode
# for MXFP4 pieces, pack_pieces taking the format), then merge it. Run on a checkout of THAT BRANCH, one call per mode:
#   bash next_session.sh g          carry .carry/v110t  -- every pieces gtest (~30 s; probe/g.sh)
#   bash next_session.sh tier 0|1|2 carry .carry/v110t  -- the branch's whole C++ GPU tier in 3 shards (+ memcheck in 2)
#   bash next_session.sh py         carry .carry/v110p  -- the branch's Python GPU tier (its extension beside the sources)
#   bash next_session.sh suite      carry .carry/v110c  -- the branch's CLI: layer suites on pieces and rows, all three
#                                   activations, digests (must equal v68 d5's / v69 f's), 2 rounds
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
case "$1" in
  g) bash bench/results/v69/probe/g.sh; exit ;;
  tier)
    G=/tmp/v110t; mkdir -p $G; [ -x $G/gt ] || { xz -dc .carry/v110t/gt.xz > $G/gt; chmod +x $G/gt; }
    GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$2 timeout 520 $G/gt > $R/shard$2.txt 2>&1
    echo "shard $2 rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests from .* ran" $R/shard$2.txt | head -20
    if [ "$2" = 2 ]; then
      timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $G/gt \
        --gtest_filter='MoeSanitizer.*:MoeBadRouting.*:MoeLayerPieces.*:MoePieces.*:FusedSanitizer.*' > $R/memcheck.txt 2>&1
      echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
    fi ;;
  py)
    V=/tmp/v110p; mkdir -p $V; xz -dc .carry/v110p/bins.tar.xz | tar xf - -C $V; cp $V/_fp4gemm*.so python/fp4gemm/
    (cd tests/python && PYTHONPATH=../../python timeout 500 python3 -m pytest -q -rs -m gpu > $R/py_gpu.txt 2>&1; echo "py gpu rc $? [$((SECONDS - t0)) s]")
    tail -8 $R/py_gpu.txt ;;
  suite)
    C=/tmp/v110c; mkdir -p $C; xz -dc .carry/v110c/fp4gemm.xz > $C/fp4gemm; chmod +x $C/fp4gemm
    export FP4GEMM_DIGEST=1
    for rnd in 1 2; do for act in bf16 mxfp4 nvfp4; do for wl in pieces rows; do
      timeout 100 $C/fp4gemm bench --suite layer --act $act --weight-layout $wl --settle-ms 100 --json $R/layer_${act}_${wl}$rnd.json > $R/layer_${act}_${wl}$rnd.txt 2>&1
      echo "layer $act $wl r$rnd rc $? [$((SECONDS - t0)) s]"
    done; done; done ;;
esac
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
