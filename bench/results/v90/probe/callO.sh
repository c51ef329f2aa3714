#!/usr/bin/env bash
# v90 call O (one H200), two parts on one warm machine (two CLIs' bundles do not fit one carry):
# PART=1 (carry .carry/v47c): unpack 742b769's CLI (v89's measured form: the odd last k-block after the pair loop,
#   the 144-token class on pairs) to /tmp/old.
# PART=2 (carry .carry/v48b): 6ff7508's CLI (main's kernels since the merge: the odd last k-block inside the loop with
#   a drain, the 144-token class off pairs) against it, alternating, 3 rounds: is v90's ~1.7 % at gpt-oss T 512 real?
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS
if [ "${PART:-1}" = 1 ]; then
  rm -rf /tmp/oldx && mkdir -p /tmp/oldx && xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp/oldx ws/cli && mkdir -p /tmp/old \
    && mv /tmp/oldx/ws/cli /tmp/old/cli && ls -la /tmp/old/cli; echo "done [$((SECONDS - t0)) s]"; exit 0
fi
[ -x /tmp/old/cli ] || { echo "no /tmp/old/cli (part 1 did not run on this machine)"; exit 3; }
rm -rf /tmp/newx && mkdir -p /tmp/newx /tmp/new && xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp/newx ws/cli && mv /tmp/newx/ws/cli /tmp/new/cli
A=$OUT/ab; mkdir -p $A
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
for r in 1 2 3; do
  for cs in "gptoss 512" "gptoss 1024" "qwen3 256" "qwen3 512"; do
    set -- $cs; line="r$r $1 T$2:"
    for v in old new; do
      f=$A/${v}_$1_t$2_r$r.txt
      timeout 60 /tmp/$v/cli layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint \
        --iters 100 --warmup 10 > $f 2>&1
      line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
    done
    echo "$line [$((SECONDS - t0)) s]"
  done
done
tar czf $OUT/${NAME:-o}.tgz -C $OUT ab && rm -rf $A; echo "done [$((SECONDS - t0)) s]"
