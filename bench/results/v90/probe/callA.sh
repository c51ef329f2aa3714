#!/usr/bin/env bash
# v90 call A (one H200): exp/wide-stages 6ff7508 (ws: device code of 4d6717d -- the odd last k-block inside the pair
# loop with a full drain, the 144-token one-half class off pairs) and exp/producer-sleep2 (ps: ws + the producers'
# 20 us suspend hint on `empty`), against main's kernels (m1 = /tmp/c9/cli, unpacked by call U).
# 1: CLI layer W4A16 pieces at issue 52's general-path cells and neighbours, builds alternating, 2 rounds.
# 2: layer suite digests (FP4GEMM_DIGEST=1), W4A16 pieces all cases and NVFP4 W4A4 pieces T >= 256, m1 and ws.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=$OUT/ab; mkdir -p $A
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
if [[ " ${VARS:-m1 ws ps} " == *" m1 "* ]]; then  # (m1: main's CLI, unpacked by call U)
  [ -x /tmp/c9/cli ] || { echo "no /tmp/c9/cli (call U did not run on this machine)"; exit 3; }
  mkdir -p /tmp/m1 && ln -sf /tmp/c9/cli /tmp/m1/cli
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
for r in $(seq 1 ${ROUNDS:-2}); do
  IFS=';' read -ra CL <<< "${CELLS:-gptoss 256;gptoss 512;gptoss 1024;gptoss 4096;qwen3 128;qwen3 256;qwen3 512;qwen3 4096}"
  for cs in "${CL[@]}"; do
    set -- $cs; line="r$r $1 T$2:"
    for v in ${VARS:-m1 ws ps}; do
      f=$A/${v}_$1_t$2_r$r.txt
      [ -x /tmp/$v/cli ] || { echo "no /tmp/$v/cli"; exit 3; }
      timeout 90 /tmp/$v/cli layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint \
        --iters 100 --warmup 10 > $f 2>&1
      line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
    done
    echo "$line [$((SECONDS - t0)) s]"
  done
done
for act in ${ACTS-bf16 nvfp4}; do
  cases=""; [ $act = nvfp4 ] && cases="--cases 5,6,7,12,13,14,19,20,21,26,27,28"
  for v in m1 ws; do
    FP4GEMM_DIGEST=1 timeout 200 /tmp/$v/cli bench --suite layer --act $act --weight-layout pieces $cases --no-peers \
      > $A/suite_${act}_$v.txt 2>&1; echo "suite $act $v rc $? [$((SECONDS - t0)) s]"
  done
  grep -i "digest" $A/suite_${act}_m1.txt | sed 's/  */ /g' > /tmp/d_m1; grep -i "digest" $A/suite_${act}_ws.txt | sed 's/  */ /g' > /tmp/d_ws
  echo "digests $act: $(wc -l < /tmp/d_m1) / $(wc -l < /tmp/d_ws) lines, differing: $(diff /tmp/d_m1 /tmp/d_ws | grep -c '^<')"
  head -2 /tmp/d_ws
done
tar czf $OUT/${NAME:-a}.tgz -C $OUT ab && rm -rf $A; echo "done [$((SECONDS - t0)) s]"
