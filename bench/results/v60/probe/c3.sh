#!/usr/bin/env bash
# v60 c3: the ring, one kernel instantiation per scale layout (blocked: codes through the ring; linear: codes in registers).
# (c2 measured one kernel with a run-time choice of the two code paths.) Carry .carry/v63 (bp.tar.xz:
# .carry/build + .carry/pkg of that build; fp4gemm_main.xz: main 24e3a1d's CLI) and .peers.
#   1. CLI A/B main vs tmpl, blocked and linear scales (Qwen3 silu stacked / swigluoai interleaved T 1 4 8, gpt-oss T 1 4)
#   2. layer-suite digests main vs tmpl, W4A16 and W4A4 NVFP4
#   3. GPU tests (routing / layer / graph / stream-K / CLI), memcheck of the decode test, racecheck via the CLI on both
#      scale layouts, tk_layer (issue 52's table), the Python GPU tier
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v63; mkdir -p $V; t0=$SECONDS
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
xz -dc .carry/v63/bp.tar.xz | tar xf - -C .carry; xz -dc .carry/v63/fp4gemm_main.xz > $V/fp4gemm_main; chmod +x $V/fp4gemm_main
cp .carry/build/tools/fp4gemm $V/fp4gemm_tmpl
export FP4GEMM_CLI=$PWD/.carry/build/tools/fp4gemm
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --values checkpoint"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --values checkpoint"
for rnd in 1 2; do for v in main tmpl; do for sl in blocked linear; do B="$V/fp4gemm_$v"
  for t in 1 4 8; do timeout 60 $B $Q --iters 100 --scales $sl --tokens $t > $R/q${t}_${v}_${sl}_$rnd.txt 2>&1
    timeout 60 $B $Q --iters 100 --activation swigluoai --scales $sl --tokens $t > $R/qs${t}_${v}_${sl}_$rnd.txt 2>&1; done
  for t in 1 4; do timeout 60 $B $G --iters 100 --scales $sl --tokens $t > $R/g${t}_${v}_${sl}_$rnd.txt 2>&1; done
done; done; done; echo "[$((SECONDS - t0)) s] CLI"
(cd $R; for c in q1 q4 q8 qs1 qs4 qs8 g1 g4; do for sl in blocked linear; do echo "$c $sl $(for v in main tmpl; do echo -n "$v "; for r in 1 2; do grep -E '^time' ${c}_${v}_${sl}_$r.txt | cut -c7-14 | tr -d '\n'; echo -n ' '; done; done) $(grep -m1 -iE 'error|fail' ${c}_*_${sl}_1.txt)"; done; done | tee $R/summary.txt)
for act in bf16 nvfp4; do for v in main tmpl; do
  FP4GEMM_DIGEST=1 timeout 120 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 20 > $R/suite_${act}_$v.txt 2>&1; done
  diff <(grep -i digest $R/suite_${act}_main.txt) <(grep -i digest $R/suite_${act}_tmpl.txt) > /dev/null \
  && echo "$act digests identical ($(grep -ci digest $R/suite_${act}_main.txt))" || echo "$act DIGESTS DIFFER"; done
tar czf $OUT/r.tgz -C $OUT r
timeout 200 .carry/build/tests/fp4gemm_gpu_tests --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
timeout 150 compute-sanitizer --tool memcheck .carry/build/tests/fp4gemm_gpu_tests --gtest_filter='MoeLayerDecode.Every*:MoeLayerBiases*' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $R/memcheck.log | tail -1)"
for sl in blocked linear; do
timeout 100 compute-sanitizer --tool racecheck $FP4GEMM_CLI layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --decode-tokens 8 --iters 1 --warmup 1 --act bf16 --values checkpoint --scales $sl --activation swigluoai > $R/racecheck_$sl.log 2>&1
echo "racecheck $sl rc=$? $(grep -E 'RACECHECK SUMMARY' $R/racecheck_$sl.log | tail -1) [$((SECONDS - t0)) s]"; done
tar czf $OUT/r.tgz -C $OUT r
PYTHONPATH=$PWD/.carry/pkg:$PWD/.peers OUT=$R TKL_TOKENS=1,2,4,8,64,512,4096 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=200 \
  timeout 300 python3 .peers/tk_layer.py > $R/tk_layer.txt 2>&1
echo "tk_layer rc=$? [$((SECONDS - t0)) s]"; tar czf $OUT/r.tgz -C $OUT r
grep -A16 "CUDA graph replay" $R/tk_layer.txt | head -17
PYTHONPATH=$PWD/.carry/pkg timeout 190 python3 -m pytest -q -m gpu tests/python -x -p no:cacheprovider > $R/pytest_gpu.txt 2>&1
echo "pytest rc=$? [$((SECONDS - t0)) s]"; tail -3 $R/pytest_gpu.txt; tar czf $OUT/r.tgz -C $OUT r
