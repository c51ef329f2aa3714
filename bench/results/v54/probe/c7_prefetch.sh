#!/usr/bin/env bash
# v54 call 7 (one H200): decode ring + L2 prefetch of each row P chunks ahead (branch decode-prefetch, P = 4 / 8 / 16
# built in) against main (M). Tests + memcheck on P16; layer decode cases bf16 / nvfp4 and `layer` Qwen3 / gpt-oss
# T 2, 4, 2 interleaved rounds.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
mkdir -p /tmp/b && for f in .carry/v54/*.gz; do gunzip -c $f > /tmp/b/$(basename $f .gz); chmod +x /tmp/b/$(basename $f .gz); done
T=/tmp/b/gpu_tests_P16
timeout 100 $T --gtest_filter='MoeLayerDecode*:MoeLayerBiases*:MoeLayerGraph*' > $R/gtest.log 2>&1; echo "gtest rc=$?" | tee -a $R/rc.txt; tail -1 $R/gtest.log
timeout 120 compute-sanitizer --tool memcheck $T --gtest_filter='MoeLayerDecode*' > $R/memcheck.log 2>&1; echo "memcheck rc=$?" | tee -a $R/rc.txt; tail -1 $R/memcheck.log
snap tests
export FP4GEMM_DIGEST=1
for rnd in 1 2; do for side in M P4 P8 P16; do
  for act in bf16 nvfp4; do
    timeout 100 /tmp/b/fp4gemm_$side bench --suite layer --act $act --cases 1,8,9,15,22 --settle-ms 100 > $R/layer_${act}_$side$rnd.txt 2>&1
  done
  for t in 2 4; do
    timeout 60 /tmp/b/fp4gemm_$side layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --iters 100 > $R/q3_t${t}_$side$rnd.txt 2>&1
    timeout 60 /tmp/b/fp4gemm_$side layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai --iters 100 > $R/go_t${t}_$side$rnd.txt 2>&1
  done
  snap "round $rnd $side"
done; done
