#!/usr/bin/env bash
# For the next session (one H200, ~8 min): branch exp/decode-s0-wait = main 265b9d3 (v61: straight-line routing, early PDL
# trigger, bound 8, W4A4 PDL chain, the decode graph-replay test) + kernel 2's S == 0 path waiting for its prerequisite
# (kept off main until these checks pass: merge it if they do). Carry .carry/v73 (bp.tar.xz = .carry/build + .carry/pkg
# of that branch, built on the CPU machine) and .peers.
#   1. GPU tests, memcheck, racecheck (W4A16 and W4A4), the Python GPU tier (not yet run on the W4A4 PDL chain's build)
#   2. issue 52's table: tk_layer T 1-8 twice and T 64-4096 once (median / min / max over rounds)
#   3. the W4A4 crossover of the wide-hidden models after the PDL chain (DeepSeek-V3 W4A4 tied at T 3 before it,
#      default 2 past H 4096; Mixtral 3 past H 3072 is its E / 2k cap)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
xz -dc .carry/v73/bp.tar.xz | tar xf - -C .carry
export FP4GEMM_CLI=$PWD/.carry/build/tools/fp4gemm
timeout 200 .carry/build/tests/fp4gemm_gpu_tests --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
timeout 150 compute-sanitizer --tool memcheck .carry/build/tests/fp4gemm_gpu_tests --gtest_filter='MoeLayerDecode.Every*:MoeLayerBiases*' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $R/memcheck.log | tail -1)"
L="layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --decode-tokens 8 --iters 1 --warmup 1 --values checkpoint --activation swigluoai"
for act in bf16 nvfp4; do for sl in blocked linear; do
  timeout 100 compute-sanitizer --tool racecheck $FP4GEMM_CLI $L --act $act --scales $sl > $R/racecheck_${act}_$sl.log 2>&1
  echo "racecheck $act $sl rc=$? $(grep -E 'RACECHECK SUMMARY' $R/racecheck_${act}_$sl.log | tail -1)"; done; done
tar czf $OUT/r.tgz -C $OUT r
PYTHONPATH=$PWD/.carry/pkg timeout 190 python3 -m pytest -q -m gpu tests/python -x -p no:cacheprovider > $R/pytest_gpu.txt 2>&1
echo "pytest rc=$? [$((SECONDS - t0)) s]"; tail -3 $R/pytest_gpu.txt; tar czf $OUT/r.tgz -C $OUT r
for rnd in 1 2; do mkdir -p $R/tk$rnd
  PYTHONPATH=$PWD/.carry/pkg:$PWD/.peers OUT=$R/tk$rnd TKL_TOKENS=$([ $rnd = 1 ] && echo 1,2,4,8,64,512,4096 || echo 1,2,4,8) \
    TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=200 timeout 300 python3 .peers/tk_layer.py > $R/tk$rnd/tk_layer.txt 2>&1
  echo "tk_layer round $rnd rc=$? [$((SECONDS - t0)) s]"; grep -A16 "CUDA graph replay" $R/tk$rnd/tk_layer.txt | head -17
  tar czf $OUT/r.tgz -C $OUT r; done
timeout 200 python3 bench/decode_crossover.py --cli $FP4GEMM_CLI --models deepseek-v3,mixtral-8x7b --tokens 1-4 \
  --acts nvfp4 --iters 100 --json $R/crossover_w4a4.json > $R/crossover_w4a4.txt 2>&1
echo "crossover rc=$? [$((SECONDS - t0)) s]"; cat $R/crossover_w4a4.txt; tar czf $OUT/r.tgz -C $OUT r
