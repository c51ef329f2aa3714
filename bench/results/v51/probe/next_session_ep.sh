#!/usr/bin/env bash
# For the next session (any kind; best nvidia-h200-x4): validates main at the end of session 66 (the layer's
# options.combine = false, built after the device time of session 66 ran out) and measures issue
# 50's 4-GPU cells with the token-once exchange. Carry .carry/build .carry/pkg (scripts/carry_build.sh).
#   1. C++: the EP suites (W 1, 2, 4 on one device), MoeLayerExpertRows, MoeLayerArgs, MoeLayerCases
#      case 0; memcheck of the EP suites and MoeLayerExpertRows (API errors of deliberate bad-argument
#      probes not reported);
#   2. Python: EP device / torch (every GPU: the 4-GPU NCCL tests run where 4 are visible) / API surface;
#   3. examples/ep_moe.py on every GPU count present (2, 4): W4A4 and W4A16, T 128 and 4096, 100 steps
#      --check. Targets: x2 <= 0.6 (v51: 0.54-0.59), x4 <= 0.35 (v42: W4A16 0.36).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=/work/main-build; [ -e "$B" ] || { mkdir -p /work && ln -s "$PWD/.carry/build" "$B"; }
R=$OUT/r; mkdir -p $R
G=$(nvidia-smi -L | wc -l); nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.txt
BIN=.carry/build/tests/fp4gemm_gpu_tests
t0=$SECONDS
CUDA_VISIBLE_DEVICES=0 timeout 150 $BIN --gtest_filter='*EpExchange*:*MoeLayerExpertRows*:MoeLayerArgs*:*MoeLayerCases.*/case0' > $R/gtest.log 2>&1
echo "gtest rc=$? $((SECONDS - t0)) s"; grep -E "PASSED|FAILED" $R/gtest.log | head -6
CUDA_VISIBLE_DEVICES=0 timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $BIN \
  --gtest_filter='*EpExchange*:*MoeLayerExpertRows*' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.log | head -4
timeout 240 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_ep_device_gpu.py tests/python/test_ep_torch.py \
  tests/python/test_api_surface.py > $R/py.log 2>&1
echo "python rc=$? $((SECONDS - t0)) s"; grep -E "^(FAILED|ERROR)|passed|failed|SKIPPED" $R/py.log | tail -6
for w in $(seq 2 2 $G | sort -rn); do
  for cfg in nvfp4:4096 bf16:4096 nvfp4:128 bf16:128; do
    act=${cfg%%:*}; t=${cfg##*:}; f=$R/ep${w}_${act}_${t}
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout 150 torchrun --nproc-per-node $w examples/ep_moe.py --act $act \
      --tokens $t --steps 100 --check --json $f.json > $f.log 2>&1 || echo "(rc $?)"
    echo "== $w GPUs $act T $t ($((SECONDS - t0)) s)"; grep -E "^rank [0-9]+/|^one GPU|Error" $f.log | head -6; grep -h "^rank [0-9]*:" $f.log | sort | uniq -c | head -4
  done
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
