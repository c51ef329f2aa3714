#!/usr/bin/env bash
# v84 call F (one H200, carry .carry/v28: n1 = main c6199ef's CLI): where the layer's kernels stand between the HBM and
# the issue rate -- ncu per kernel (W4A16 pieces, checkpoint-like scales): duration, DRAM bytes and throughput, issue
# activity, instructions, registers. Cases: the fused decode kernel (gpt-oss-120b T 1 / 8, Qwen3-30B-A3B T 8), the wide
# kernels (Qwen3 T 64, gpt-oss T 64 / 128), the general path (gpt-oss / Qwen3 T 512).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
H=$(md5sum < .carry/${BUNDLE:-v28}/b.tar.xz | cut -c1-8)
[ -f /tmp/done.$H ] || { xz -dc .carry/${BUNDLE:-v28}/b.tar.xz | tar xf - -C /tmp; touch /tmp/done.$H; echo "unpacked [$((SECONDS - t0)) s]"; }
M=${M:-n1}
g="--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai"; q="--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu"
MET=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,launch__registers_per_thread,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active
for cs in ${CASES:-"g 1" "g 8" "q 8" "q 64" "g 64" "g 128" "g 512" "q 512"}; do
  set -- $cs; [ $1 = g ] && sh=$g || sh=$q
  f=$R/ncu_$1_t$2.txt
  timeout 150 ncu --clock-control none --cache-control all --print-kernel-base function -s 8 -c 8 --metrics $MET \
    /tmp/$M/cli layer $sh --tokens $2 --act bf16 --weight-layout pieces --values checkpoint --iters 3 --warmup 2 > $f 2>&1
  echo "== $1 T$2 rc $? [$((SECONDS - t0)) s]"
  python3 - "$f" <<'PY'
import re,sys
cur=None; rows=[]
for line in open(sys.argv[1]):
    m=re.match(r'^  (\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)', line)
    if m: cur={'k':m.group(1)[:60]}; rows.append(cur); continue
    m=re.match(r'^\s+([a-z_]+__\S+)\s+(?:(\S+)\s+)?([\d,.]+)\s*$', line)
    if m and cur is not None: cur[m.group(1)]=m.group(3).replace(',','')+('' if m.group(2) in (None,'%','register/thread','inst') else m.group(2))
for r in rows:
    print("  %-60s t %10s  dram %10s %5s%%  issue %5s%%  inst %10s  regs %s grid %s warps %s%%" % (r['k'], r.get('gpu__time_duration.sum','?'),
      r.get('dram__bytes_read.sum','?'), r.get('dram__throughput.avg.pct_of_peak_sustained_elapsed','?'),
      r.get('smsp__issue_active.avg.pct_of_peak_sustained_active','?'), r.get('smsp__inst_executed.sum','?'),
      r.get('launch__registers_per_thread','?'), r.get('launch__grid_size','?'), r.get('sm__warps_active.avg.pct_of_peak_sustained_active','?')))
PY
done
find $R -name '*.txt' | xargs gzip -f 2>/dev/null
tar czf $OUT/${NAME:-f_ncu}.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
