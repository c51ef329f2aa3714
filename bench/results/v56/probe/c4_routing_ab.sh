#!/usr/bin/env bash
# A/B: decode kernels' routing read, old (smem loops) vs new (warp 0, fixed-bound loops + ballots); trace CLIs
# with fine stamps. Digests + the CLI's check. Carry .carry/v56.
set -uo pipefail
R=$OUT/r; mkdir -p $R
for rnd in 1 2; do for v in old new; do
  B=.carry/v56/fp4gemm_trace; [ $v = new ] && B=.carry/v56/fp4gemm_trace_new
  for t in 1 4; do FP4GEMM_DIGEST=1 timeout 60 $B layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 --activation swigluoai --iters 100 > $R/gptoss_t${t}_${v}_$rnd.txt 2>&1; done
  for t in 1 2 8; do FP4GEMM_DIGEST=1 timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 --iters 100 > $R/qwen3_t${t}_${v}_$rnd.txt 2>&1; done
  FP4GEMM_DIGEST=1 timeout 60 $B layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 4 --act nvfp4 --iters 100 > $R/qwen3nv_t4_${v}_$rnd.txt 2>&1
done; done
tar czf $OUT/r.tgz -C $OUT r
cd $R; for f in *_1.txt; do echo "$f $(grep -E '^time' $f | cut -c1-40) $(grep -ci 'digest' $f) $(grep -iE 'error|fail|mismatch' $f | head -2)"; done
for f in *_old_1.txt; do n=${f/_old_/_new_}; diff <(grep -i digest $f) <(grep -i digest $n) > /dev/null && echo "$f digests same" || echo "$f DIGESTS DIFFER"; done
