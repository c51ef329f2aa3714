#!/usr/bin/env bash
# v84 call C (one H200, carry .carry/v26, p0 = main's CLI): how far the wide decode kernels scale past the default bound
# of 64 tokens and past one slot per expert -- the question for issue 52's T 512 cells (gpt-oss-120b 2048 pairs, ~16 per
# expert; Qwen3-30B-A3B 4096, ~32 per expert), which the wide path (<= 512 pairs, slots of <= 8 pairs) cannot take
# today. Wide (--decode-tokens T) against the general path (--decode-tokens 8), CLI layer W4A16 pieces, checkpoint-like
# scales, L2 flushed, graph replay, median of 100, 2 rounds. Fewer experts at the same dims give more pairs per expert:
# gpt-oss dims E 32 T 128 = 16 pairs per expert (2 slots each, as at T 512 with E 128), Qwen3 dims E 32 T 64 = 16, E 16
# T 64 = 32 (4 slots each, as at T 512).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/${BUNDLE:-v26}/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/${BUNDLE:-v26}/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
V=${V:-p0}
go="gptoss 128 96;gptoss 128 128;gptoss 32 128;gptoss 64 128;qwen3 32 64;qwen3 16 64;qwen3 64 64"
IFS=';' read -ra CS <<< "${CASES:-$go}"
for r in 1 2; do for cs in "${CS[@]}"; do set -- $cs
  case $1 in gptoss) sh="--hidden 2880 --inter 2880 --topk 4 --activation swigluoai";; qwen3) sh="--hidden 2048 --inter 768 --topk 8 --activation silu";; esac
  line="r$r $1 E$2 T$3:"
  for d in 8 $3; do f=$R/$1_e$2_t$3_d${d}_r$r.txt
    /tmp/$V/cli layer --experts $2 $sh --tokens $3 --act bf16 --weight-layout pieces --values checkpoint --decode-tokens $d \
      --iters 100 --warmup 10 > $f 2>&1
    line="$line d$d $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
  done
  echo "$line $(grep -o 'wide decode path for T <= [0-9]*' $R/$1_e$2_t$3_d$3_r$r.txt)"
done; done
tar czf $OUT/${NAME:-c_scale}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
