#!/usr/bin/env bash
# v51 call 4 (nvidia-h200-x2): the parameterised EP suites (W = 1, 2, 4 on one device) plain and
# under memcheck, then examples/ep_moe.py on 2 GPUs on the final build (the record).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=/work/main-build; [ -e "$B" ] || { mkdir -p /work && ln -s "$PWD/.carry/build" "$B"; }
R=$OUT/r; mkdir -p $R
BIN=.carry/build/tests/fp4gemm_gpu_tests
t0=$SECONDS
CUDA_VISIBLE_DEVICES=0 timeout 100 $BIN --gtest_filter='*EpExchange*:*MoeLayerExpertRows*' > $R/gtest.log 2>&1 &
g=$!
CUDA_VISIBLE_DEVICES=1 timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $BIN \
  --gtest_filter='*EpExchange*' > "$R/memcheck.log" 2>&1
echo "memcheck rc=$? $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" $R/memcheck.log | head -5
wait $g; echo "gtest rc=$? $((SECONDS - t0)) s"; grep -E "^\[ +(OK|FAILED) |tests ran|PASSED|FAILED" $R/gtest.log | head -12
for cfg in nvfp4:4096 bf16:4096 nvfp4:128 bf16:128; do
  act=${cfg%%:*}; t=${cfg##*:}; f=$R/ep2_${act}_${t}
  timeout 150 torchrun --nproc-per-node 2 examples/ep_moe.py --act $act --tokens $t --steps 100 --check --json $f.json > $f.log 2>&1 || echo "(rc $?)"
  echo "== $act T $t ($((SECONDS - t0)) s)"; grep -E "^rank [0-9]|^one GPU|Error" $f.log | head -6
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
