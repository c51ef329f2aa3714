#!/usr/bin/env bash
# v64 c1 (one H200): branch exp/lds-ahead (the k-block-group mainloop issues the next k-block's shared-memory loads
# before its retiring wait) against A = 399676a and M = main b848b3a: (1) c0's width-class sweep of mixtral's down
# projection (balanced routing, R rows per expert) and the uniform T 1024 cell, 2 rounds A / M / B; (2) issue 51's
# criterion: the suites of the plain kernels once per side A / B with digests (MoE W4A4 / W4A16, seed, dense; this
# build's GLU kernels spilled, 8-24 -> 56-88 B of stack, so the dual and layer suites wait for the next build), ../v50/probe/ab_compare.py. Carry .carry/v85 (cli_old, cli_main, cli_lds: CPU machine, sm_90a).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R/sweep $R/suites; V=/tmp/v85; mkdir -p $V; t0=$SECONDS
xz -dc .carry/v85/bins.tar.xz | tar xf - -C $V
side_bin() { case $1 in A) echo $V/cli_old;; M) echo $V/cli_main;; B) echo $V/cli_lds;; esac; }
for rnd in 1 2; do
  for R_ in 144 152 160 240 256 272 296 U U; do
    for act in bf16 nvfp4; do
      for side in A M B; do
        if [ $R_ = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens $((4 * R_)) --routing balanced"; fi
        t=$(timeout 60 $(side_bin $side) moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act $act --scales linear --out f16 --values full --iters 100 2>&1 | grep -oE "^time: [0-9.]+" | awk '{print $2}')
        echo "$rnd $R_ $act $side $t"
      done
    done
  done
done > $R/sweep/sweep.txt
echo "sweep [$((SECONDS - t0)) s]"; tar czf $OUT/r.tgz -C $OUT r
export FP4GEMM_DIGEST=1
for side in A B; do bin=$(side_bin $side)
  for act in nvfp4 bf16; do
    timeout 150 $bin bench --suite moe --act $act --settle-ms 100 --json $R/suites/moe_${act}_${side}1.json > $R/suites/moe_${act}_${side}1.txt 2>&1; done
  for s in seed dense; do
    timeout 100 $bin bench --suite $s --settle-ms 100 --json $R/suites/${s}_${side}1.json > $R/suites/${s}_${side}1.txt 2>&1; done
  echo "suites $side [$((SECONDS - t0)) s]"; tar czf $OUT/r.tgz -C $OUT r
done
python3 bench/results/v50/probe/ab_compare.py $R/suites > $R/suites/compare.txt 2>&1; tail -40 $R/suites/compare.txt
tar czf $OUT/r.tgz -C $OUT r
