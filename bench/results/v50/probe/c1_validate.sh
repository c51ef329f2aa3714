#!/usr/bin/env bash
# Call 1: main's head on the H200 -- C++ GPU tier (4 shards) and the Python tier side by side, then
# memcheck and racecheck while the Python tier finishes. Binaries from scripts/carry_build.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=/work/main-build; [ -e "$B" ] || { mkdir -p /work && ln -s "$PWD/.carry/build" "$B"; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
git log --oneline -1 2>/dev/null
BIN=.carry/build/tests/fp4gemm_gpu_tests
t0=$SECONDS; pids=()
for i in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 520 $BIN --gtest_brief=1 > "$OUT/gpu_shard$i.log" 2>&1 & pids+=($!)
done
timeout 540 python3 -m pytest tests/python -q -rs -p no:cacheprovider > "$OUT/py_tests.log" 2>&1 & py=$!
for p in "${pids[@]}"; do wait $p; echo "shard rc=$?"; done
echo "[gpu tier] $((SECONDS - t0)) s"
for i in 0 1 2 3; do grep -E "tests ran|PASSED|FAILED|SKIPPED \]" "$OUT/gpu_shard$i.log" | head -8; done
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN \
  --gtest_filter='MoeLayerDecode*:MoeLayerGraph*:*MoeLayerCases.*/case0:FusedSanitizer.*' > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" "$OUT/memcheck.log" | head -5
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN --gtest_filter='FusedSanitizer.*' > "$OUT/racecheck.log" 2>&1
echo "racecheck rc=$? $((SECONDS - t0)) s"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|tests ran|PASSED|FAILED" "$OUT/racecheck.log" | head -5
wait $py; echo "python rc=$? $((SECONDS - t0)) s"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/py_tests.log" | tail -12
