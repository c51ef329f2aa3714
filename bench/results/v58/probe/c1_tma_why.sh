#!/usr/bin/env bash
# Why is the per-warp TMA ring (exp/decode-tma) 35-50 % slower in the layer when stream5 says the TMA ring streams
# 20-40 % faster? Phase traces of main (v56 trace CLI) vs the branch; the branch with the maps' L2 promotion
# none / 128B / 256B (FP4GEMM_EXP_PROMO 0 / 2 / 3) and with a 3-deep ring. Carry .carry/v58z (xz'd CLIs; main's trace is v56 c2).
set -uo pipefail
R=$OUT/r; mkdir -p $R; V=/tmp/v58; mkdir -p $V
for f in .carry/v58z/*.xz; do xz -dc $f > $V/$(basename $f .xz); chmod +x $V/$(basename $f .xz); done
G="layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --act bf16 --activation swigluoai --iters 100"
Q="layer --experts 128 --hidden 2048 --inter 768 --topk 8 --act bf16 --iters 100"
M="layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --act bf16 --iters 100"
for b in $V/fp4gemm_tma_trace; do n=$(basename $b)
  timeout 60 $b $G --tokens 1 > $R/tr_gptoss_$n.txt 2>&1; timeout 60 $b $Q --tokens 1 > $R/tr_qwen3_$n.txt 2>&1; done
for rnd in 1 2; do
  for v in main:$V/fp4gemm_main:3 tma0:$V/fp4gemm_tma:0 tma2:$V/fp4gemm_tma:2 tma3:$V/fp4gemm_tma:3 s3:$V/fp4gemm_tma3:2; do
    IFS=: read n b p <<< "$v"
    for t in 1 4; do FP4GEMM_EXP_PROMO=$p timeout 60 $b $G --tokens $t > $R/g${t}_${n}_$rnd.txt 2>&1; done
    FP4GEMM_EXP_PROMO=$p timeout 60 $b $Q --tokens 1 > $R/q1_${n}_$rnd.txt 2>&1
    FP4GEMM_EXP_PROMO=$p timeout 60 $b $M --tokens 1 > $R/m1_${n}_$rnd.txt 2>&1
  done; done
tar czf $OUT/r.tgz -C $OUT r
for f in $R/tr_*; do echo "== $(basename $f)"; grep -E "^time|kernel [12] (entry|ring issued|first chunk|stream-K|exit)" $f; done
cd $R; for c in g1 g4 q1 m1; do for n in main tma0 tma2 tma3 s3; do
  echo "$c $n $(for r in 1 2; do grep -E '^time' ${c}_${n}_$r.txt | cut -c7-13; done | tr '\n' ' ') $(grep -m1 -iE 'error|fail' ${c}_${n}_1.txt)"; done; done
