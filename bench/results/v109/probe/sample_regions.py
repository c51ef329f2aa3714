# v109: stall samples by code region (argv[2] bytes, hex; default 0x800) of ncu SASS CSV rows: each region's share,
# its HGMMA shapes and top stall reasons (the CSV's 18 reason columns; HGMMA samples are mostly outside them).
# Usage: python3 sample_regions.py sass_nonzero_tT.csv [0x1000]
import csv, sys, collections, re
rows=[]
tab=0
for line in open(sys.argv[1]):
    if line.startswith('"Kernel Name"'): tab+=1; continue
    if line.startswith('"Address"'): hdr=next(csv.reader([line])); continue
    r=next(csv.reader([line]))
    if len(r)<len(hdr)-2: continue
    d=dict(zip(hdr,r)); d['tab']=tab; rows.append(d)
reasons=[c for c in hdr if c.startswith('stall_') and 'Not Issued' not in c]
def n(v):
    try: return float(v)
    except: return 0.0
W=int(sys.argv[2],16) if len(sys.argv)>2 else 0x800
for t in sorted(set(r['tab'] for r in rows)):
    B=collections.OrderedDict()
    for r in rows:
        if r['tab']!=t: continue
        a=int(r['Address'],16)//W*W
        B.setdefault(a,[]).append(r)
    tot=sum(n(r['Warp Stall Sampling (All Samples)']) for r in rows if r['tab']==t)
    print(f"== table {t}: {tot:.0f} samples")
    for a,rs in sorted(B.items(), key=lambda kv:-sum(n(r['Warp Stall Sampling (All Samples)']) for r in kv[1]))[:14]:
        s=sum(n(r['Warp Stall Sampling (All Samples)']) for r in rs)
        hg=collections.Counter(re.search(r'HGMMA\.(\S+?)\.F32',r['Source']).group(1) for r in rs if 'HGMMA' in r['Source'])
        rc=sorted(((sum(n(r[c]) for r in rs),c[6:]) for c in reasons), reverse=True)[:6]
        ops=collections.Counter(r['Source'].split()[0] if not r['Source'].split()[0].startswith('@') else r['Source'].split()[1] for r in rs)
        print(f"  {a:#x} {s:7.0f} ({100*s/tot:4.1f}%) n={len(rs)} hgmma={dict(hg)} | "+", ".join(f"{c} {v:.0f}" for v,c in rc))
