#!/usr/bin/env bash
# A/B: the decode kernels' parameters touched at entry by the last warp (fp4gemm_touch) vs main (fp4gemm_base);
# the trace build of the touch variant for its phases. Carry .carry/ab.
set -uo pipefail
R=$OUT/r; mkdir -p $R
for rnd in 1 2 3; do for v in base touch; do
  B=.carry/ab/fp4gemm_$v
  for t in 1 4; do timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai --iters 100 > $R/gptoss_t${t}_${v}_$rnd.txt 2>&1; done
  for t in 1 8; do timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --iters 100 > $R/qwen3_t${t}_${v}_$rnd.txt 2>&1; done
done; done
T=.carry/ab/fp4gemm_trace_touch
timeout 60 $T layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 1 --act bf16 --activation swigluoai --iters 100 > $R/trace_gptoss_t1.txt 2>&1
timeout 60 $T layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 8 --act bf16 --iters 100 > $R/trace_qwen3_t8.txt 2>&1
tar czf $OUT/r.tgz -C $OUT r
cd $R; for c in gptoss_t1 gptoss_t4 qwen3_t1 qwen3_t8; do for v in base touch; do echo "$c $v $(for r in 1 2 3; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-13; done | tr '\n' ' ')"; done; done
grep -h "kernel" trace_*.txt | grep -v GEMM
