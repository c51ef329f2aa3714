#!/usr/bin/env bash
# Finer decode phase trace (uncommitted stamps: staged, cta share, cursor, ring issued, first chunk done). Carry .carry/v56.
set -uo pipefail
R=$OUT/r; mkdir -p $R; B=.carry/v56/fp4gemm_trace
for rnd in 1 2; do
  timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 1 --act bf16 --activation swigluoai --iters 100 > $R/gptoss_t1_$rnd.txt 2>&1
  timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 1 --act bf16 --iters 100 > $R/qwen3_t1_$rnd.txt 2>&1
  timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 8 --act bf16 --iters 100 > $R/qwen3_t8_$rnd.txt 2>&1
done
tar czf $OUT/r.tgz -C $OUT r
for f in $R/*_1.txt; do echo "== $f"; grep -E "^time|kernel" $f | grep -v GEMM; done
