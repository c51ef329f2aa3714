#!/usr/bin/env bash
# For the next session (one H200, ~8 min): branch exp/glu-k-order -- the W4A16 layer's GEMM1 GLU epilogue writes the
# intermediate straight into GEMM2's activation workspace in its wgmma k order (I % 64 == 0), and GEMM2 runs without
# its pre-pass (one launch and one read + write of the intermediate fewer). Built on the CPU machine, never run.
# Carry .carry/v80 and .peers (one solid xz: cli_main = main 3715eae's CLI, cli_ko / gpu_tests_ko / pkg_ko = the branch's).
# Prediction: general-path W4A16 cells -3..-10 us (gpt-oss / Qwen3 T 64-512: v58 put GEMM2's pre-pass at 4.6-10 us);
# outputs byte-identical (the same values in the same k slots).
#   1. gtests (layer / routing / graph / stream-K / CLI, with MoeLayerHandover.WhereItApplies and MoeLayerCases'
#      I 128 / 96 W4A16 cases), memcheck + racecheck of a general-path W4A16 layer through the CLI
#   2. layer-suite digests (W4A16, decode path off) branch vs main
#   3. CLI A/B 2 rounds: gpt-oss / Qwen3 W4A16 (checkpoint values, linear scales) T 16 / 64 / 512 / 4096, decode off
#   4. tk_layer T 64 / 512 / 4096 on the branch's package; the Python GPU tier
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v80; mkdir -p $V; t0=$SECONDS
xz -dc .carry/v80/bins.tar.xz | tar xf - -C $V
export FP4GEMM_CLI=$V/cli_ko NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 200 $V/gpu_tests_ko --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
L="layer --experts 12 --hidden 256 --inter 128 --topk 4 --tokens 40 --decode-tokens 0 --iters 1 --warmup 1 --values checkpoint --activation swigluoai --act bf16"
for sl in blocked linear; do
  timeout 60 compute-sanitizer --tool memcheck $V/cli_ko $L --scales $sl > $R/memcheck_$sl.log 2>&1
  timeout 90 compute-sanitizer --tool racecheck $V/cli_ko $L --scales $sl > $R/racecheck_$sl.log 2>&1
  echo "$sl: $(grep -E 'ERROR SUMMARY' $R/memcheck_$sl.log | tail -1) / $(grep -E 'RACECHECK SUMMARY' $R/racecheck_$sl.log | tail -1)"; done
$V/cli_ko $L --scales linear 2>&1 | grep -m1 "k order" || echo "(describe() does not name the hand-over)"
for v in main ko; do
  FP4GEMM_DIGEST=1 timeout 120 $V/cli_$v bench --suite layer --act bf16 --decode-tokens 0 --no-peers --iters 5 > $R/suite_$v.txt 2>&1; done
diff <(grep -i digest $R/suite_main.txt) <(grep -i digest $R/suite_ko.txt) > /dev/null \
  && echo "digests identical ($(grep -ci digest $R/suite_main.txt))" || echo "DIGESTS DIFFER"
echo "[$((SECONDS - t0)) s] checks"; tar czf $OUT/r.tgz -C $OUT r
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai --act bf16 --values checkpoint --scales linear --decode-tokens 0"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai --act bf16 --values checkpoint --scales linear --decode-tokens 0"
for rnd in 1 2; do for v in main ko; do for t in 16 64 512 4096; do
  timeout 30 $V/cli_$v $Q --iters 100 --tokens $t > $R/q${t}_${v}_$rnd.txt 2>&1
  timeout 30 $V/cli_$v $G --iters 100 --tokens $t > $R/g${t}_${v}_$rnd.txt 2>&1; done; done; done
(cd $R; for c in q16 q64 q512 q4096 g16 g64 g512 g4096; do echo "$c $(for v in main ko; do echo -n "$v "; for r in 1 2; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-14 | tr -d '\n'; echo -n ' '; done; done) $(grep -m1 -iE 'error|fail' ${c}_*_1.txt)"; done | tee $R/summary.txt)
echo "[$((SECONDS - t0)) s] CLI"; tar czf $OUT/r.tgz -C $OUT r
mkdir -p $R/tk; PYTHONPATH=$V/pkg_ko:$PWD/.peers OUT=$R/tk TKL_TOKENS=64,512,4096 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=150 \
  timeout 200 python3 .peers/tk_layer.py > $R/tk/tk_layer.txt 2>&1
echo "tk_layer rc=$? [$((SECONDS - t0)) s]"; grep -A8 "CUDA graph replay" $R/tk/tk_layer.txt | head -9; tar czf $OUT/r.tgz -C $OUT r
PYTHONPATH=$V/pkg_ko timeout 190 python3 -m pytest -q -m gpu tests/python -x -p no:cacheprovider > $R/pytest_gpu.txt 2>&1
echo "pytest rc=$? [$((SECONDS - t0)) s]"; tail -2 $R/pytest_gpu.txt; tar czf $OUT/r.tgz -C $OUT r
