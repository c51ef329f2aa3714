#!/usr/bin/env bash
# The TMA ring's depth: 2 / 3 / 4 stages of 1 KB per warp (6 was 35-50 % slower in c1; 3 about main) against main,
# L2 promotion 128B (3 stages also 256B), 2 rounds. Carry .carry/v58z.
set -uo pipefail
R=$OUT/r; mkdir -p $R; V=/tmp/v58; mkdir -p $V
for f in .carry/v58z/*.xz; do xz -dc $f > $V/$(basename $f .xz); chmod +x $V/$(basename $f .xz); done
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --iters 100"
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --iters 100"
M="layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --act bf16 --iters 100"
for rnd in 1 2; do
  for v in main:$V/fp4gemm_main:3 s2:$V/fp4gemm_tma2s:2 s3:$V/fp4gemm_tma3:2 s3p256:$V/fp4gemm_tma3:3 s4:$V/fp4gemm_tma4s:2; do
    IFS=: read n b p <<< "$v"
    for t in 1 2 4; do FP4GEMM_EXP_PROMO=$p timeout 60 $b $G --tokens $t > $R/g${t}_${n}_$rnd.txt 2>&1; done
    FP4GEMM_EXP_PROMO=$p timeout 60 $b ${G/bf16/nvfp4} --tokens 1 > $R/gn1_${n}_$rnd.txt 2>&1
    for t in 1 4 8; do FP4GEMM_EXP_PROMO=$p timeout 60 $b $Q --tokens $t > $R/q${t}_${n}_$rnd.txt 2>&1; done
    FP4GEMM_EXP_PROMO=$p timeout 60 $b $M --tokens 1 > $R/m1_${n}_$rnd.txt 2>&1
  done; done
tar czf $OUT/r.tgz -C $OUT r
cd $R; for c in g1 g2 g4 gn1 q1 q4 q8 m1; do for n in main s2 s3 s3p256 s4; do
  echo "$c $n $(for r in 1 2; do grep -E '^time' ${c}_${n}_$r.txt | cut -c7-13; done | tr '\n' ' ') $(grep -m1 -iE 'error|fail' ${c}_${n}_1.txt)"; done; done
