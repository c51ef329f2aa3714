#!/usr/bin/env bash
# For the next session (one H200, ~4 min): branch exp/decode-fused-xquant -- NVFP4 (W4A4) kernel 1 quantises its
# tokens itself while staging them (one 8-element word per thread, a scale block's words exchanging their maxima by
# shuffles; the layer's rule through the quantiser's device functions) instead of waiting for the token quantiser's
# launch: one launch fewer in the W4A4 chain. MXFP4 kernels unchanged (their loops' SASS the same length); the NVFP4
# gate/up loops are 13-17 instructions longer (register allocation; no stack, no local memory).
# Carry .carry/v75 (xz): fp4gemm_main (main e576224), fp4gemm_fx and gpu_tests_fx (the branch's build flag on).
#   1. fx: the decode / graph / layer-case / fused-quantise gtests, memcheck + racecheck through the CLI (NVFP4 W4A4)
#   2. digests (6 W4A4 NVFP4 + 6 W4A16 layer-suite cases) fx against main: identical expected (the same values)
#   3. CLI A/B, 2 rounds: Qwen3 / gpt-oss NVFP4 W4A4 T 1 / 2 / 4 / 8 (W4A16 T 1 as the unchanged control)
# Expected: -1..-3 us at T 1-2 (the token quantiser's launch and kernel 1's wait gone), less or a loss at T 8 (every CTA
# quantises all T x H tokens: ~45 elements per thread at gpt-oss T 8).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v75; mkdir -p $V; t0=$SECONDS
for f in .carry/v75/*.xz; do n=$(basename $f .xz); xz -dc $f > $V/$n; chmod +x $V/$n; done
export FP4GEMM_CLI=$V/fp4gemm_fx
timeout 150 $V/gpu_tests_fx --gtest_filter='MoeLayerDecode*:MoeLayerGraph*:MoeLayerCases*:MoeLayerFusedQuantise*:MoeLayerPrequantised*' > $R/gtest.log 2>&1
echo "gtest rc=$? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
L="layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --decode-tokens 8 --iters 1 --warmup 1 --activation swigluoai --act nvfp4"
for sl in blocked linear; do
  timeout 60 compute-sanitizer --tool memcheck $V/fp4gemm_fx $L --scales $sl > $R/memcheck_$sl.log 2>&1
  echo "memcheck $sl rc=$? $(grep -E 'ERROR SUMMARY' $R/memcheck_$sl.log | tail -1)"
  timeout 60 compute-sanitizer --tool racecheck $V/fp4gemm_fx $L --scales $sl > $R/racecheck_$sl.log 2>&1
  echo "racecheck $sl rc=$? $(grep -E 'RACECHECK SUMMARY' $R/racecheck_$sl.log | tail -1)"; done
for act in nvfp4 bf16; do for v in main fx; do
  FP4GEMM_DIGEST=1 timeout 60 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 5 > $R/suite_${act}_$v.txt 2>&1; done
  diff <(grep -i digest $R/suite_${act}_main.txt) <(grep -i digest $R/suite_${act}_fx.txt) > /dev/null \
    && echo "$act fx digests identical ($(grep -ci digest $R/suite_${act}_main.txt))" || echo "$act fx DIGESTS DIFFER"; done
echo "[$((SECONDS - t0)) s] checks"; tar czf $OUT/r.tgz -C $OUT r
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"
for rnd in 1 2; do for v in main fx; do B="$V/fp4gemm_$v"
  for t in 1 2 4 8; do timeout 30 $B $Q --act nvfp4 --iters 100 --tokens $t > $R/nq${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $G --act nvfp4 --iters 100 --tokens $t > $R/ng${t}_${v}_$rnd.txt 2>&1; done
  timeout 30 $B $Q --act bf16 --values checkpoint --iters 100 --tokens 1 > $R/q1_${v}_$rnd.txt 2>&1
  timeout 30 $B $G --act bf16 --values checkpoint --iters 100 --tokens 1 > $R/g1_${v}_$rnd.txt 2>&1
done; done; echo "[$((SECONDS - t0)) s] CLI"
(cd $R; for c in nq1 nq2 nq4 nq8 ng1 ng2 ng4 ng8 q1 g1; do echo "$c $(for v in main fx; do echo -n "$v "; for r in 1 2; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-14 | tr -d '\n'; echo -n ' '; done; done) $(grep -m1 -iE 'error|fail' ${c}_*_1.txt)"; done | tee $R/summary.txt)
tar czf $OUT/r.tgz -C $OUT r
