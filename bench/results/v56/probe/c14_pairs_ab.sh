#!/usr/bin/env bash
# A/B: decode kernels with paired loads (4 rows x 128 B per load + lane exchange; fp4gemm_pairs) vs main 3e52ed8
# (fp4gemm_base). Digests of the layer suite's decode cases (bit-identical expected), then layer timings. Carry .carry/ab.
set -uo pipefail
R=$OUT/r; mkdir -p $R
for v in base pairs; do
  for act in bf16 nvfp4; do
    FP4GEMM_DIGEST=1 timeout 120 .carry/ab/fp4gemm_$v bench --suite layer --act $act --cases 1,8,9,15,16,22 --no-peers --iters 20 > $R/suite_${act}_$v.txt 2>&1
  done
done
tar czf $OUT/r.tgz -C $OUT r
for act in bf16 nvfp4; do diff <(grep -i digest $R/suite_${act}_base.txt) <(grep -i digest $R/suite_${act}_pairs.txt) > /dev/null && echo "$act digests identical ($(grep -ci digest $R/suite_${act}_base.txt))" || echo "$act DIGESTS DIFFER"; done
for rnd in 1 2; do for v in base pairs; do
  B=.carry/ab/fp4gemm_$v
  for t in 1 2 4; do timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai --iters 100 > $R/gptoss_t${t}_${v}_$rnd.txt 2>&1; done
  timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 1 --act nvfp4 --activation swigluoai --iters 100 > $R/gptossnv_t1_${v}_$rnd.txt 2>&1
  for t in 1 2 4 8; do timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --iters 100 > $R/qwen3_t${t}_${v}_$rnd.txt 2>&1; done
  timeout 60 $B layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --tokens 1 --act bf16 --iters 100 > $R/mixtral_t1_${v}_$rnd.txt 2>&1
done; done
tar czf $OUT/r.tgz -C $OUT r
cd $R; for c in gptoss_t1 gptoss_t2 gptoss_t4 gptossnv_t1 qwen3_t1 qwen3_t2 qwen3_t4 qwen3_t8 mixtral_t1; do for v in base pairs; do echo "$c $v $(for r in 1 2; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-13; done | tr '\n' ' ')"; done; done
