# ncusum.py DIR: per ncu_*.txt of c.sh / d.sh, each decode kernel: duration (us), instructions, issue %, DRAM MB, shared wavefronts and bank conflicts, the top stall reasons per issue
import re, sys, glob, os
R = sys.argv[1]
for f in sorted(glob.glob(f'{R}/ncu_*.txt')):
    k = None; vals = {}
    for l in open(f):
        m = re.match(r'\s+void .*::(decode_\w+)<', l)
        if m: k = m.group(1); vals[k] = {}; continue
        m = re.match(r'\s+(\S+)\s+(\S+)?\s+([\d,.]+)$', l)
        if k and m: vals[k][m.group(1)] = float(m.group(3).replace(',', ''))
    print(os.path.basename(f))
    for k, v in vals.items():
        st = sorted(((x, n.replace('smsp__average_warps_issue_stalled_', '').replace('_per_issue_active.ratio', '')) for n, x in v.items() if 'stalled' in n), reverse=True)[:7]
        print(f"  {k}: {v.get('gpu__time_duration.sum', 0):.1f} us, inst {v.get('smsp__inst_executed.sum', 0):.0f}, issue {v.get('smsp__issue_active.avg.pct_of_peak_sustained_active', 0):.1f} %, dram {v.get('dram__bytes_read.sum', 0) / 1e6:.1f} MB, shared wavefronts {v.get('l1tex__data_pipe_lsu_wavefronts_mem_shared.sum', 0):.0f}, conflicts {v.get('l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum', 0):.0f}")
        print('    stalls/issue: ' + ', '.join(f'{n} {x:.2f}' for x, n in st))
