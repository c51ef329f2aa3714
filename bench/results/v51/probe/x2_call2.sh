#!/usr/bin/env bash
# v51 call 2 (nvidia-h200-x2): the whole C++ GPU tier (one shard per GPU) and the whole Python tier
# (the EP torch tests on both GPUs) side by side, then memcheck of the EP exchange, the layer's
# expert rows and the EP Python device tests, racecheck of routing. Everything under $OUT/r.tgz.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=/work/main-build; [ -e "$B" ] || { mkdir -p /work && ln -s "$PWD/.carry/build" "$B"; }
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.txt
BIN=.carry/build/tests/fp4gemm_gpu_tests
t0=$SECONDS; pids=()
for i in 0 1; do
  CUDA_VISIBLE_DEVICES=$i GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$i timeout 480 $BIN --gtest_brief=1 > "$R/gpu_shard$i.log" 2>&1 & pids+=($!)
done
timeout 500 python3 -m pytest tests/python -q -rs -p no:cacheprovider > "$R/py_tests.log" 2>&1 & py=$!
for p in "${pids[@]}"; do wait $p; echo "shard rc=$?"; done
echo "[gpu tier] $((SECONDS - t0)) s"
for i in 0 1; do grep -E "tests ran|PASSED|FAILED|SKIPPED \]" "$R/gpu_shard$i.log" | head -8; done
CUDA_VISIBLE_DEVICES=0 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN \
  --gtest_filter='EpExchange*:MoeLayerExpertRows*:*MoeLayerCases.*/case0' > "$R/memcheck.log" 2>&1 &
m=$!
CUDA_VISIBLE_DEVICES=1 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN --gtest_filter='AlignRouting*' > "$R/racecheck.log" 2>&1
echo "racecheck rc=$? $((SECONDS - t0)) s"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|tests ran|PASSED|FAILED" "$R/racecheck.log" | head -5
wait $m; echo "memcheck rc=$? $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" "$R/memcheck.log" | head -5
wait $py; echo "python rc=$? $((SECONDS - t0)) s"
grep -E "^(FAILED|ERROR)|passed|failed" "$R/py_tests.log" | tail -12
CUDA_VISIBLE_DEVICES=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x -p no:cacheprovider \
  tests/python/test_ep_device_gpu.py -k "equals or token_count or odd" > "$R/memcheck_py_ep.log" 2>&1
echo "py EP memcheck rc=$? $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY|passed|failed" "$R/memcheck_py_ep.log" | tail -3
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
