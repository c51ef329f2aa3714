#!/usr/bin/env bash
# v54 call 9 (one H200): main bb82931 (the routing parts force-inlined, no stack) -- routing / layer GPU tests and
# memcheck of the grid routing test -- and the grid routing's threshold: G8 = main (>= 8192 ids), G4 = the same with
# >= 4096, on `layer` runs with 4096-6144 ids (Qwen3 T 512 / 768, gpt-oss T 1024 / 1536), 2 interleaved rounds.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
T=.carry/v54/gpu_tests
timeout 200 $T --gtest_filter='AlignRouting*:MoeRouting*:MoeLayer*' > $R/gtest.log 2>&1; echo "gtest rc=$?" | tee -a $R/rc.txt; tail -1 $R/gtest.log
timeout 120 compute-sanitizer --tool memcheck $T --gtest_filter='AlignRoutingRows*:AlignRouting.LargestRoutings' > $R/memcheck.log 2>&1; echo "memcheck rc=$?" | tee -a $R/rc.txt; tail -1 $R/memcheck.log
snap tests
for rnd in 1 2; do for side in G8 G4; do
  for t in 512 768; do
    timeout 60 .carry/v54/fp4gemm_$side layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --iters 100 > $R/q3_t${t}_$side$rnd.txt 2>&1
  done
  for t in 1024 1536; do
    timeout 60 .carry/v54/fp4gemm_$side layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai --iters 100 > $R/go_t${t}_$side$rnd.txt 2>&1
  done
  snap "round $rnd $side"
done; done
