#!/usr/bin/env bash
# v71 b (one H200): branch exp/four-wg's CLI (.carry/v114c): the layer on weights in pieces at T 32 / 64 for
# gpt-oss-120b (W4A16, swigluoai) and Qwen3-30B-A3B (W4A16), four consumer warpgroups (the default for T <= 64 now)
# against two (FP4GEMM_CONSUMER_WARPGROUPS=2), alternating, 3 rounds, with digests; then the W4A16 layer
# suite on pieces, both ways.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
C=/tmp/v114c; mkdir -p $C; [ -x $C/fp4gemm ] || { xz -dc .carry/v114c/fp4gemm.xz > $C/fp4gemm; chmod +x $C/fp4gemm; }
export FP4GEMM_DIGEST=1
for rnd in 1 2 3; do
  for t in 32 64; do
    for wg in 4 2; do
      FP4GEMM_CONSUMER_WARPGROUPS=$wg timeout 60 $C/fp4gemm layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens $t --act bf16 \
        --activation swigluoai --weight-layout pieces --iters 100 --json $R/gptoss_t${t}_wg${wg}_r$rnd.json > $R/gptoss_t${t}_wg${wg}_r$rnd.txt 2>&1
      FP4GEMM_CONSUMER_WARPGROUPS=$wg timeout 60 $C/fp4gemm layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens $t --act bf16 \
        --weight-layout pieces --iters 100 --json $R/qwen3_t${t}_wg${wg}_r$rnd.json > $R/qwen3_t${t}_wg${wg}_r$rnd.txt 2>&1
    done
  done
  echo "round $rnd [$((SECONDS - t0)) s]"
done
for f in $R/gptoss_t*_r1.txt $R/qwen3_t*_r1.txt; do echo "$(basename $f): $(grep -E '^time|median' $f | head -1)"; done
for act in bf16; do for wg in 4 2; do
  FP4GEMM_CONSUMER_WARPGROUPS=$wg timeout 100 $C/fp4gemm bench --suite layer --act $act --weight-layout pieces --settle-ms 100 --json $R/layer_${act}_wg$wg.json > $R/layer_${act}_wg$wg.txt 2>&1
  echo "layer $act wg$wg rc $? [$((SECONDS - t0)) s]"
done; done
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
