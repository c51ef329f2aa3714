#!/usr/bin/env bash
# v77 n (one H200): is the decode loop bound by its math or by the memory stream? Builds from .carry/$BUNDLE:
# nm (DECODE_NO_MATH: the loop's copies, waits and shared loads without dequantisation / mma), nm6 (the same, 6-stage
# ring), s6 (the real loop, 6-stage ring), b0 (main). Layer suite decode cells, W4A16 pieces, one round each, and ncu
# (time, DRAM bytes, issue) of the fused kernel at gpt-oss T 1 / 8.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; VS=(${VS:-nm nm6 s6 b0})
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
for v in "${VS[@]}"; do
  timeout 100 /tmp/$v/cli bench --suite layer --act bf16 --weight-layout pieces --cases 8,9,15,16,22,23 --no-peers \
    --settle-ms 100 --json $R/layer_$v.json > $R/layer_$v.txt 2>&1 || echo "layer $v FAILED"
  echo "== $v [$((SECONDS - t0)) s]"; grep -E "^[0-9]+ +(qwen|mixtral|gpt)" $R/layer_$v.txt | head -8
done
M='gpu__time_duration.sum,dram__bytes_read.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,lts__t_sectors_srcunit_tex_op_read.sum,sm__cycles_elapsed.avg.per_second'
for T in 1 8; do for v in "${VS[@]}"; do
  timeout 60 ncu --clock-control none --kernel-name regex:decode_fused --launch-skip 2 --launch-count 1 --metrics "$M" \
    /tmp/$v/cli layer --experts 128 --hidden 2880 --inter 2880 --tokens $T --topk 4 --act bf16 --activation swigluoai \
    --weight-layout pieces --iters 2 --warmup 1 > $R/ncu_T${T}_$v.txt 2>&1 || echo "ncu T $T $v FAILED"
  echo "ncu T $T $v: $(grep -E "gpu__time|dram__bytes|issue_active|inst_executed|per_second" $R/ncu_T${T}_$v.txt | awk '{print $1, $(NF-1), $NF}' | tr '\n' ' ')"
done; done
gzip -f $R/*.txt; tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
