#!/usr/bin/env bash
# v61 c3 (one H200, ~6 min): main with the wide-hidden bounds (carry .carry/v70: bp.tar.xz = .carry/build + .carry/pkg;
# fp4gemm_early.xz = the same with kernel 1's launch_dependents right after its routing read instead of at its end):
#   1. GPU tests incl. DefaultBoundByTheLayer (main)
#   2. early: memcheck + racecheck through the CLI, layer-suite digests against main's
#   3. CLI A/B main vs early, 2 rounds: Qwen3 / gpt-oss swigluoai T 1 / 2 / 4 / 8, blocked and linear scales.
#      Expected: kernel 2's CTAs start (routing read, first weight loads) on SMs whose kernel-1 CTA has exited instead of
#      after the last one: -0.5..-2 us.
#   4. DeepSeek-V3 W4A16 crossover T 5-8 (the default stops at 4, the most measured in c2)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
xz -dc .carry/v70/bp.tar.xz | tar xf - -C .carry
V=/tmp/v70; mkdir -p $V; xz -dc .carry/v70/fp4gemm_early.xz > $V/fp4gemm_early; chmod +x $V/fp4gemm_early
cp .carry/build/tools/fp4gemm $V/fp4gemm_main
export FP4GEMM_CLI=$PWD/.carry/build/tools/fp4gemm
timeout 200 .carry/build/tests/fp4gemm_gpu_tests --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
L="layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --decode-tokens 8 --iters 1 --warmup 1 --values checkpoint --activation swigluoai"
for sl in blocked linear; do for act in bf16 nvfp4; do
  timeout 100 compute-sanitizer --tool memcheck $V/fp4gemm_early $L --act $act --scales $sl > $R/memcheck_${act}_$sl.log 2>&1
  echo "memcheck $act $sl rc=$? $(grep -E 'ERROR SUMMARY' $R/memcheck_${act}_$sl.log | tail -1)"
  timeout 100 compute-sanitizer --tool racecheck $V/fp4gemm_early $L --act $act --scales $sl > $R/racecheck_${act}_$sl.log 2>&1
  echo "racecheck $act $sl rc=$? $(grep -E 'RACECHECK SUMMARY' $R/racecheck_${act}_$sl.log | tail -1)"; done; done
for act in bf16 nvfp4; do for v in main early; do
  FP4GEMM_DIGEST=1 timeout 120 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 20 > $R/suite_${act}_$v.txt 2>&1; done
  diff <(grep -i digest $R/suite_${act}_main.txt) <(grep -i digest $R/suite_${act}_early.txt) > /dev/null \
    && echo "$act early digests identical ($(grep -ci digest $R/suite_${act}_main.txt))" || echo "$act early DIGESTS DIFFER"; done
echo "[$((SECONDS - t0)) s] checks"; tar czf $OUT/r.tgz -C $OUT r
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --values checkpoint --activation swigluoai"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --values checkpoint"
for rnd in 1 2; do for v in main early; do for sl in blocked linear; do B="$V/fp4gemm_$v"
  for t in 1 2 4 8; do timeout 60 $B $Q --iters 100 --scales $sl --tokens $t > $R/q${t}_${v}_${sl}_$rnd.txt 2>&1
    timeout 60 $B $G --iters 100 --scales $sl --tokens $t > $R/g${t}_${v}_${sl}_$rnd.txt 2>&1; done
done; done; done; echo "[$((SECONDS - t0)) s] CLI"
(cd $R; for c in q1 q2 q4 q8 g1 g2 g4 g8; do for sl in blocked linear; do echo "$c $sl $(for v in main early; do echo -n "$v "; for r in 1 2; do grep -E '^time' ${c}_${v}_${sl}_$r.txt | cut -c7-14 | tr -d '\n'; echo -n ' '; done; done) $(grep -m1 -iE 'error|fail' ${c}_*_${sl}_1.txt)"; done; done | tee $R/summary.txt)
tar czf $OUT/r.tgz -C $OUT r
timeout 150 python3 bench/decode_crossover.py --cli $FP4GEMM_CLI --models deepseek-v3 --tokens 5-8 \
  --acts bf16 --iters 100 --json $R/crossover_deepseek.json > $R/crossover_deepseek.txt 2>&1
echo "crossover deepseek rc=$? [$((SECONDS - t0)) s]"; cat $R/crossover_deepseek.txt; tar czf $OUT/r.tgz -C $OUT r
