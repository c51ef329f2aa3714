#!/usr/bin/env bash
# v81, prepared for the next session (not run): ncu of the wide decode path's four kernels (pre-pass, kernel 1,
# kernel 2, combine) at gpt-oss-120b T 64, W4A16 on pieces, blocked against linear scales (--decode-tokens 64 forces
# the wide path with linear scales, which the default no longer takes), and the general path's two GEMMs beside them.
# What to read: per kernel duration, DRAM throughput, instructions per 1 KB chunk (inst_executed / chunks), L1 hit
# rate of global loads (the linear-scale guess: the codes' L1 hits fall as the staging grows), issue activity.
# BUNDLE: .carry/<tag> holding /tmp/<M>/cli. One call, ~3 min.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; M=${M:-c3}
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MET="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__t_sector_hit_rate.pct,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,launch__shared_mem_per_block_dynamic"
for v in "blocked 64" "linear 64" "blocked 8" "linear 8"; do set -- $v
  f=$R/ncu_$1_d$2.txt
  timeout 150 ncu --clock-control none -k regex:"decode|fused|prepass|combine|routing" -s 20 -c 12 --metrics $MET \
    /tmp/$M/cli layer --experts 128 --hidden 2880 --inter 2880 --tokens 64 --topk 4 --activation swigluoai --act bf16 \
    --weight-layout pieces --scales $1 --decode-tokens $2 --iters 3 --warmup 2 > $f 2>&1
  echo "== scales $1, decode_tokens $2: rc $? [$((SECONDS - t0)) s]"
  grep -E "^  [a-z_].*\(|gpu__time|dram__throughput|inst_executed|issue_active|sector_hit|lookup_(hit|miss)|stalled|shared_mem" $f |
    sed 's/  */ /g' | head -80
done
find $R -name '*.txt' | xargs gzip -f 2>/dev/null
tar czf $OUT/${NAME:-ncu_wide}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
