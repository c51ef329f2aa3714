#!/usr/bin/env bash
# For the next session (one H200, ~3 min): branch exp/decode-lean (3e7d4bd: the decode streaming loop with its K tail and
# scale layout as compile-time choices -- no zeroing or predicated loads where K % 128 == 0, the scale step a constant;
# four copies of the loop, 121-127 registers, no stack) against main's kernels (1efc4d5). Built on the CPU machine and left
# xz-compressed in .carry/v59 (fp4gemm_main, fp4gemm_lean, gpu_tests_lean); carry .carry/v59. Never run: read gtest.log
# first. Expected: outputs identical (same chunks, same order, same arithmetic), ~8 fewer instructions per chunk where
# K % 128 == 0 (Qwen3, Mixtral; gpt-oss's H = I = 2880 keeps the tail copy) -- a few per cent at most.
#   1. the branch's decode / layer / graph / stream-K / CLI GPU tests and memcheck of the decode test
#   2. layer-suite digests main vs branch (identical expected), W4A16 and W4A4 NVFP4
#   3. CLI timings on checkpoint-range scales (and GPU MODE's), 2 rounds interleaved
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v59; mkdir -p $V; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
for f in .carry/v59/*.xz; do n=$(basename $f .xz); xz -dc $f > $V/$n; chmod +x $V/$n; done
export FP4GEMM_CLI=$V/fp4gemm_lean
timeout 240 $V/gpu_tests_lean --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$?"; grep -E "^\[  (PASSED|FAILED) " $R/gtest.log | head -8
timeout 170 compute-sanitizer --tool memcheck $V/gpu_tests_lean --gtest_filter='MoeLayerDecode.Every*' > $R/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" $R/memcheck.log | tail -1; snap tests
for v in main lean; do for act in bf16 nvfp4; do
  FP4GEMM_DIGEST=1 timeout 120 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 20 > $R/suite_${act}_$v.txt 2>&1
done; done
for act in bf16 nvfp4; do diff <(grep -i digest $R/suite_${act}_main.txt) <(grep -i digest $R/suite_${act}_lean.txt) > /dev/null \
  && echo "$act digests identical ($(grep -ci digest $R/suite_${act}_main.txt))" || echo "$act DIGESTS DIFFER"; done; snap digests
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --iters 100"
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --iters 100"
M="layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --act bf16 --iters 100"
for rnd in 1 2; do for v in main lean; do for vals in checkpoint gpumode; do B=$V/fp4gemm_$v
  for t in 1 4; do timeout 60 $B $G --values $vals --tokens $t > $R/g${t}_${v}_${vals}_$rnd.txt 2>&1; done
  for t in 1 4 8; do timeout 60 $B $Q --values $vals --tokens $t > $R/q${t}_${v}_${vals}_$rnd.txt 2>&1; done
  timeout 60 $B ${Q/bf16/nvfp4} --tokens 1 > $R/qn1_${v}_${vals}_$rnd.txt 2>&1
  timeout 60 $B $M --values $vals --tokens 1 > $R/m1_${v}_${vals}_$rnd.txt 2>&1
done; done; done; snap timings
cd $R; for c in g1 g4 q1 q4 q8 qn1 m1; do for vals in checkpoint gpumode; do for v in main lean; do
  echo "$c $vals $v $(for r in 1 2; do grep -E '^time' ${c}_${v}_${vals}_$r.txt | cut -c7-13; done | tr '\n' ' ') $(grep -m1 -iE 'error|fail' ${c}_${v}_${vals}_1.txt)"
done; done; done
