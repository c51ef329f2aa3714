#!/usr/bin/env bash
# Prepared for the next session (not run): exp/fused-pieces-glu -- every MoE kernel (the GLU ones too: their 16-row
# blocks are 8 gate rows and their 8 up rows, so a w13 piece is decode kernel 1's unit) reading the weights in k-block
# pieces (FP4GEMM_EXP_PIECES=1, plan-time copies). One call on one H200, carrying .carry/v99 (cli_fixed: main c213566)
# and .carry/v101 (cli_glu, gpu_tests_glu: the branch).
#   (1) the branch's MoE / layer gtests with the variable (expected failures: tests with non-contiguous or separate
#       gate/up weights meet the experiment's guard; MXFP4 W4A4 decode is off on the branch);
#   (2) the MoE suites and the layer suite's general path, main against the branch, digests, 2 rounds;
#   (3) the layer suite 3 more times with the branch (c9's mismatch must not come back on the fixed tool).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/vglu; mkdir -p $V; for d in v99 v101; do xz -dc .carry/$d/bins.tar.xz | tar xf - -C $V; done; ls $V
t0=$SECONDS; R=$OUT/r; mkdir -p $R/ab
(FP4GEMM_EXP_PIECES=1 FP4GEMM_EXP_DECODE_FRAG=1 timeout 240 $V/gpu_tests_glu --gtest_filter='Moe*' > $R/tests.txt 2>&1; echo "rc $?" >> $R/tests.txt)
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|^rc" $R/tests.txt | head -30
export FP4GEMM_DIGEST=1
for rnd in 1 2; do for side in A B; do
  b=$V/cli_fixed; env="X=1"; [ $side = B ] && b=$V/cli_glu env="FP4GEMM_EXP_PIECES=1"
  for act in nvfp4 bf16; do env $env timeout 150 $b bench --suite moe --act $act --settle-ms 100 --json $R/ab/moe_${act}_${side}$rnd.json > $R/ab/moe_${act}_${side}$rnd.txt 2>&1; done
  env $env timeout 150 $b bench --suite layer --act bf16 --decode-tokens 0 --settle-ms 100 --json $R/ab/layer_${side}$rnd.json > $R/ab/layer_${side}$rnd.txt 2>&1
done; echo "round $rnd [$((SECONDS - t0)) s]"; done
python3 bench/results/v50/probe/ab_compare.py $R/ab > $R/ab/compare.txt 2>&1; cat $R/ab/compare.txt
for i in 3 4 5; do FP4GEMM_EXP_PIECES=1 timeout 100 $V/cli_glu bench --suite layer --act bf16 --decode-tokens 0 --settle-ms 100 > $R/layer_B$i.txt 2>&1
  echo "layer run $i vs main: $(diff <(grep '^digest' $R/ab/layer_A1.txt) <(grep '^digest' $R/layer_B$i.txt) | grep -c '^>') differ"; done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
