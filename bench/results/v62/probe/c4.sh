#!/usr/bin/env bash
# v62 c4 (one H200, ~3 min): decode kernel 1 stages its tokens late (branch exp/decode-late-staging; carry .carry/v77:
# CLIs main e1b4b0e / late / latefx, and late's gpu tests, one solid xz):
#   late: kernel 1 reads its routing first, issues its rings' first copies, then stages the tokens (the W streaming
#         warps, a named barrier); W4A4 waits for the token quantiser only there (the routing read and the ring fill
#         overlap the quantiser)
#   latefx: late + NVFP4 kernel 1 quantises the tokens itself at that point (no token-quantiser launch)
# Prediction: late -0.5..-1 us at T 1 (the staging's ~0.9 us under the first loads' latency), more at T 8 and W4A4;
# latefx a further -1..-2 us at NVFP4 T 1-2, the T 8 loss of the serial version (+4..8 us) mostly hidden.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v77; mkdir -p $V; t0=$SECONDS
xz -dc .carry/v77/bins.tar.xz | tar xf - -C $V
export FP4GEMM_CLI=$V/fp4gemm_late
timeout 200 $V/fp4gemm_gpu_tests --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*:MoeGraph*:MoeStreamK*:CliGpu*' > $R/gtest.log 2>&1
echo "gtest rc=$? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
L="layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --decode-tokens 8 --iters 1 --warmup 1 --values checkpoint --activation swigluoai"
for v in late latefx; do for act in bf16 nvfp4 mxfp4; do for sl in blocked linear; do
  timeout 60 compute-sanitizer --tool memcheck $V/fp4gemm_$v $L --act $act --scales $sl > $R/memcheck_${v}_${act}_$sl.log 2>&1
  m=$(grep -E 'ERROR SUMMARY' $R/memcheck_${v}_${act}_$sl.log | tail -1)
  timeout 60 compute-sanitizer --tool racecheck $V/fp4gemm_$v $L --act $act --scales $sl > $R/racecheck_${v}_${act}_$sl.log 2>&1
  echo "$v $act $sl: $m / $(grep -E 'RACECHECK SUMMARY' $R/racecheck_${v}_${act}_$sl.log | tail -1)"; done; done; done
VS="main late latefx"
for act in bf16 nvfp4 mxfp4; do for v in $VS; do
  FP4GEMM_DIGEST=1 timeout 60 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 5 > $R/suite_${act}_$v.txt 2>&1; done
  for v in late latefx; do diff <(grep -i digest $R/suite_${act}_main.txt) <(grep -i digest $R/suite_${act}_$v.txt) > /dev/null \
    && echo "$act $v digests identical ($(grep -ci digest $R/suite_${act}_main.txt))" || echo "$act $v DIGESTS DIFFER"; done; done
echo "[$((SECONDS - t0)) s] checks"; tar czf $OUT/r.tgz -C $OUT r
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"
for rnd in 1 2; do for v in $VS; do B="$V/fp4gemm_$v"
  for t in 1 2 4 8; do timeout 30 $B $Q --act bf16 --values checkpoint --scales linear --iters 100 --tokens $t > $R/q${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $G --act bf16 --values checkpoint --scales linear --iters 100 --tokens $t > $R/g${t}_${v}_$rnd.txt 2>&1; done
  for t in 1 2 4 8; do timeout 30 $B $Q --act nvfp4 --iters 100 --tokens $t > $R/nq${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $G --act nvfp4 --iters 100 --tokens $t > $R/ng${t}_${v}_$rnd.txt 2>&1; done
  for t in 1 8; do timeout 30 $B $G --act mxfp4 --iters 100 --tokens $t > $R/mg${t}_${v}_$rnd.txt 2>&1; done
done; done; echo "[$((SECONDS - t0)) s] CLI"
(cd $R; for c in q1 q2 q4 q8 g1 g2 g4 g8 nq1 nq2 nq4 nq8 ng1 ng2 ng4 ng8 mg1 mg8; do echo "$c $(for v in $VS; do echo -n "$v "; for r in 1 2; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-14 | tr -d '\n'; echo -n ' '; done; done) $(grep -m1 -iE 'error|fail' ${c}_*_1.txt)"; done | tee $R/summary.txt)
tar czf $OUT/r.tgz -C $OUT r
