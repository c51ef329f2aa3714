#!/usr/bin/env bash
# v61 c2 (one H200, ~8 min): main with the decode bound 8 (carry .carry/v69: bp.tar.xz = .carry/build + .carry/pkg, .peers):
# the GPU tests incl. DefaultBoundByTheLayer, tk_layer all T (gpt-oss T 8 now on the decode path), the Python GPU tier,
# and the crossover of the wide-hidden models (Mixtral H 4096 / DeepSeek-V3 H 7168: bounds 2 / 1 and 1 / 0 today,
# measured before the ring and the straight-line routing).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
xz -dc .carry/v69/bp.tar.xz | tar xf - -C .carry
export FP4GEMM_CLI=$PWD/.carry/build/tools/fp4gemm
timeout 200 .carry/build/tests/fp4gemm_gpu_tests --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
PYTHONPATH=$PWD/.carry/pkg:$PWD/.peers OUT=$R TKL_TOKENS=1,2,4,8,64,512,4096 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=200 \
  timeout 300 python3 .peers/tk_layer.py > $R/tk_layer.txt 2>&1
echo "tk_layer rc=$? [$((SECONDS - t0)) s]"; tar czf $OUT/r.tgz -C $OUT r
grep -A16 "CUDA graph replay" $R/tk_layer.txt | head -17
PYTHONPATH=$PWD/.carry/pkg timeout 190 python3 -m pytest -q -m gpu tests/python -x -p no:cacheprovider > $R/pytest_gpu.txt 2>&1
echo "pytest rc=$? [$((SECONDS - t0)) s]"; tail -3 $R/pytest_gpu.txt; tar czf $OUT/r.tgz -C $OUT r
timeout 120 python3 bench/decode_crossover.py --cli $FP4GEMM_CLI --models mixtral-8x7b --tokens 1-3 \
  --acts bf16,nvfp4 --iters 100 --json $R/crossover_mixtral.json > $R/crossover_mixtral.txt 2>&1
echo "crossover mixtral rc=$? [$((SECONDS - t0)) s]"; cat $R/crossover_mixtral.txt; tar czf $OUT/r.tgz -C $OUT r
timeout 200 python3 bench/decode_crossover.py --cli $FP4GEMM_CLI --models deepseek-v3 --tokens 1-4 \
  --acts bf16,nvfp4 --iters 100 --json $R/crossover_deepseek.json > $R/crossover_deepseek.txt 2>&1
echo "crossover deepseek rc=$? [$((SECONDS - t0)) s]"; cat $R/crossover_deepseek.txt; tar czf $OUT/r.tgz -C $OUT r
