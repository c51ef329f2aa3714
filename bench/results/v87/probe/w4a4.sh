#!/usr/bin/env bash
# v87 call W (one H200): issue 52's cells on W4A4 NVFP4 (and W4A16 as the control), CLI `layer`, weights in pieces,
# checkpoint-like scales, L2 flushed, graph replay, median of 100, ROUNDS rounds; main f27528e's CLI (m1 in BUNDLE v34).
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
for r in $(seq 1 ${ROUNDS:-2}); do for n in gptoss qwen3; do for T in 1 8 64 512 4096; do line="r$r $n T$T:"
  for act in nvfp4 bf16; do
    f=$R/${act}_${n}_t${T}_r$r.txt
    timeout 60 /tmp/m1/cli layer $(shape $n) --tokens $T --act $act --weight-layout pieces --values checkpoint \
      --iters 100 --warmup 10 --json $R/${act}_${n}_t${T}_r$r.json > $f 2>&1
    line="$line $act $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
  done; echo "$line"; done; done; done
tar czf $OUT/${NAME:-w4a4}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"
