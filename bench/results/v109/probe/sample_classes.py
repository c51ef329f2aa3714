# v109: stall samples per instruction class (HGMMA, mbarrier waits, decode ALU ops, ...) of ncu SASS CSV rows (the
# nonzero rows call11.sh keeps), split into two kernels at a code address (argv[2], hex: GEMM1 below, GEMM2 above).
# Usage: python3 sample_classes.py sass_nonzero_tT.csv 0xSPLIT
import csv, sys, collections
hdr=None; rows=[]
for line in open(sys.argv[1]):
    if line.startswith('"Address"'): hdr=next(csv.reader([line])); continue
    if hdr is None or line.startswith('"Kernel'): continue
    r=next(csv.reader([line]))
    if len(r)>=len(hdr)-2: rows.append(dict(zip(hdr,r)))
split=int(sys.argv[2],16)
def n(v):
    try: return float(v)
    except: return 0.0
for name,sel in (("GEMM1",lambda a:a<split),("GEMM2",lambda a:a>=split)):
    rs=[r for r in rows if sel(int(r['Address'],16))]
    tot=sum(n(r['Warp Stall Sampling (All Samples)']) for r in rs)
    C=collections.Counter()
    prev=None
    for i,r in enumerate(rs):
        s=r['Source']; v=n(r['Warp Stall Sampling (All Samples)'])
        op=[t for t in s.split() if not t.startswith('@')][0]
        if op.startswith('HGMMA'): k='HGMMA'
        elif op=='BRA' and i>0 and 'TRYWAIT' in rs[i-1]['Source']: k='mbarrier wait (BRA after TRYWAIT)'
        elif op.startswith('SYNCS'): k='SYNCS'
        elif op in ('LOP3.LUT','IMAD','IMAD.SHL.U32','SHF.R.U32.HI','SHF.L.U32','HMUL2.BF16_V2','IMAD.U32','IMAD.MOV.U32','LDS.128','LDS.U8','PRMT','SHF.L.U32.HI'): k='decode/ALU ('+op.split('.')[0]+')'
        elif op.startswith('WARPGROUP'): k=op
        else: k='other'
        C[k]+=v
    print(f"{name}: {tot:.0f} samples")
    for k,v in C.most_common(14): print(f"   {k:40s} {v:7.0f} {100*v/tot:5.1f}%")
