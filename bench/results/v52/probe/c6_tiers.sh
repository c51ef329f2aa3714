#!/usr/bin/env bash
# Session 67, call 6 (one H200): main's final build -- the whole C++ GPU tier (4 shards) beside the whole
# Python GPU tier, then memcheck on the decode / layer / dual / graph suites.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg"
B=/work/main-build; [ -e "$B" ] || { mkdir -p /work && ln -s "$PWD/.carry/build" "$B"; }
R=$OUT/r; mkdir -p $R; t0=$SECONDS; pids=()
BIN=.carry/build/tests/fp4gemm_gpu_tests
for i in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 420 $BIN --gtest_brief=1 > $R/gpu_shard$i.log 2>&1 & pids+=($!)
done
timeout 430 python3 -m pytest -q -rs -p no:cacheprovider -m gpu tests/python > $R/py_gpu.log 2>&1 & py=$!
for p in "${pids[@]}"; do wait $p; echo "shard rc=$?"; done
echo "[C++ GPU tier] $((SECONDS - t0)) s"; cat $R/gpu_shard*.log | grep -E "tests ran|PASSED|FAILED|SKIPPED \]" | sort | uniq -c
wait $py; echo "python rc=$? $((SECONDS - t0)) s"; grep -E "^(FAILED|ERROR)|passed|failed" $R/py_gpu.log | tail -8
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN \
  --gtest_filter='MoeLayerDecode.*:*MoeLayerCases.*/case0:MoeLayerGraph*:FusedSanitizer.*' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.log | head -4
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
