#!/usr/bin/env bash
# v73 (session 86), one H200. Bundles (xz, 192 MiB dictionary) in .carry/<tag>/b.tar.xz, unpacked once per warm machine
# into /tmp/<tag>: `m` = main 3a4cf9f's build (gt, cli, py_new; the range-check fix 0bca7b0 included), `b` = branch
# exp/decode-ring's (gt, cli, py_new).
#   bash a.sh fix          main's fix tests: MoeLayerPieces (v 6: rare codes past 128), the decode tests, memcheck
#   bash a.sh ab [tests]   the branch's decode / pieces gtests and memcheck (with `tests`), then the W4A16 and NVFP4
#                          layer suites on pieces, branch against main, alternating, 2 rounds, digests compared
#   bash a.sh shard N..    the whole C++ GPU tier of the branch in 4 shards (GTEST_SHARD_INDEX N), 265 s each
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
for c in m b; do
  B=/tmp/$c; mkdir -p $B; [ -f $B/done ] || [ ! -f .carry/$c/b.tar.xz ] || { xz -dc .carry/$c/b.tar.xz | tar xf - -C $B; touch $B/done; echo "unpacked $c [$((SECONDS - t0)) s]"; }
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
mode=${1:-}; shift || true
gtest_summary() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -12; }
if [ "$mode" = fix ]; then
  export FP4GEMM_CLI=/tmp/m/cli
  timeout 240 /tmp/m/gt --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.*:*Decode*' > $R/fix.txt 2>&1
  echo "fix tests rc $? [$((SECONDS - t0)) s]"; gtest_summary $R/fix.txt
  timeout 240 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/m/gt \
    --gtest_filter='MoeLayerPieces.*' > $R/fix_memcheck.txt 2>&1
  echo "fix memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/fix_memcheck.txt | head -3
fi
if [ "$mode" = ab ]; then
  if [ "${1:-}" = tests ]; then
    export FP4GEMM_CLI=/tmp/b/cli
    timeout 200 /tmp/b/gt --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.*:*Decode*:MoeLayerCases.*' > $R/gt.txt 2>&1
    echo "branch gt rc $? [$((SECONDS - t0)) s]"; gtest_summary $R/gt.txt
    timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 /tmp/b/gt \
      --gtest_filter='MoeLayerPieces.*:MoeLayerDecode.Every*' > $R/memcheck.txt 2>&1
    echo "branch memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -3
  fi
  export FP4GEMM_DIGEST=1
  for rnd in 1 2; do for act in bf16 nvfp4; do for v in b m; do
    timeout 100 /tmp/$v/cli bench --suite layer --act $act --weight-layout pieces --settle-ms 100 --json $R/layer_${act}_${v}_r$rnd.json > $R/layer_${act}_${v}_r$rnd.txt 2>&1
    echo "layer $act $v r$rnd rc $? [$((SECONDS - t0)) s]"
  done; done; done
  python3 bench/results/v73/probe/ratios.py $R b m
  for act in bf16 nvfp4; do for v in b m; do grep '^digest' $R/layer_${act}_${v}_r1.txt > $R/dig_${act}_$v.txt; done
    cmp -s $R/dig_${act}_b.txt $R/dig_${act}_m.txt && echo "$act digests equal ($(wc -l < $R/dig_${act}_b.txt))" || echo "$act digests DIFFER"; done
fi
if [ "$mode" = shard ]; then
  export FP4GEMM_CLI=/tmp/b/cli
  for s in "$@"; do
    GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$s timeout 265 /tmp/b/gt > $R/shard$s.txt 2>&1
    echo "shard $s rc $? [$((SECONDS - t0)) s]"; gtest_summary $R/shard$s.txt; grep -E "^\[ RUN" $R/shard$s.txt | tail -1
  done
fi
gzip -f $R/*.txt 2>/dev/null
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
