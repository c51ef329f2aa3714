#!/usr/bin/env python3
"""Per-instruction stall samples from `ncu --page source --csv --print-source sass` (s.sh): for each kernel's second
launch, its samples by reason, then the instructions with the most samples and their top reasons.
Usage: srcstall.py src_T8.csv.gz [top]"""
import csv, gzip, re, sys, collections

def kernels(path):
    out, cur, hdr = [], None, None
    with gzip.open(path, 'rt') as f:
        for row in csv.reader(f):
            if row and row[0] == 'Kernel Name':
                cur, hdr = [], None
                out.append((row[1], cur))
                continue
            if hdr is None:
                hdr = row
                continue
            cur.append(dict(zip(hdr, row)))
    return out

def num(x):
    try: return float(x.replace(',', ''))
    except Exception: return 0.0

REASONS = ['stall_long_sb', 'stall_barrier', 'stall_wait', 'stall_math', 'stall_short_sb', 'stall_not_selected',
           'stall_selected', 'stall_mio', 'stall_lg', 'stall_no_inst', 'stall_branch_resolving', 'stall_dispatch',
           'stall_membar', 'stall_drain', 'stall_misc']

def main(path, top=40):
    seen = collections.Counter()
    for name, rows in kernels(path):
        m = re.search(r'(decode_\w+)<', name); short = m.group(1) if m else name[:40]
        seen[short] += 1
        if seen[short] != 2: continue  # the second launch of each
        tot = collections.Counter()
        for r in rows:
            for k in REASONS: tot[k] += num(r.get(k, '0'))
        allS = sum(num(r['Warp Stall Sampling (All Samples)']) for r in rows)
        print(f'== {short}: {len(rows)} instructions, {allS:.0f} samples; by reason: ' +
              ', '.join(f'{k[6:]} {v / allS:.3f}' for k, v in tot.most_common(9)))
        rs = sorted(rows, key=lambda r: -num(r['Warp Stall Sampling (All Samples)']))[:top]
        for r in rs:
            s = num(r['Warp Stall Sampling (All Samples)'])
            why = sorted(((num(r.get(k, '0')), k[6:]) for k in REASONS), reverse=True)[:3]
            print(f"  {r['Address']:>6} {s / allS:6.3f} ex {num(r['Instructions Executed']):>9.0f}  {r['Source'][:60]:<60} "
                  + ' '.join(f'{k} {v / allS:.3f}' for v, k in why if v > 0))

if __name__ == '__main__':
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
