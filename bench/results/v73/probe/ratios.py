# ratios.py DIR NEW OLD: per layer-suite case, min over rounds of each side's median, NEW / OLD
import json, sys, glob, statistics as st
R, NEW, OLD = sys.argv[1:4]
for act in ('bf16', 'nvfp4'):
    def load(v):
        t = {}
        for f in sorted(glob.glob(f'{R}/layer_{act}_{v}_r*.json')):
            try: cases = json.load(open(f))['cases']
            except Exception as e: print('unreadable', f, e); continue
            for c in cases: t.setdefault((c.get('model'), c.get('tokens')), []).append(c['time_us']['median'])
        return {k: min(x) for k, x in t.items()}
    new, old = load(NEW), load(OLD)
    r = {k: new[k] / old[k] for k in new if k in old}
    if not r: continue
    print(act, 'NEW / OLD median', round(st.median(r.values()), 4), 'min', round(min(r.values()), 4), 'max', round(max(r.values()), 4))
    for k in sorted(r): print('  ', k, round(new[k], 1), round(old[k], 1), round(r[k], 4))
