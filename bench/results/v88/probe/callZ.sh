#!/usr/bin/env bash
# v88 call Z (one H200): vg3 (branch exp/vg-slots + the pre-passes' shared memory off one bank, the variable-group
# kernels' CTA shares weighted by a unit's groups, the wide combine 8 rows per lane) against m1 (main f27528e).
# BUNDLE v40: vg3/{cli,gt,py}, m1/cli. CLI layer, W4A16 pieces, checkpoint scales, L2 flushed, median of 100, 2 rounds.
# A: issue 52's decode cells at the layer's own bound (m1 / vg3); B: the variable-group cells (m1, vg3, gen = vg3 with
# --decode-tokens 8, i.e. the general path past 8 tokens).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";;
                     q16) echo "--experts 16 --hidden 2048 --inter 768 --topk 8 --activation silu";;
                     q32) echo "--experts 32 --hidden 2048 --inter 768 --topk 8 --activation silu";;
                     g16) echo "--experts 16 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     g32) echo "--experts 32 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";; esac; }
one() {  # bin shape T decode-bound(-1: the layer's) file
  local extra=""; [ "$4" != -1 ] && extra="--decode-tokens $4"
  timeout 60 /tmp/$1/cli layer $(shape $2) --tokens $3 --act bf16 --weight-layout pieces --values checkpoint $extra \
    --iters 100 --warmup 10 > $5 2>&1
  grep -oE '^time: [0-9.]+' $5 | cut -d' ' -f2
}
for r in 1 2; do
  for cs in ${ACASES:-"gptoss 8" "gptoss 16" "gptoss 64" "gptoss 128" "qwen3 8" "qwen3 16" "qwen3 32" "qwen3 64"}; do
    set -- $cs; line="A r$r $1 T$2:"
    for v in m1 vg3; do line="$line $v $(one $v $1 $2 -1 $R/a_${v}_$1_t$2_r$r.txt)"; done
    echo "$line"
  done
  for cs in ${BCASES:-"q16 32 64" "q16 64 64" "q32 64 64" "g16 128 128" "g32 128 128" "qwen3 128 512" "qwen3 256 512" "qwen3 512 512" "gptoss 256 512" "gptoss 512 512"}; do
    set -- $cs; line="B r$r $1 T$2:"
    for v in m1 vg3 gen; do b=$v d=$3; [ $v = gen ] && b=vg3 d=8; line="$line $v $(one $b $1 $2 $d $R/b_${v}_$1_t$2_r$r.txt)"; done
    echo "$line $(grep -oE 'up to [0-9] slots' $R/b_vg3_$1_t$2_r$r.txt | head -1)"
  done
done
echo "[$((SECONDS - t0)) s]"
tar czf $OUT/${NAME:-z}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"
