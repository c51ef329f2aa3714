#!/usr/bin/env bash
# v84 call D (one H200, carry .carry/v27: p1 = main + the decode_tokens bound relaxed to 512 in the library's validation
# and the CLI): the wide kernels past 64 tokens at gpt-oss-120b's shape (E 128, top-4: up to 128 tokens = the wide path's
# 512 pairs), W4A16 on pieces and on rows, W4A4 MXFP4 and NVFP4 on pieces, against the general path (--decode-tokens 8);
# CLI layer, checkpoint-like scales, L2 flushed, graph replay, median of 100, 2 rounds.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/${BUNDLE:-v27}/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/${BUNDLE:-v27}/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
V=${V:-p1}
sh="--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"
for r in 1 2; do for cfg in "bf16 pieces" "bf16 rows" "mxfp4 pieces" "nvfp4 pieces"; do set -- $cfg
  for T in ${TS:-72 96 112 128}; do
    line="r$r $1 $2 T$T:"
    for d in 8 $T; do f=$R/$1_$2_t${T}_d${d}_r$r.txt
      /tmp/$V/cli layer $sh --tokens $T --act $1 --weight-layout $2 --values checkpoint --decode-tokens $d \
        --iters 100 --warmup 10 > $f 2>&1
      line="$line d$d $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
    done
    echo "$line $(grep -o 'wide decode path for T <= [0-9]*' $R/$1_$2_t${T}_d${T}_r$r.txt)$(grep -m1 -i error $R/$1_$2_t${T}_d${T}_r$r.txt)"
  done
done; done
tar czf $OUT/${NAME:-d_gptoss_wide}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
