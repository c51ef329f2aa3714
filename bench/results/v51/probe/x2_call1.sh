#!/usr/bin/env bash
# v51 call 1 (nvidia-h200-x2): EP exchange one row per (token, rank) + layer stopped before its
# combine. Quick C++ tests of the changed paths, then examples/ep_moe.py on 2 GPUs, new (pkg) and
# main (pkgM) builds, rounds interleaved. Everything under $OUT/r.tgz.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.txt; cat $R/gpu.txt
t0=$(date +%s)
CUDA_VISIBLE_DEVICES=0 timeout 150 .carry/build/tests/fp4gemm_gpu_tests --gtest_brief=1 \
  --gtest_filter='EpExchange*:MoeLayerExpertRows*:AlignRouting*:MoeLayerCases*:MoeLayerDecode*:MoeLayerGraph*:MoeLayerPrequantised*' > $R/gtest_quick.log 2>&1
echo "quick gtest rc $? ($(( $(date +%s) - t0 )) s)"; grep -E "PASSED|FAILED" $R/gtest_quick.log | head -8
for round in 1 2; do
  for build in pkg pkgM; do
    for cfg in ${EP_CONFIGS:-nvfp4:4096 bf16:4096 nvfp4:128 bf16:128}; do
      act=${cfg%%:*}; t=${cfg##*:}
      [ $round = 2 ] && [ $t = 128 ] && continue
      f=$R/ep2_${build}_${act}_${t}_r$round
      PYTHONPATH=$PWD/.carry/$build timeout 150 torchrun --nproc-per-node 2 examples/ep_moe.py --act $act --tokens $t \
        --steps 30 --check --json $f.json > $f.log 2>&1 || echo "(rc $?)"
      echo "== $build $act T $t round $round ($(( $(date +%s) - t0 )) s)"; grep -E "^rank [0-9]/|^one GPU|Error" $f.log | head -6
    done
  done
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
