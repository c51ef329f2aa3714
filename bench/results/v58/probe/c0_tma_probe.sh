#!/usr/bin/env bash
# For the next session (one H200, ~3 min): the decode kernels with a per-warp TMA ring (branch exp/decode-tma, 1864489:
# two 8 x 64 B boxes per chunk into shared memory, lane 0 issues, an mbarrier per stage, 6 deep) against main (3e52ed8,
# SASS-identical to main 05f1b62). Built on the CPU machine and left in .carry/v57 (fp4gemm_main, fp4gemm_tma,
# gpu_tests_tma, stream5); carry .carry/v57. Never run: the branch may fail its tests -- read gtest.log first.
#   1. stream5 (the same question on the chunk math alone, sums compared)
#   2. the branch's decode / layer GPU tests and memcheck of the decode test
#   3. layer-suite digests main vs branch (identical expected: same chunks, same order, same arithmetic)
#   4. layer timings, 2 rounds interleaved
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=.carry/v57; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
timeout 120 $V/stream5 > $R/stream5.txt 2>&1; echo "stream5 rc=$?"; cat $R/stream5.txt; snap stream5
timeout 200 $V/gpu_tests_tma --gtest_filter='MoeLayerDecode*:MoeLayer*:MoeGraph*:MoeStreamK*' > $R/gtest.log 2>&1
echo "gtest rc=$?"; grep -E "FAILED|PASSED" $R/gtest.log | head -8
timeout 150 compute-sanitizer --tool memcheck $V/gpu_tests_tma --gtest_filter='MoeLayerDecode.Every*' > $R/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" $R/memcheck.log | tail -1; snap tests
for v in main tma; do for act in bf16 nvfp4; do
  FP4GEMM_DIGEST=1 timeout 120 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 20 > $R/suite_${act}_$v.txt 2>&1
done; done
for act in bf16 nvfp4; do diff <(grep -i digest $R/suite_${act}_main.txt) <(grep -i digest $R/suite_${act}_tma.txt) > /dev/null \
  && echo "$act digests identical ($(grep -ci digest $R/suite_${act}_main.txt))" || echo "$act DIGESTS DIFFER"; done
for rnd in 1 2; do for v in main tma; do
  B=$V/fp4gemm_$v
  for t in 1 2 4; do timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai --iters 100 > $R/gptoss_t${t}_${v}_$rnd.txt 2>&1; done
  timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 1 --act nvfp4 --activation swigluoai --iters 100 > $R/gptossnv_t1_${v}_$rnd.txt 2>&1
  for t in 1 2 4 8; do timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --iters 100 > $R/qwen3_t${t}_${v}_$rnd.txt 2>&1; done
  timeout 60 $B layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --tokens 1 --act bf16 --iters 100 > $R/mixtral_t1_${v}_$rnd.txt 2>&1
done; done; snap timings
cd $R; for c in gptoss_t1 gptoss_t2 gptoss_t4 gptossnv_t1 qwen3_t1 qwen3_t2 qwen3_t4 qwen3_t8 mixtral_t1; do for v in main tma; do
  echo "$c $v $(for r in 1 2; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-13; done | tr '\n' ' ') $(grep -m1 -iE 'error|fail' ${c}_${v}_1.txt)"; done; done
