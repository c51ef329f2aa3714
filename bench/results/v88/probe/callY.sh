#!/usr/bin/env bash
# v88 call Y (one H200): vg (06f40ed) against vg2 (72be8f2) at q16 T 32 (--decode-tokens 64): same instructions in
# kernel 1, +47 % time (call X). Per-SM spread of cycles and instructions (imbalance?) and the warp stall reasons.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
for B in ${BUNDLES:-v39}; do H=$(md5sum < .carry/$B/b.tar.xz | cut -c1-8)
  [ -f /tmp/done.$H ] || { xz -dc .carry/$B/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked $B [$((SECONDS - t0)) s]"; }; done
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     q16) echo "--experts 16 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
MET=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_active.min,sm__inst_executed.max,sm__inst_executed.min,sm__inst_executed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,lts__t_bytes.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
IFS=';' read -ra CS <<< "${CASES:-vg q16 32 64;vg2 q16 32 64;vg2 gptoss 512 512}"
for cs in "${CS[@]}"; do set -- $cs
  f=$R/ncu_$1_$2_t$3_d$4.txt
  timeout 150 ncu --clock-control none --print-kernel-base function -k regex:"decode_gate_up" -c 1 --metrics $MET --section WarpStateStats \
    /tmp/$1/cli layer $(shape $2) --tokens $3 --act bf16 --weight-layout pieces --values checkpoint --decode-tokens $4 --iters 1 --warmup 0 > $f 2>&1
  echo "== $cs rc $? [$((SECONDS - t0)) s]"
  sed -n '/decode_gate_up (/,$p' $f | grep -vE "^ *-+|Section|Metric Name|^ *$|WRN|----" | sed 's/  */ /g' | head -60
done
tar czf $OUT/${NAME:-y}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"
