#!/usr/bin/env bash
# v95 call I (one GPU): exp/drain-ilp (il: BUNDLE v95i, il/{cli,gt}; the GLU drain two rows per step) against main's kernels of v93 (m3: v94b, m3/cli).
# In budget order: 1 CLI layer A/B (W4A16 pieces, ROUNDS rounds of 100, builds alternating); 2 digests of the layer
# suite, bf16 (all cases) then nvfp4 (T >= 256), m3 against df (the outputs must be bit-identical); 3 the GLU and
# MoE-layer gtests on df (GT=0 skips).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=$OUT/d; mkdir -p $A
for b in ${BUNDLES-v94b v95i}; do
  H=$(md5sum < .carry/$b/b.tar.xz | cut -c1-8)
  [ -f /tmp/done.$H ] || { xz -dc .carry/$b/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked $b [$((SECONDS - t0)) s]"; }
done
[ -x /tmp/gd/cli ] && [ ! -e /tmp/m3 ] && mkdir -p /tmp/m3 && ln -s /tmp/gd/cli /tmp/m3/cli  # (v94b holds gd/cli = main's v93 kernels)
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
for r in $(seq 1 ${ROUNDS:-1}); do
  IFS=';' read -ra CL <<< "${CELLS:-gptoss 512;gptoss 1024;gptoss 4096;qwen3 512;qwen3 4096}"
  for cs in "${CL[@]}"; do
    set -- $cs; line="r$r $1 T$2:"
    for v in m3 il; do
      f=$A/${v}_$1_t$2_r$r.txt
      timeout 60 /tmp/$v/cli layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint \
        --iters 100 --warmup 10 > $f 2>&1
      line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
    done
    echo "$line [$((SECONDS - t0)) s]"
  done
done
if [ "${DIG:-1}" = 1 ]; then
  for s in "layer bf16" "layer nvfp4" "dual -"; do
    set -- $s; args="--suite $1"; [ "$2" != - ] && args="$args --act $2 --weight-layout pieces"
    [ "$2" = nvfp4 ] && args="$args --cases 5,6,7,12,13,14,19,20,21,26,27,28"
    for v in m3 il; do
      FP4GEMM_DIGEST=1 timeout 100 /tmp/$v/cli bench $args --no-peers > $A/suite_$1_$2_$v.txt 2>&1
      echo "suite $1 $2 $v rc $? [$((SECONDS - t0)) s]"
      grep -i "digest" $A/suite_$1_$2_$v.txt | sed 's/  */ /g' > /tmp/d_$v
      grep -E "^(dual)?[0-9]+ " $A/suite_$1_$2_$v.txt | awk '{print $1, $2, $3, $4, $5}' > /tmp/t_$v
    done
    echo "digests $1 $2: $(wc -l < /tmp/d_m3) / $(wc -l < /tmp/d_il) lines, differing: $(diff /tmp/d_m3 /tmp/d_il | grep -c '^<')"
    paste -d" " /tmp/t_m3 /tmp/t_il | awk '{printf "%s %s:%s", $1, $3, $5 "->" $10 " "} END {print ""}'
  done
fi
if [ "${GT:-1}" = 1 ]; then
  timeout ${GTT:-90} /tmp/il/gt --gtest_filter="${GF:-GluDevice.*:MoeGluShapes.ModelShapedTilesAndBothHeights:MoeGluShapes.StreamKSplitTiles:MoeLayer*}" > $A/gt.txt 2>&1
  echo "gt rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $A/gt.txt | head -14
fi
gzip -f $A/*.txt; tar czf $OUT/${NAME:-i}.tgz -C $OUT i && rm -rf $A; echo "done [$((SECONDS - t0)) s]"
