#!/usr/bin/env bash
# v61 c5 (one H200, the session's last ~220 s): W4A4 decode as one PDL chain (branch exp/w4a4-pdl) against main 2961dc0.
# Carry .carry/v72 (xz): fp4gemm_main, fp4gemm_pdl, gpu_tests_pdl. Order by value: A/B, digests, gtests, memcheck.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; V=/tmp/v72; mkdir -p $V; t0=$SECONDS
for f in .carry/v72/*.xz; do n=$(basename $f .xz); xz -dc $f > $V/$n; chmod +x $V/$n; done
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act nvfp4 --activation swigluoai"
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act nvfp4 --activation swigluoai"
for rnd in 1 2; do for v in main pdl; do B="$V/fp4gemm_$v"
  for t in 1 4 8; do timeout 30 $B $Q --iters 100 --tokens $t > $R/q${t}_${v}_$rnd.txt 2>&1
    timeout 30 $B $G --iters 100 --tokens $t > $R/g${t}_${v}_$rnd.txt 2>&1; done; done; done
(cd $R; for c in q1 q4 q8 g1 g4 g8; do echo "$c $(for v in main pdl; do echo -n "$v "; for r in 1 2; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-14 | tr -d '\n'; echo -n ' '; done; done) $(grep -m1 -iE 'error|fail' ${c}_*_1.txt)"; done | tee $R/summary.txt)
echo "[$((SECONDS - t0)) s] CLI"; tar czf $OUT/r.tgz -C $OUT r
for act in nvfp4 bf16; do for v in main pdl; do
  FP4GEMM_DIGEST=1 timeout 40 $V/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 5 > $R/suite_${act}_$v.txt 2>&1; done
  diff <(grep -i digest $R/suite_${act}_main.txt) <(grep -i digest $R/suite_${act}_pdl.txt) > /dev/null \
    && echo "$act pdl digests identical ($(grep -ci digest $R/suite_${act}_main.txt))" || echo "$act pdl DIGESTS DIFFER"; done
echo "[$((SECONDS - t0)) s] digests"; tar czf $OUT/r.tgz -C $OUT r
export FP4GEMM_CLI=$V/fp4gemm_pdl
timeout 70 $V/gpu_tests_pdl --gtest_filter='MoeLayerDecode*:MoeLayerGraph*' > $R/gtest.log 2>&1
echo "gtest rc=$? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/gtest.log | head -8; tar czf $OUT/r.tgz -C $OUT r
L="layer --experts 12 --hidden 256 --inter 128 --topk 8 --tokens 8 --decode-tokens 8 --iters 1 --warmup 1 --activation swigluoai"
for act in nvfp4 mxfp4; do timeout 40 compute-sanitizer --tool memcheck $V/fp4gemm_pdl $L --act $act > $R/memcheck_$act.log 2>&1
  echo "memcheck $act rc=$? $(grep -E 'ERROR SUMMARY' $R/memcheck_$act.log | tail -1)"; done
tar czf $OUT/r.tgz -C $OUT r
