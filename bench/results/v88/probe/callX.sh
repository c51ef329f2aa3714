#!/usr/bin/env bash
# v88 call X (one H200): ncu per kernel of the variable-group wide path, 06f40ed (vg: GM 2, no phases) against
# 72be8f2 (vg2: GM 3, phases, 4096-pair pre-pass), to find why call W's q16 T 32 / 64 regressed (40.0 -> 49.2,
# 58.9 -> 65.1 us) and why the T 512 cells did not gain. One eager layer run per case; decode kernels only.
# BUNDLE v39: vg/cli (from .carry/v37) and vg2/cli (from .carry/v38), nothing else.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
for B in ${BUNDLES:-v39}; do H=$(md5sum < .carry/$B/b.tar.xz | cut -c1-8)
  [ -f /tmp/done.$H ] || { xz -dc .carry/$B/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked $B [$((SECONDS - t0)) s]"; }; done
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                     qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";;
                     q16) echo "--experts 16 --hidden 2048 --inter 768 --topk 8 --activation silu";;
                     g32) echo "--experts 32 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";; esac; }
MET=gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__grid_size,launch__block_size,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__shared_mem_per_block_dynamic
IFS=';' read -ra CS <<< "${CASES:-vg q16 32 64;vg2 q16 32 64;vg q16 64 64;vg2 q16 64 64;vg g32 128 128;vg2 g32 128 128;vg2 qwen3 512 512;vg2 gptoss 512 512;vg2 qwen3 256 512}"
for cs in "${CS[@]}"; do set -- $cs
  f=$R/ncu_$1_$2_t$3_d$4.txt
  timeout 100 ncu --clock-control none --print-kernel-base function -k regex:"decode|prep" -c 8 --metrics $MET \
    /tmp/$1/cli layer $(shape $2) --tokens $3 --act bf16 --weight-layout pieces --values checkpoint --decode-tokens $4 --iters 1 --warmup 0 > $f 2>&1
  echo "== $cs rc $? [$((SECONDS - t0)) s]"
  grep -E "^  [a-z_]+.*\(|gpu__time|inst_executed|registers|grid_size|dram__|warps_active|shared_mem" $f | sed 's/  */ /g' | head -40
done
tar czf $OUT/${NAME:-x}.tgz -C $OUT r && rm -rf $R; echo "done [$((SECONDS - t0)) s]"
