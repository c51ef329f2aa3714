#!/usr/bin/env bash
# v62 c5 (one H200, ~6 min): exp/decode-late-staging 2nd form (W4A4 kernel 1: routing read and the rings' first copies
# before waiting for the token quantiser, tokens staged by the streaming warps then; W4A16 unchanged). Carry .carry/v78
# (one solid xz: main e1b4b0e's CLI, the branch's CLI / gpu tests / Python package).
#   1. gtests (routing / layer / graph / stream-K / CLI), memcheck + racecheck (3 activations x 2 layouts), digests vs main
#   2. CLI A/B 2 rounds: W4A16 Qwen3 / gpt-oss T 1-8 (expect equal), NVFP4 T 1-8 and MXFP4 W4A4 T 1 / 8 (expect c4's late)
#   3. Python GPU tier on the branch's package
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v78; mkdir -p $V; t0=$SECONDS
xz -dc .carry/v78/bins.tar.xz | tar xf - -C $V
export FP4GEMM_CLI=$V/fp4gemm_new NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 200 $V/fp4gemm_gpu_tests --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
L="layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --decode-tokens 8 --iters 1 --warmup 1 --values checkpoint --activation swigluoai"
for act in bf16 nvfp4 mxfp4; do for sl in blocked linear; do
  timeout 60 compute-sanitizer --tool memcheck $V/fp4gemm_new $L --act $act --scales $sl > $R/memcheck_${act}_$sl.log 2>&1
  m=$(grep -E 'ERROR SUMMARY' $R/memcheck_${act}_$sl.log | tail -1)
  timeout 60 compute-sanitizer --tool racecheck $V/fp4gemm_new $L --act $act --scales $sl > $R/racecheck_${act}_$sl.log 2>&1
  echo "$act $sl: $m / $(grep -E 'RACECHECK SUMMARY' $R/racecheck_${act}_$sl.log | tail -1)"; done; done
for act in bf16 nvfp4 mxfp4; do for v in main new; do
  FP4GEMM_DIGEST=1 timeout 60 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 5 > $R/suite_${act}_$v.txt 2>&1; done
  diff <(grep -i digest $R/suite_${act}_main.txt) <(grep -i digest $R/suite_${act}_new.txt) > /dev/null \
    && echo "$act digests identical ($(grep -ci digest $R/suite_${act}_main.txt))" || echo "$act DIGESTS DIFFER"; done
echo "[$((SECONDS - t0)) s] checks"; tar czf $OUT/r.tgz -C $OUT r
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"
VS="main new"
for rnd in 1 2; do for v in $VS; do B="$V/fp4gemm_$v"
  for t in 1 2 4 8; do timeout 30 $B $Q --act bf16 --values checkpoint --scales linear --iters 100 --tokens $t > $R/q${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $G --act bf16 --values checkpoint --scales linear --iters 100 --tokens $t > $R/g${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $Q --act nvfp4 --iters 100 --tokens $t > $R/nq${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $G --act nvfp4 --iters 100 --tokens $t > $R/ng${t}_${v}_$rnd.txt 2>&1; done
  for t in 1 8; do timeout 30 $B $Q --act mxfp4 --iters 100 --tokens $t > $R/mq${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $G --act mxfp4 --iters 100 --tokens $t > $R/mg${t}_${v}_$rnd.txt 2>&1; done
done; done; echo "[$((SECONDS - t0)) s] CLI"
(cd $R; for c in q1 q2 q4 q8 g1 g2 g4 g8 nq1 nq2 nq4 nq8 ng1 ng2 ng4 ng8 mq1 mq8 mg1 mg8; do echo "$c $(for v in $VS; do echo -n "$v "; for r in 1 2; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-14 | tr -d '\n'; echo -n ' '; done; done) $(grep -m1 -iE 'error|fail' ${c}_*_1.txt)"; done | tee $R/summary.txt)
tar czf $OUT/r.tgz -C $OUT r
PYTHONPATH=$V/pkg timeout 200 python3 -m pytest -q -m gpu tests/python -x -p no:cacheprovider > $R/pytest_gpu.txt 2>&1
echo "pytest rc=$? [$((SECONDS - t0)) s]"; tail -3 $R/pytest_gpu.txt; tar czf $OUT/r.tgz -C $OUT r
