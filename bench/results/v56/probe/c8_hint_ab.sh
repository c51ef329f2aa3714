#!/usr/bin/env bash
# A/B: weights L2::256B (new2) vs L2::128B (new3) vs + codes without an L2 hint (new4). Carry .carry/v56.
set -uo pipefail
R=$OUT/r; mkdir -p $R
for rnd in 1 2 3; do for v in new2 new3 new4; do
  B=.carry/v56/fp4gemm_trace_$v
  for t in 1 4; do timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai --iters 100 > $R/gptoss_t${t}_${v}_$rnd.txt 2>&1; done
  timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 1 --act nvfp4 --activation swigluoai --iters 100 > $R/gptossnv_t1_${v}_$rnd.txt 2>&1
  for t in 1 8; do timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --iters 100 > $R/qwen3_t${t}_${v}_$rnd.txt 2>&1; done
  timeout 60 $B layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --tokens 1 --act bf16 --iters 100 > $R/mixtral_t1_${v}_$rnd.txt 2>&1
done; done
tar czf $OUT/r.tgz -C $OUT r
cd $R; for c in gptoss_t1 gptoss_t4 gptossnv_t1 qwen3_t1 qwen3_t8 mixtral_t1; do for v in new2 new3 new4; do echo "$c $v $(for r in 1 2 3; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-13; done | tr '\n' ' ') $(grep -ciE 'error|fail|mismatch' ${c}_${v}_1.txt)"; done; done
