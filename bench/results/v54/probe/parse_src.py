# Top stalled SASS instructions per kernel from `ncu -i REP --page source --csv --print-source sass`. Usage: python3 parse_src.py SRC.csv
import csv, sys, collections
def sections(path):
    rows=list(csv.reader(open(path)))
    secs=[]; cur=None; hdr=None
    for r in rows:
        if r and r[0]=="Kernel Name":
            cur={"name":r[1],"rows":[]}; secs.append(cur); hdr=None; continue
        if r and r[0]=="Address": hdr=r; cur["hdr"]=hdr; continue
        if hdr and r: cur["rows"].append(dict(zip(hdr,r)))
    return secs
def num(x):
    try: return float(x.replace(",",""))
    except: return 0.0
for s in sections(sys.argv[1]):
    rows=s["rows"]
    tot=sum(num(r["Warp Stall Sampling (All Samples)"]) for r in rows)
    ex=sum(num(r["Instructions Executed"]) for r in rows)
    print("==",s["name"][:90], "samples",tot,"inst",ex, "n",len(rows))
    # per-instruction top
    top=sorted(rows,key=lambda r:-num(r["Warp Stall Sampling (All Samples)"]))[:25]
    stallcols=[c for c in s["hdr"] if c.startswith("stall_") and "Not Issued" not in c]
    for r in top:
        st=sorted(((num(r[c]),c[6:]) for c in stallcols),reverse=True)[:3]
        print(f'{r["Address"]:>6} {num(r["Warp Stall Sampling (All Samples)"]):7.0f} {100*num(r["Warp Stall Sampling (All Samples)"])/tot:5.1f}% ex={num(r["Instructions Executed"]):9.0f} {r["Source"][:60]:60s}', " ".join(f"{c}:{v:.0f}" for v,c in st))
