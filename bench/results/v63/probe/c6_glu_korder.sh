#!/usr/bin/env bash
# v63 c6 (one H200, ~7 min): branch exp/glu-k-order (W4A16 layer: GEMM1's GLU epilogue writes the intermediate in
# GEMM2's k order into GEMM2's workspace; GEMM2 without its pre-pass). Carry .carry/v83 (one solid xz: the branch's
# build laid out by scripts/carry_build.sh, and main 7888fa8's CLI as cli_main).
#   1. layer / graph / routing / CLI gtests (MoeLayerCases' W4A16 cases take the hand-over) and memcheck of them
#   2. the layer suite W4A16 on the general path (--decode-tokens 0), digests against main, 2 rounds A (main) / B (branch)
#   3. tk_layer T 64 / 512 / 4096 on the branch's package
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; V=/tmp/v83; mkdir -p $V $OUT/r
xz -dc .carry/v83/bins.tar.xz | tar xf - -C $V
mkdir -p .carry && rm -rf .carry/build .carry/pkg && cp -r $V/build $V/pkg .carry/
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 FP4GEMM_CLI=$PWD/.carry/build/tools/fp4gemm
F='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*'
timeout 200 .carry/build/tests/fp4gemm_gpu_tests --gtest_filter="$F" --gtest_brief=1 > $OUT/r/gtest.log 2>&1
echo "gtest rc=$? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/r/gtest.log | head -10
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
  --gtest_filter='*MoeLayerCases.*/case8:*MoeLayerCases.*/case11:MoeLayerHandover*:MoeLayerGraph*' > $OUT/r/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $OUT/r/memcheck.log | tail -1) [$((SECONDS - t0)) s]"
tar czf $OUT/r.tgz -C $OUT r
for rnd in 1 2; do for side in A B; do bin=$V/cli_main; [ $side = B ] && bin=.carry/build/tools/fp4gemm
  FP4GEMM_DIGEST=1 timeout 120 $bin bench --suite layer --act bf16 --decode-tokens 0 --settle-ms 100 --json $OUT/r/layer_$side$rnd.json \
    > $OUT/r/layer_$side$rnd.txt 2>&1; done; echo "layer round $rnd [$((SECONDS - t0)) s]"; done
python3 bench/results/v50/probe/ab_compare.py $OUT/r | tee $OUT/r/compare.txt
tar czf $OUT/r.tgz -C $OUT r
PYTHONPATH=$PWD/.carry/pkg:$PWD/.peers OUT=$OUT/r/tk TKL_TOKENS=64,512,4096 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=100 \
  timeout 150 python3 .peers/tk_layer.py > $OUT/r/tk_layer.txt 2>&1
echo "tk rc=$? [$((SECONDS - t0)) s]"; grep -A 9 "CUDA graph replay" $OUT/r/tk_layer.txt
tar czf $OUT/r.tgz -C $OUT r
