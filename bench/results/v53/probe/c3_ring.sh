#!/usr/bin/env bash
# v53 call 3 (one H200): branch exp/decode-ring's binaries (built on the CPU machine, carried in .carry/v53):
#   A = main's CLI; B = the branch's CLI (the combine's loads batched 8 at a time; the bulk-copy ring
#   compiled in, off unless FP4GEMM_DECODE_RING=1 at plan time); gpu_tests_B = the branch's GPU tests.
# 1. decode / bias / graph layer tests on B, ring off and on; memcheck of the decode test with the ring on.
# 2. layer suite cases 8, 9, 15, 16 (Qwen3 / gpt-oss T 1, T 8), W4A16 and W4A4 NVFP4, rounds of A, B, C (= B + ring),
#    digests on (A and B must give the same bytes; C sums in another order).
# 3. the conftest gc check (nanobind's leak report at exit, test_dual_gpu.py alone).
# A tar of $OUT/r after every step.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
V=.carry/v53; T=$V/gpu_tests_B
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
F='MoeLayerDecode*:MoeLayerBiases*:MoeLayerGraph*'
timeout 120 $T --gtest_filter="$F" > $R/gtest_B.log 2>&1; echo "gtest B rc=$?" | tee -a $R/rc.txt; snap "gtest B"
FP4GEMM_DECODE_RING=1 timeout 120 $T --gtest_filter="$F" > $R/gtest_ring.log 2>&1; rc=$?; echo "gtest ring rc=$rc" | tee -a $R/rc.txt; snap "gtest ring"
ring_ok=$rc
if [ $ring_ok = 0 ]; then
  FP4GEMM_DECODE_RING=1 timeout 150 compute-sanitizer --tool memcheck $T --gtest_filter='MoeLayerDecode.EveryTokenCount*' > $R/memcheck_ring.log 2>&1
  echo "memcheck ring rc=$?" | tee -a $R/rc.txt; snap memcheck
fi
export FP4GEMM_DIGEST=1
for rnd in 1 2; do for side in A B C; do
  [ $side = C ] && [ $ring_ok != 0 ] && continue
  bin=$V/fp4gemm_A; [ $side != A ] && bin=$V/fp4gemm_B
  for act in bf16 nvfp4; do
    if [ $side = C ]; then export FP4GEMM_DECODE_RING=1; else unset FP4GEMM_DECODE_RING; fi
    timeout 100 $bin bench --suite layer --act $act --cases 8,9,15,16 --settle-ms 100 --json $R/layer_${act}_$side$rnd.json > $R/layer_${act}_$side$rnd.txt 2>&1
  done
  unset FP4GEMM_DECODE_RING
  snap "round $rnd $side"
done; done
PYTHONPATH=$PWD/.carry/pkg timeout 60 python3 -m pytest -q -m gpu tests/python/test_dual_gpu.py > $R/conftest_gc.log 2>&1
echo "leak lines: $(grep -c leaked $R/conftest_gc.log)" | tee -a $R/rc.txt; snap done
