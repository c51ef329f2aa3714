#!/usr/bin/env bash
# v64 c3 (one H200): (1) branch exp/desc-class (the MoE kernels' 136-160-token classes build their wgmma descriptors
# as 399676a did, without the warp reduction) against A = 399676a and M = main: c0's class sweep and the uniform
# T 1024 cell, 2 rounds; MoE suites W4A4 / W4A16 once A / B with digests; (2) the randomized GPU tier with the fixed
# dual_gemm memo assertion: c2's four failing seeds again, then new batches; (3) B's MoE gtests and memcheck of them.
# Carry .carry/v87 (cli_old, cli_main, B's build laid out by scripts/carry_build.sh).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R/sweep $R/suites; V=/tmp/v87; mkdir -p $V; t0=$SECONDS
xz -dc .carry/v87/bins.tar.xz | tar xf - -C $V
mkdir -p .carry && rm -rf .carry/build .carry/pkg && cp -r $V/build $V/pkg .carry/
side_bin() { case $1 in A) echo $V/cli_old;; M) echo $V/cli_main;; B) echo .carry/build/tools/fp4gemm;; esac; }
for rnd in 1 2; do
  for R_ in 144 160 256 272 296 U U; do
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
export PYTHONPATH=$PWD/.carry/pkg
pids=(); for seed in 400000 400001 200001 500004; do
  FP4GEMM_RANDOM_LONG=100 FP4GEMM_RANDOM_SEED=$seed timeout 200 python3 -m pytest tests/python/test_random_sequences.py -q -rN \
    -p no:cacheprovider -k gpu_random > $R/rerun_$seed.log 2>&1 & pids+=($!); done
for p in "${pids[@]}"; do wait $p; done; grep -h -E "passed|failed" $R/rerun_*.log
echo "rerun [$((SECONDS - t0)) s]"
FP4GEMM_DIGEST=1; export FP4GEMM_DIGEST
for side in A B; do bin=$(side_bin $side)
  for act in nvfp4 bf16; do
    timeout 150 $bin bench --suite moe --act $act --settle-ms 100 --json $R/suites/moe_${act}_${side}1.json > $R/suites/moe_${act}_${side}1.txt 2>&1; done
  echo "suites $side [$((SECONDS - t0)) s]"; done
python3 bench/results/v50/probe/ab_compare.py $R/suites > $R/suites/compare.txt 2>&1; cat $R/suites/compare.txt
tar czf $OUT/r.tgz -C $OUT r
ln -s $PWD/.carry/build /work/main-build 2>/dev/null
timeout 150 .carry/build/tests/fp4gemm_gpu_tests --gtest_brief=1 --gtest_filter='*MoeRandom*:*MoeCombos*:*MoeDeterminism*:*MoeStreamK*:*MoeGlu*:*MoeLayerCases*:*MoePairedMainloop*' > $R/gtests_moe.log 2>&1; echo "moe gtests rc=$?"
grep -E "PASSED|FAILED|SKIPPED" $R/gtests_moe.log | head
RANDOM_SECONDS=$((560 - SECONDS + t0)) RANDOM_LONG=4000 OUT=$R/dc timeout $((580 - SECONDS + t0)) bash scripts/device_carried.sh random 2>&1 | tail -6
echo "done [$((SECONDS - t0)) s]"; tar czf $OUT/r.tgz -C $OUT r
