#!/usr/bin/env bash
# Expert-parallel checks on a multi-GPU machine with carried binaries (scripts/carry_build.sh):
#   tests   the C++ GPU tier (one shard per GPU), the EP and layer Python GPU tests (2 and 4 GPUs
#           where present), compute-sanitizer memcheck on the one-GPU EP path
#   bench   examples/ep_moe.py on every GPU (or EP_WORLDS): W4A4 and W4A16, T = 128 and 4096 per rank (EP_CONFIGS)
# Logs and JSON under $OUT. NVLink multicast stays off in every process.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-./out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/.carry/pkg${PYTHONPATH:+:$PYTHONPATH}"
B=${FP4GEMM_BUILD_DIR:-}
if [ -n "$B" ] && [ ! -e "$B" ]; then mkdir -p "$(dirname "$B")" && ln -s "$PWD/.carry/build" "$B"; fi
G=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | head -1 | tee "$OUT/gpu.txt"; echo "$G GPUs"
for step in "$@"; do
  case "$step" in
    tests)
      pids=()
      for ((i = 0; i < G; i++)); do
        CUDA_VISIBLE_DEVICES=$i GTEST_TOTAL_SHARDS=$G GTEST_SHARD_INDEX=$i timeout 380 .carry/build/tests/fp4gemm_gpu_tests \
          --gtest_brief=1 > "$OUT/gpu_shard$i.log" 2>&1 & pids+=($!)
      done
      # (the Python GPU tests run while the C++ shards do)
      timeout 330 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_ep_device_gpu.py tests/python/test_ep_torch.py \
        tests/python/test_moe_layer_gpu.py tests/python/test_lifetimes_gpu.py tests/python/test_api_surface.py tests/python/test_random_sequences.py > "$OUT/py_ep.log" 2>&1
      grep -E "^(FAILED|ERROR)|passed|failed|SKIPPED" "$OUT/py_ep.log" | tail -12
      for p in "${pids[@]}"; do wait "$p" || echo "a C++ shard failed"; done
      for ((i = 0; i < G; i++)); do grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED TEST" "$OUT/gpu_shard$i.log" | head -6; done
      CUDA_VISIBLE_DEVICES=0 timeout 190 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -x -p no:cacheprovider \
        tests/python/test_ep_device_gpu.py -k "equals or token_count or odd" > "$OUT/sanitizer_ep.log" 2>&1
      echo "sanitizer rc $?"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/sanitizer_ep.log" | tail -3 ;;
    bench)
      # EP_WORLDS: the world sizes to run (default: all GPUs), e.g. "4 2" on a 4-GPU machine
      for w in ${EP_WORLDS:-$G}; do
        for cfg in ${EP_CONFIGS:-nvfp4:128 nvfp4:4096 bf16:128 bf16:4096}; do
          act=${cfg%%:*}; t=${cfg##*:}
          echo "== $w GPUs, $act, T $t per rank"
          CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout "${EP_TIMEOUT:-240}" torchrun --nproc-per-node "$w" \
            examples/ep_moe.py --act "$act" --tokens "$t" --steps "${EP_STEPS:-30}" --check \
            --json "$OUT/ep${w}_${act}_${t}.json" > "$OUT/ep${w}_${act}_${t}.log" 2>&1 || echo "(rc $?)"
          grep -E "^rank|^one GPU|Error" "$OUT/ep${w}_${act}_${t}.log" | head -8
        done
      done ;;
  esac
done
