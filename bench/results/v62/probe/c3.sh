#!/usr/bin/env bash
# v62 c3 (one H200, ~3 min): L2 bulk prefetch in the decode kernels (branch exp/decode-l2-prefetch, DECODE_L2_PREFETCH
# bits), against main e1b4b0e's CLI (carry .carry/v76: xz CLIs, main's gpu tests):
#   p1: kernel 1 prefetches the active experts' down weights (<= 24 MB) into L2 for kernel 2, spread over the grid
#   p2: kernel 1 prefetches its own share of gate/up rows    p3: p1 + p2
#   p4: kernel 2 prefetches its own share of down rows       p5: p1 + p4
# Prediction: p1 -1..-3 us at gpt-oss T 1-2 (kernel 2's ring fill and stream from L2); p2 / p4 small (the ring already
# keeps ~60 KB per SM in flight); digests identical (a prefetch changes no value).
#   0. main's DefaultBoundByTheLayer (the W4A4 bound 4 past H 3072) and the decode gtests
#   1. digests of p1..p5 against main (layer suite W4A16 / W4A4, 6 cases); memcheck of p3 and p5 through the CLI
#   2. CLI A/B, 2 rounds: Qwen3 / gpt-oss swigluoai W4A16 linear T 1 / 2 / 4 / 8; W4A4 NVFP4 T 1 / 8
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v76; mkdir -p $V; t0=$SECONDS
xz -dc .carry/v76/bins.tar.xz | tar xf - -C $V
export FP4GEMM_CLI=$V/fp4gemm_main
timeout 120 $V/fp4gemm_gpu_tests --gtest_filter='MoeLayerDecode.*:MoeLayerGraph.*' > $R/gtest.log 2>&1
echo "gtest rc=$? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8
L="layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --decode-tokens 8 --iters 1 --warmup 1 --values checkpoint --activation swigluoai"
for v in p3 p5; do for act in bf16 nvfp4; do
  timeout 60 compute-sanitizer --tool memcheck $V/fp4gemm_$v $L --act $act --scales linear > $R/memcheck_${v}_$act.log 2>&1
  echo "memcheck $v $act rc=$? $(grep -E 'ERROR SUMMARY' $R/memcheck_${v}_$act.log | tail -1)"; done; done
VS="main p1 p2 p3 p4 p5"
for act in bf16 nvfp4; do for v in $VS; do
  FP4GEMM_DIGEST=1 timeout 60 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 5 > $R/suite_${act}_$v.txt 2>&1; done
  for v in p1 p2 p3 p4 p5; do diff <(grep -i digest $R/suite_${act}_main.txt) <(grep -i digest $R/suite_${act}_$v.txt) > /dev/null \
    && echo "$act $v digests identical ($(grep -ci digest $R/suite_${act}_main.txt))" || echo "$act $v DIGESTS DIFFER"; done; done
echo "[$((SECONDS - t0)) s] checks"; tar czf $OUT/r.tgz -C $OUT r
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --activation swigluoai"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"
for rnd in 1 2; do for v in $VS; do B="$V/fp4gemm_$v"
  for t in 1 2 4 8; do timeout 30 $B $Q --act bf16 --values checkpoint --scales linear --iters 100 --tokens $t > $R/q${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $G --act bf16 --values checkpoint --scales linear --iters 100 --tokens $t > $R/g${t}_${v}_$rnd.txt 2>&1; done
  for t in 1 8; do timeout 30 $B $Q --act nvfp4 --iters 100 --tokens $t > $R/nq${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $G --act nvfp4 --iters 100 --tokens $t > $R/ng${t}_${v}_$rnd.txt 2>&1; done
done; done; echo "[$((SECONDS - t0)) s] CLI"
(cd $R; for c in q1 q2 q4 q8 g1 g2 g4 g8 nq1 nq8 ng1 ng8; do echo "$c $(for v in $VS; do echo -n "$v "; for r in 1 2; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-14 | tr -d '\n'; echo -n ' '; done; done) $(grep -m1 -iE 'error|fail' ${c}_*_1.txt)"; done | tee $R/summary.txt)
tar czf $OUT/r.tgz -C $OUT r
