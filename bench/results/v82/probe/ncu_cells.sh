#!/usr/bin/env bash
# v82: ncu per kernel at issue 52's decode cells (W4A16 on pieces, checkpoint-like scale codes as tk_layer's weights):
# gpt-oss-120b T 1 / 8 / 64 and Qwen3-30B-A3B T 1 / 8 / 64 with blocked scales, and gpt-oss T 64's wide path with
# linear scales (--decode-tokens 64 forces it). Per kernel: duration, DRAM rate, instructions, issue activity, L1 hit
# rate of global loads, stall shares. Also the CLI's timing of each case without ncu.
# BUNDLE: .carry/<tag> holding /tmp/<M>/cli. One call, ~4 min.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R; M=${M:-c3}
H=$(md5sum < .carry/$BUNDLE/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/$BUNDLE/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MET="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg,l1tex__t_sector_hit_rate.pct,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_not_selected_per_warp_active.pct,smsp__warp_issue_stalled_no_instruction_per_warp_active.pct,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic"
CASES=${CASES:-"gptoss 1 blocked -1;gptoss 8 blocked -1;gptoss 64 blocked -1;gptoss 64 linear 64;qwen3 1 blocked -1;qwen3 8 blocked -1;qwen3 64 blocked -1"}
IFS=';' read -ra CS <<< "$CASES"
for cs in "${CS[@]}"; do set -- $cs
  case $1 in gptoss) SH="--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
             qwen3) SH="--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac
  A="$SH --tokens $2 --act bf16 --weight-layout pieces --values checkpoint --scales $3 --decode-tokens $4"
  f=$R/ncu_$1_t$2_$3_d$4.txt
  /tmp/$M/cli layer $A --iters 100 --warmup 10 > $R/time_$1_t$2_$3_d$4.txt 2>&1
  echo "== $cs: $(grep -iE 'median|us' $R/time_$1_t$2_$3_d$4.txt | head -3 | tr '\n' ' ')"
  timeout 200 ncu --clock-control none --cache-control all --print-kernel-base function -k regex:"decode|fused|prep|combine|routing|quant|align|padding" -s 30 -c 14 --metrics $MET \
    /tmp/$M/cli layer $A --iters 12 --warmup 4 > $f 2>&1
  echo "   ncu rc $? [$((SECONDS - t0)) s]"
  python3 - "$f" <<'PY'
import re,sys
cur=None; rows=[]
for l in open(sys.argv[1]):
    m=re.match(r'^  (\S.*?)\s*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)',l)
    if m: cur={'k':m.group(1)[:90]}; rows.append(cur); continue
    m=re.match(r'^\s+(\S+)\s+(?:(\S+)\s+)?([\d,.]+)\s*$',l)
    if m and cur is not None: cur[m.group(1)]=m.group(3).replace(',','')
seen=set()
for r in rows:
    if r['k'] in seen: continue
    seen.add(r['k'])
    g=lambda k: r.get(k,'-')
    st=' '.join(f"{n}={g('smsp__warp_issue_stalled_'+n+'_per_warp_active.pct')}" for n in ['long_scoreboard','lg_throttle','mio_throttle','wait','barrier','math_pipe_throttle','not_selected','no_instruction'])
    print(f"  {r['k']}: t={g('gpu__time_duration.sum')} dram%={g('dram__throughput.avg.pct_of_peak_sustained_elapsed')} rdB={g('dram__bytes_read.sum')} inst={g('smsp__inst_executed.sum')} issue%={g('smsp__issue_active.avg.pct_of_peak_sustained_active')} l1hit%={g('l1tex__t_sector_hit_rate.pct')} ldhit={g('l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum')} ldmiss={g('l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum')} shwf={g('l1tex__data_pipe_lsu_wavefronts_mem_shared.sum')} grid={g('launch__grid_size')} blk={g('launch__block_size')} regs={g('launch__registers_per_thread')} dsmem={g('launch__shared_mem_per_block_dynamic')}\n     stalls% {st}")
PY
done
find $R -name '*.txt' | xargs gzip -f 2>/dev/null
tar czf $OUT/${NAME:-ncu_cells}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
