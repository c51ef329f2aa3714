#!/usr/bin/env bash
# Prepared for the next session (not run): where the general path's two-warpgroup 16-token loop stalls (PERF.md v71:
# 66 % issue-active by v69's ncu; four warpgroups, with +27 % instructions, lost only 7-17 %). ncu per-SASS-instruction stall samples of the layer's
# GEMM1 (gpt-oss-120b W4A16 on pieces, T 64: the 16-token class) and GEMM2, with main's CLI (.carry/v111c = 3e603f7,
# device code = main's). Carry .carry/v111c. Reads: samples per opcode class (dequantisation, HGMMA, barrier waits,
# LDS, the rest) and the top instructions, from the CSV scripts/ncu_source.sh writes.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
C=/tmp/v111c; mkdir -p $C; [ -x $C/fp4gemm ] || { xz -dc .carry/v111c/fp4gemm.xz > $C/fp4gemm; chmod +x $C/fp4gemm; }
L=(layer --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 64 --act bf16 --activation swigluoai --weight-layout pieces)
for launch in 1 2; do  # the first fused_grouped_gemm launch after the skipped ones is GEMM1, the next GEMM2
  rep=/tmp/ncu_l$launch
  timeout 240 ncu --clock-control none --section SourceCounters --section WarpStateStats --section SchedulerStats \
    --import-source no -k regex:fused_grouped_gemm -s $((launch + 1)) -c 1 -f -o $rep $C/fp4gemm "${L[@]}" --iters 2 --warmup 1 \
    > $R/ncu_l$launch.log 2>&1
  ncu -i $rep.ncu-rep --page details > $R/details_l$launch.txt 2>&1
  ncu -i $rep.ncu-rep --page source --csv --print-source sass > $R/source_l$launch.csv 2> $R/source_l$launch.err
  echo "launch $launch: $(wc -l < $R/source_l$launch.csv) SASS lines [$((SECONDS - t0)) s]"
  python3 - $R/source_l$launch.csv <<'PY'
import csv, re, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
if not rows: sys.exit("empty CSV")
head = rows[0]
src = next(i for i, h in enumerate(head) if h.strip().lower() == 'source')
smp = next(i for i, h in enumerate(head) if 'Warp Stall Sampling (All' in h)
def num(x):
    try: return float(x.replace(',', ''))
    except ValueError: return 0.0
def kind(op):
    if op.startswith('HGMMA') or op.startswith('WARPGROUP'): return 'wgmma'
    if op.startswith('SYNCS'): return 'barrier'
    if op.startswith('LDS') or op.startswith('LDG') or op.startswith('LDL'): return 'load'
    if op in ('LOP3.LUT', 'HMUL2.BF16_V2', 'HMUL2', 'IMAD.SHL.U32', 'SHF.R.U32.HI', 'PRMT'): return 'dequant'
    return 'other'
tot = collections.Counter(); top = []
for r in rows[1:]:
    if len(r) <= max(src, smp): continue
    op = re.sub(r'^@!?U?P\w+\s+', '', r[src].strip()).split(' ')[0] if r[src].strip() else ''
    s = num(r[smp]); tot[kind(op)] += s; top.append((s, r[src].strip()[:70]))
all_ = sum(tot.values()) or 1
print('  samples by kind:', ', '.join(f'{k} {v / all_:.1%}' for k, v in tot.most_common()))
for s, t in sorted(top, reverse=True)[:12]: print(f'   {s:8.0f}  {t}')
PY
done
gzip $R/*.csv $R/*.txt 2>/dev/null
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
