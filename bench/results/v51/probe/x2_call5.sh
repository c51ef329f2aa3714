#!/usr/bin/env bash
# v51 call 5 (nvidia-h200-x2): the combine as one kernel (PeerRows reads the row_of entry itself,
# no locate pass) -- EP C++ suites plain and under memcheck, then ep_moe.py A/B against the
# two-kernel build (pkgM = 1fe1d1f), interleaved.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=/work/main-build; [ -e "$B" ] || { mkdir -p /work && ln -s "$PWD/.carry/build" "$B"; }
R=$OUT/r; mkdir -p $R
BIN=.carry/build/tests/fp4gemm_gpu_tests
t0=$SECONDS
CUDA_VISIBLE_DEVICES=0 timeout 100 $BIN --gtest_filter='*EpExchange*:*MoeLayerExpertRows*' > $R/gtest.log 2>&1 &
g=$!
CUDA_VISIBLE_DEVICES=1 timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $BIN \
  --gtest_filter='*EpExchange*' > "$R/memcheck.log" 2>&1
echo "memcheck rc=$? $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" $R/memcheck.log | head -5
wait $g; echo "gtest rc=$? $((SECONDS - t0)) s"; grep -E "PASSED|FAILED" $R/gtest.log | head -6
PYTHONPATH=$PWD/.carry/pkg timeout 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_ep_device_gpu.py tests/python/test_ep_torch.py > $R/py.log 2>&1
echo "python rc=$? $((SECONDS - t0)) s"; tail -1 $R/py.log
for cfg in nvfp4:4096 bf16:4096 nvfp4:128 bf16:128; do
  for build in pkg pkgM; do
    act=${cfg%%:*}; t=${cfg##*:}; f=$R/ep2_${build}_${act}_${t}
    PYTHONPATH=$PWD/.carry/$build timeout 150 torchrun --nproc-per-node 2 examples/ep_moe.py --act $act --tokens $t --steps 50 --check --json $f.json > $f.log 2>&1 || echo "(rc $?)"
    echo "== $build $act T $t ($((SECONDS - t0)) s)"; grep -E "^rank [0-9]/|^one GPU|Error" $f.log | head -6; grep -h "^rank [0-9]:" $f.log | head -2
  done
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
