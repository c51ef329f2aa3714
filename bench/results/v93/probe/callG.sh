#!/usr/bin/env bash
# v93 call G (one H200): exp/glu-drain (gd) against main's kernels (m1): BUNDLES="v93m v93g" unpacks both.
# 1: the GLU device tests and the GLU / dual / MoE-layer gtests on gd (GT=0 skips); 2: CLI layer A/B, W4A16 pieces,
# builds alternating, ROUNDS rounds of 100; 3: digests of the layer suite (bf16 all cases, nvfp4 T >= 256) and the
# dual suite, m1 against gd (DIG=0 skips).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=$OUT/g; mkdir -p $A
for b in ${BUNDLES:-$BUNDLE}; do  # (v93m: m1/cli; v93g: gd/{cli,gt} -- both fit one carry)
  H=$(md5sum < .carry/$b/b.tar.xz | cut -c1-8)
  [ -f /tmp/done.$H ] || { xz -dc .carry/$b/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked $b [$((SECONDS - t0)) s]"; }
done
[ -x /tmp/m1/cli ] || { echo "no /tmp/m1/cli (carry .carry/v93m)"; exit 3; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -14; }
if [ "${GT:-1}" = 1 ]; then
  timeout ${GTT:-200} /tmp/gd/gt --gtest_filter="${GF:-GluDevice.*:MoeGluShapes.*:MoeGluPiecesShapes.*:DualGemm*:MoeLayer*}" > $A/gt.txt 2>&1
  echo "gt rc $? [$((SECONDS - t0)) s]"; gsum $A/gt.txt
fi
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
for r in $(seq 1 ${ROUNDS:-2}); do
  IFS=';' read -ra CL <<< "${CELLS:-gptoss 512;gptoss 1024;gptoss 4096;qwen3 512;qwen3 4096}"
  for cs in "${CL[@]}"; do
    set -- $cs; line="r$r $1 T$2:"
    for v in ${VARS:-m1 gd}; do
      f=$A/${v}_$1_t$2_r$r.txt
      timeout 90 /tmp/$v/cli layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint \
        --iters 100 --warmup 10 > $f 2>&1
      line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
    done
    echo "$line [$((SECONDS - t0)) s]"
  done
done
if [ "${DIG:-1}" = 1 ]; then
  for s in "layer bf16" "layer nvfp4" "dual -"; do
    set -- $s; args="--suite $1"; [ $1 = layer ] && args="$args --act $2 --weight-layout pieces"
    [ "$2" = nvfp4 ] && args="$args --cases 5,6,7,12,13,14,19,20,21,26,27,28"
    for v in m1 gd; do
      FP4GEMM_DIGEST=1 timeout 200 /tmp/$v/cli bench $args --no-peers > $A/suite_$1_$2_$v.txt 2>&1
      echo "suite $1 $2 $v rc $? [$((SECONDS - t0)) s]"
      grep -i "digest" $A/suite_$1_$2_$v.txt | sed 's/  */ /g' > /tmp/d_$v
    done
    echo "digests $1 $2: $(wc -l < /tmp/d_m1) / $(wc -l < /tmp/d_gd) lines, differing: $(diff /tmp/d_m1 /tmp/d_gd | grep -c '^<')"
  done
fi
gzip -f $A/*.txt; tar czf $OUT/${NAME:-g}.tgz -C $OUT g && rm -rf $A; echo "done [$((SECONDS - t0)) s]"
