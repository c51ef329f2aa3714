#!/usr/bin/env bash
# A/B: decode kernels with 12 warps per CTA and a 4- or 5-deep ring (fp4gemm_w12s4 / _w12s5; 168 registers a thread
# allowed) vs main (16 warps, 3 deep). Digests of two layer-suite decode cases, then layer timings. Carry .carry/ab.
set -uo pipefail
R=$OUT/r; mkdir -p $R
for v in base w12s4 w12s5; do
  FP4GEMM_DIGEST=1 timeout 120 .carry/ab/fp4gemm_$v bench --suite layer --act bf16 --cases 8,9,15 --no-peers --iters 10 > $R/suite_$v.txt 2>&1
done
for v in w12s4 w12s5; do diff <(grep -i digest $R/suite_base.txt) <(grep -i digest $R/suite_$v.txt) > /dev/null && echo "$v digests identical ($(grep -ci digest $R/suite_base.txt))" || echo "$v DIGESTS DIFFER"; done
for rnd in 1 2; do for v in base w12s4 w12s5; do
  B=.carry/ab/fp4gemm_$v
  for t in 1 4; do timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai --iters 100 > $R/gptoss_t${t}_${v}_$rnd.txt 2>&1; done
  timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 1 --act nvfp4 --activation swigluoai --iters 100 > $R/gptossnv_t1_${v}_$rnd.txt 2>&1
  for t in 1 8; do timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --iters 100 > $R/qwen3_t${t}_${v}_$rnd.txt 2>&1; done
done; done
tar czf $OUT/r.tgz -C $OUT r
cd $R; for c in gptoss_t1 gptoss_t4 gptossnv_t1 qwen3_t1 qwen3_t8; do for v in base w12s4 w12s5; do echo "$c $v $(for r in 1 2; do grep -E '^time' ${c}_${v}_$r.txt | cut -c7-13; done | tr '\n' ' ')"; done; done
