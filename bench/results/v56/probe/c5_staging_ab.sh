#!/usr/bin/env bash
# A/B: new routing (new) vs + batched token staging (new2); and the decode bound for gpt-oss T 6 / 8 (decode path forced
# vs the layer's default). Carry .carry/v56.
set -uo pipefail
R=$OUT/r; mkdir -p $R
for rnd in 1 2; do for v in new new2; do
  B=.carry/v56/fp4gemm_trace_$v
  for t in 1 4; do timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai --iters 100 > $R/gptoss_t${t}_${v}_$rnd.txt 2>&1; done
  for t in 1 8; do timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --iters 100 > $R/qwen3_t${t}_${v}_$rnd.txt 2>&1; done
done
B=.carry/v56/fp4gemm_trace_new2
for t in 6 8; do for d in -1 8; do
  timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai --iters 100 --decode-tokens $d > $R/gptoss_t${t}_d${d}_$rnd.txt 2>&1
  timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act nvfp4 --activation swigluoai --iters 100 --decode-tokens $d > $R/gptossnv_t${t}_d${d}_$rnd.txt 2>&1
done; done
for t in 8; do for d in -1 0; do
  timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --iters 100 --decode-tokens $d > $R/qwen3_t${t}_d${d}_$rnd.txt 2>&1
done; done
tar czf $OUT/r.tgz -C $OUT r
done
cd $R; for f in *.txt; do echo "$f $(grep -E '^time' $f | cut -c7-20) $(grep -E 'decode path for' $f | grep -o 'decode path for T <= [0-9]*\|general path[^;]*' | head -1) $(grep -iE 'error|fail|mismatch' $f | head -2)"; done
