#!/usr/bin/env bash
# v59 c6: the merge candidate (branch decode-cp-ring: the decode kernels' 3-deep per-lane cp.async ring, one copy of
# the loop body) -- carry .carry/build (its CLI and GPU tests) and .carry/v59f (main's CLI, 1efc4d5's kernels).
#   1. routing / layer / graph / stream-K / CLI GPU tests; memcheck of the decode test; racecheck through the CLI on small
#      layers with the decode path forced (top-8 T 8 = 64 pairs, both scale sets; NVFP4 T 5)
#   2. layer-suite digests main vs new (identical expected), W4A16 and W4A4 NVFP4
#   3. CLI timings main vs new, 2 rounds interleaved, checkpoint scales
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v59f; mkdir -p $V; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
xz -dc .carry/v59f/fp4gemm_base.xz > $V/fp4gemm_base; chmod +x $V/fp4gemm_base; cp .carry/build/tools/fp4gemm $V/fp4gemm_new
export FP4GEMM_CLI=$PWD/.carry/build/tools/fp4gemm
timeout 240 .carry/build/tests/fp4gemm_gpu_tests --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
timeout 170 compute-sanitizer --tool memcheck .carry/build/tests/fp4gemm_gpu_tests --gtest_filter='MoeLayerDecode.Every*' > $R/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" $R/memcheck.log | tail -1
L="layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --decode-tokens 8 --iters 1 --warmup 1"
for vals in gpumode checkpoint; do
  timeout 120 compute-sanitizer --tool racecheck $V/fp4gemm_new $L --act bf16 --values $vals > $R/racecheck_$vals.log 2>&1
  echo "racecheck $vals rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $R/racecheck_$vals.log | tail -1)"
done
timeout 120 compute-sanitizer --tool racecheck $V/fp4gemm_new ${L/--tokens 8 --decode-tokens 8/--tokens 5 --decode-tokens 5} --act nvfp4 > $R/racecheck_nvfp4.log 2>&1
echo "racecheck nvfp4 rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $R/racecheck_nvfp4.log | tail -1)"
timeout 120 compute-sanitizer --tool synccheck $V/fp4gemm_new $L --act bf16 > $R/synccheck.log 2>&1
echo "synccheck rc=$? $(grep -E 'ERROR SUMMARY' $R/synccheck.log | tail -1)"; snap tests
VS="base new"
for v in $VS; do for act in bf16 nvfp4; do
  FP4GEMM_DIGEST=1 timeout 120 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 20 > $R/suite_${act}_$v.txt 2>&1
done; done
for act in bf16 nvfp4; do diff <(grep -i digest $R/suite_${act}_base.txt) <(grep -i digest $R/suite_${act}_new.txt) > /dev/null \
  && echo "$act digests identical ($(grep -ci digest $R/suite_${act}_base.txt))" || echo "$act DIGESTS DIFFER"; done; snap digests
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --values checkpoint --iters 100"
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --values checkpoint --iters 100"
M="layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --act bf16 --values checkpoint --iters 100"
D="layer --experts 256 --hidden 7168 --inter 2048 --topk 8 --act nvfp4 --iters 100"
for rnd in 1 2; do for v in $VS; do B=$V/fp4gemm_$v
  for t in 1 2 4; do timeout 60 $B $G --tokens $t > $R/g${t}_${v}_$rnd.txt 2>&1; done
  timeout 60 $B ${G/bf16/nvfp4} --tokens 2 > $R/gn2_${v}_$rnd.txt 2>&1
  for t in 1 2 4 8; do timeout 60 $B $Q --tokens $t > $R/q${t}_${v}_$rnd.txt 2>&1; done
  timeout 60 $B ${Q/bf16/nvfp4} --tokens 1 > $R/qn1_${v}_$rnd.txt 2>&1
  timeout 60 $B $M --tokens 1 > $R/m1_${v}_$rnd.txt 2>&1
  timeout 60 $B $D --tokens 1 > $R/d1_${v}_$rnd.txt 2>&1
done; done; snap timings
cd $R; for c in g1 g2 g4 gn2 q1 q2 q4 q8 qn1 m1 d1; do for v in $VS; do
  echo "$c $v $(for r in 1 2; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-14; done | tr '\n' ' ') $(grep -m1 -iE 'error|fail' ${c}_${v}_1.txt)"
done; done
