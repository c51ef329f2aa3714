#!/usr/bin/env bash
# For the next session (one H200, ~6 min): issue 51's timing criterion re-measured on today's main. Carry .carry/v79
# (one solid xz: cli_old = 399676a + bench/results/v50/probe/old_cli_digest.patch, the redesign's start; cli_new = main
# 3715eae's CLI; both built on the CPU machine, sm_90a, Release).
#   1. v52's ten cells (5 slower in every round then, +1.9..+4.6 %): 3 interleaved rounds, --settle-ms 300, digests on
#   2. the whole MoE suites W4A4 / W4A16, the seed, dense and dual suites and the layer suite (general path), one round
#      each side, then ab_compare.py (B / A per suite, the worst cells, digest equality)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R/cells $R/suites; V=/tmp/v79; mkdir -p $V; t0=$SECONDS
xz -dc .carry/v79/bins.tar.xz | tar xf - -C $V
export FP4GEMM_DIGEST=1
for rnd in 1 2 3; do for side in A B; do
  bin=$V/cli_old; [ $side = B ] && bin=$V/cli_new
  timeout 120 $bin bench --suite moe --act nvfp4 --cases 3,5,12,45,54 --settle-ms 300 --json $R/cells/moe_w4a4_$side$rnd.json > $R/cells/moe_w4a4_$side$rnd.txt 2>&1
  timeout 120 $bin bench --suite moe --act bf16 --cases 7,22,47,54,55 --settle-ms 300 --json $R/cells/moe_w4a16_$side$rnd.json > $R/cells/moe_w4a16_$side$rnd.txt 2>&1
done; echo "cells round $rnd [$((SECONDS - t0)) s]"; done
python3 bench/results/v50/probe/ab_compare.py $R/cells | tee $R/cells/compare.txt; tar czf $OUT/r.tgz -C $OUT r
for side in A B; do
  bin=$V/cli_old; [ $side = B ] && bin=$V/cli_new
  for act in nvfp4 bf16; do
    timeout 150 $bin bench --suite moe --act $act --settle-ms 100 --json $R/suites/moe_${act}_${side}1.json > $R/suites/moe_${act}_${side}1.txt 2>&1; done
  for s in seed dense dual; do
    timeout 100 $bin bench --suite $s --settle-ms 100 --json $R/suites/${s}_${side}1.json > $R/suites/${s}_${side}1.txt 2>&1; done
  dt=""; [ $side = B ] && dt="--decode-tokens 0"  # (399676a has no decode path, nor the option)
  timeout 150 $bin bench --suite layer --act bf16 $dt --settle-ms 100 --json $R/suites/layer_bf16_${side}1.json > $R/suites/layer_bf16_${side}1.txt 2>&1
  echo "suites $side [$((SECONDS - t0)) s]"; tar czf $OUT/r.tgz -C $OUT r
done
python3 bench/results/v50/probe/ab_compare.py $R/suites | tee $R/suites/compare.txt; tar czf $OUT/r.tgz -C $OUT r
