# Bins of a kernel's SASS (ncu --page source --csv): stall samples and executed instructions per 64 instructions.
# Usage: python3 bins.py SRC.csv KERNEL_SECTION_INDEX BIN
import sys
import os; exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'parse_src.py')).read().split('for s in sections')[0])
secs=sections(sys.argv[1]); k=int(sys.argv[2]); B=int(sys.argv[3])
rows=secs[k]["rows"]; tot=sum(num(r["Warp Stall Sampling (All Samples)"]) for r in rows); it=sum(num(r["Instructions Executed"]) for r in rows)
for i in range(0,len(rows),B):
    ch=rows[i:i+B]; s=sum(num(r["Warp Stall Sampling (All Samples)"]) for r in ch); e=sum(num(r["Instructions Executed"]) for r in ch)
    if s/tot>0.005 or e/it>0.01:
        ops=[r["Source"].split()[0] if not r["Source"].strip().startswith("@") else r["Source"].split()[1] for r in ch]
        key=[o for o in ops if o.split('.')[0] in ("HMMA","BAR","LDG","ATOMG","RED","STG","LDS","STS","MEMBAR","EXIT","SHFL","VOTE","BRA")]
        print(f'{ch[0]["Address"][-5:]} samples {100*s/tot:5.1f}%  inst {100*e/it:5.1f}%  maxex {max(num(r["Instructions Executed"]) for r in ch):7.0f}  {" ".join(sorted(set(key)))[:80]}')
