#!/usr/bin/env bash
# For the next session (one H200, ~1 min): where the decode path's time goes on today's kernels. The trace CLI
# .carry/v55/fp4gemm_trace is main 73e0541's tools/fp4gemm with decode_layer.cu compiled with FP4GEMM_TRACE (the
# decode stamps only; built on the CPU machine, strip --strip-debug). `fp4gemm layer` prints the phase table after its
# timing: per kernel, entry / routing read / first ring loads issued (kernel 2: past its wait) / stream-K done / exit,
# median and latest over warps, us from kernel 1's first entry (eager runs, L2 flushed). Carry .carry/v55 only.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; B=.carry/v55/fp4gemm_trace
for rnd in 1 2; do
  for t in 1 2 4; do
    timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai \
      --iters 100 > $R/gptoss_t${t}_$rnd.txt 2>&1
    timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --iters 100 > $R/qwen3_t${t}_$rnd.txt 2>&1
  done
  timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 1 --act nvfp4 --activation swigluoai \
    --iters 100 > $R/gptoss_nvfp4_t1_$rnd.txt 2>&1
  tar czf $OUT/r.tgz -C $OUT r
done
grep -h -A12 "decode trace" $R/*_1.txt | head -80
