# v114: per-class busy cycles of v112's per-CTA traces (bench/results/v112/h100/cTR_trace.tgz, H100).
# Usage: tar xzf bench/results/v112/h100/cTR_trace.tgz -C /tmp && python3 trace_classes.py /tmp/tr/*_xt.txt
import sys, re, statistics as st
for f in sys.argv[1:]:
    rows=[]
    for l in open(f):
        p=l.split()
        if len(p)==13 and p[0].isdigit():
            rows.append(dict(cta=int(p[0]),kb=int(p[1]),pcs=int(p[2]),nh=int(p[3]),loop=int(p[4]),full=int(p[5]),ho=int(p[6]),epi=int(p[7]),busy=int(p[8]),tot=int(p[9])))
    if not rows: continue
    avg=st.mean(r['busy'] for r in rows); mx=max(r['busy'] for r in rows)
    print(f"{f}: {len(rows)} CTAs busy avg {avg:.0f} max {mx} ({mx/avg:.3f})")
    cls={}
    for r in rows: cls.setdefault(r['nh'],[]).append(r)
    for nh,rs in sorted(cls.items()):
        b=[r['busy'] for r in rs]; kb=[r['kb'] for r in rs]
        per_kb=[r['busy']/r['kb'] for r in rs]
        epi=[r['epi']/r['pcs'] for r in rs]
        print(f"  NH {nh:4d}: {len(rs):3d} CTAs kb {min(kb)}-{max(kb)} busy {min(b)}-{max(b)} med {st.median(b):.0f} | busy/kb {st.median(per_kb):.0f} loop/kb {st.median([r['loop'] for r in rs])} epi/piece {st.median(epi):.0f} (max {max(epi):.0f})")
