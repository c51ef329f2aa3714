#!/usr/bin/env bash
# v88 call N (one H200): ncu time of the wide path's pre-pass and combine, m1 (main f27528e) against vg3 (odd-stride
# masks, the combine 8 rows per lane). BUNDLE v40.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
for cs in "qwen3 16" "qwen3 64" "gptoss 16" "gptoss 128"; do set -- $cs
  line="$1 T$2:"
  for v in m1 vg3; do
    f=$R/ncu_${v}_$1_t$2.txt
    timeout 100 ncu --clock-control none --print-kernel-base function -k regex:"decode_wide_prep|decode_wide_combine" -c 6 \
      --metrics gpu__time_duration.sum,smsp__inst_executed.sum /tmp/$v/cli layer $(shape $1) --tokens $2 --act bf16 \
      --weight-layout pieces --values checkpoint --iters 2 --warmup 0 > $f 2>&1
    line="$line $v $(grep -E '^  decode|gpu__time' $f | sed 's/  */ /g' | paste - - | awk '{printf "%s %s ", $1, $NF}')"
  done
  echo "$line"
done
tar czf $OUT/${NAME:-n}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"
