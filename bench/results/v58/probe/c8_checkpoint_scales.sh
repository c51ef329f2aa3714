#!/usr/bin/env bash
# The decode kernels on checkpoint-range MXFP4 scales (layer --values checkpoint: the one-multiply decode real
# checkpoints take; every CLI A/B before ran GPU MODE's scales, whose code 128 sends every chunk to the full-range
# decode): main (e851cdf) gpumode vs checkpoint, and the TMA ring variants (16 warps x 2, 20 x 2, 24 x 2 stages) on
# checkpoint scales. 2 rounds. Carry .carry/v58z.
set -uo pipefail
R=$OUT/r; mkdir -p $R; V=/tmp/v58; mkdir -p $V
for f in .carry/v58z/*.xz; do n=$(basename $f .xz); xz -dc $f > $V/$n; chmod +x $V/$n; done
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --iters 100"
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --iters 100"
M="layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --act bf16 --iters 100"
for rnd in 1 2; do
  for v in main_gm:main2:gpumode main:main2:checkpoint s2:c_s2:checkpoint w20s2:c_w20s2:checkpoint w24s2:c_w24s2:checkpoint; do
    IFS=: read n b vals <<< "$v"
    for t in 1 2 4; do FP4GEMM_EXP_PROMO=2 timeout 60 $V/$b $G --values $vals --tokens $t > $R/g${t}_${n}_$rnd.txt 2>&1; done
    for t in 1 4 8; do FP4GEMM_EXP_PROMO=2 timeout 60 $V/$b $Q --values $vals --tokens $t > $R/q${t}_${n}_$rnd.txt 2>&1; done
    FP4GEMM_EXP_PROMO=2 timeout 60 $V/$b $M --values $vals --tokens 1 > $R/m1_${n}_$rnd.txt 2>&1
  done; done
tar czf $OUT/r.tgz -C $OUT r
cd $R; for c in g1 g2 g4 q1 q4 q8 m1; do for n in main_gm main s2 w20s2 w24s2; do
  echo "$c $n $(for r in 1 2; do grep -E '^time' ${c}_${n}_$r.txt | cut -c7-13; done | tr '\n' ' ') $(grep -m1 -iE 'error|fail' ${c}_${n}_1.txt)"; done; done
grep -h "weight scales" g1_main_1.txt g1_main_gm_1.txt
