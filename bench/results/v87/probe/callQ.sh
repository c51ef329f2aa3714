#!/usr/bin/env bash
# v87 call Q (one H200): the gather micro (bench/micro/gather_rows.cu, binary carried in .carry/v35), then the wide
# decode kernels at T <= 8 (`--decode-tokens 1`) against the fused narrow kernel (default), main f27528e's CLI (m1 in
# BUNDLE v34), W4A16 pieces, checkpoint scales, L2 flushed, median of 100, 2 rounds.
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 240 .carry/v35/gather_rows 100 2>&1 | tee $R/gather_rows.txt
echo "[$((SECONDS - t0)) s]"
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
for r in 1 2; do for n in gptoss qwen3; do for T in 2 4 8; do line="r$r $n T$T:"
  for d in -1 1; do
    f=$R/w_${n}_t${T}_d${d}_r$r.txt
    timeout 60 /tmp/m1/cli layer $(shape $n) --tokens $T --act bf16 --weight-layout pieces --values checkpoint \
      --decode-tokens $d --iters 100 --warmup 10 > $f 2>&1
    line="$line d$d $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
  done; echo "$line"; done; done; done
grep -h "decode path" $R/w_gptoss_t8_d1_r1.txt | head -2
tar czf $OUT/${NAME:-q}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"
