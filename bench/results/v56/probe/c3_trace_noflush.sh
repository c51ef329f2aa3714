#!/usr/bin/env bash
# Decode phases with the L2 flush off (code and routing hot in L2; gpt-oss's 51 MB of weights mostly not). Carry .carry/v56.
set -uo pipefail
R=$OUT/r; mkdir -p $R; B=.carry/v56/fp4gemm_trace
for rnd in 1 2; do
  FP4GEMM_NO_FLUSH=1 timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 1 --act bf16 --activation swigluoai --iters 100 > $R/gptoss_t1_nf_$rnd.txt 2>&1
  timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 1 --act bf16 --activation swigluoai --iters 100 > $R/gptoss_t1_$rnd.txt 2>&1
done
tar czf $OUT/r.tgz -C $OUT r
for f in $R/*_1.txt; do echo "== $f"; grep -E "^time|kernel" $f | grep -v GEMM; done
