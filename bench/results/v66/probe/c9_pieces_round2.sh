#!/usr/bin/env bash
# v66 c9 (one H200, two calls back to back: carry .carry/v92 first -- it only unpacks -- then .carry/v97): exp/fused-pieces
# again. (1) issue 51's cell and class 9 for 399676a (old), main and the pieces build (P, FP4GEMM_EXP_PIECES=1), W4A16 /
# W4A4, 3 rounds interleaved; (2) a second round of c8's suites, main (A) against P (B), digests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v98; mkdir -p $V
for d in v92 v97; do [ -f .carry/$d/bins.tar.xz ] && xz -dc .carry/$d/bins.tar.xz | tar xf - -C $V; done
ls $V; [ -x $V/cli_pieces ] && [ -x $V/cli_old ] || { echo "unpacked only"; exit 0; }
t0=$SECONDS; R=$OUT/r; mkdir -p $R/ab
for rnd in 1 2 3; do for cell in 272 U; do for act in bf16 nvfp4; do for side in old main pieces; do
  if [ $cell = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens 1088 --routing balanced"; fi
  env="X=1"; [ $side = pieces ] && env="FP4GEMM_EXP_PIECES=1"
  echo "$rnd $cell $act $side $(env $env timeout 60 $V/cli_$side moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act $act --scales linear --out f16 --values full --iters 100 2>&1 | grep -oE '^time: [0-9.]+' | awk '{print $2}')"
done; done; done; done > $R/cells.txt
python3 - $R/cells.txt <<'PY'
import sys, collections, statistics
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5: t[(f[1], f[2], f[3])].append(float(f[4]))
for c in ["272", "U"]:
    for a in ["bf16", "nvfp4"]:
        o, m, p = (statistics.median(t[(c, a, s)]) for s in ["old", "main", "pieces"])
        print(f"{c:>4} {a:5} old {o:.2f}  main {m:.2f} ({m / o - 1:+.2%})  pieces {p:.2f} ({p / o - 1:+.2%})")
PY
echo "cells [$((SECONDS - t0)) s]"
export FP4GEMM_DIGEST=1
for side in A B; do
  b=$V/cli_main; env="X=1"; [ $side = B ] && b=$V/cli_pieces env="FP4GEMM_EXP_PIECES=1"
  for act in nvfp4 bf16; do env $env timeout 150 $b bench --suite moe --act $act --settle-ms 100 --json $R/ab/moe_${act}_${side}2.json > $R/ab/moe_${act}_${side}2.txt 2>&1; done
  env $env timeout 150 $b bench --suite layer --act bf16 --decode-tokens 0 --settle-ms 100 --json $R/ab/layer_${side}2.json > $R/ab/layer_${side}2.txt 2>&1
done
python3 bench/results/v50/probe/ab_compare.py $R/ab > $R/ab/compare.txt 2>&1; cat $R/ab/compare.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
