import sys, re, subprocess, os, collections  # (os first: _here)
_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _here); sys.path.insert(0, os.path.join(_here, '../../../../scripts'))
from sass_local_memory import parse_lines, loops_of
from desc_ana import analyse
from desc_chain import chains
BIN='/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/nvidia/cu13/bin'
def sass(obj):
    env=dict(os.environ); env['PATH']=BIN+':'+env['PATH']
    return subprocess.run([BIN+'/cuobjdump','-sass',obj],capture_output=True,text=True,env=env,check=True).stdout
def summarize(obj):
    funcs = parse_lines(sass(obj).splitlines())
    out = {}
    for name, ins in funcs:
        if 'fused_grouped_gemm' not in name: continue
        res, _, _ = analyse(ins)
        at = {a: i for i, (a, _) in enumerate(ins)}
        rows = []
        for r in sorted(res, key=lambda r: r['start']):
            i0 = at[r['start']]
            seg = ins[i0:i0 + r['n'] + 40]
            groups=[]; cur=None
            for a,t in seg:
                if 'WARPGROUP.ARRIVE' in t: cur=[]
                if cur is not None:
                    cur.append(t)
                    if 'HGMMA' in t and 'gsb0' in t: groups.append(cur); cur=None
            st=[]
            for g in groups:
                nh=sum('HGMMA' in t for t in g)
                descs=set(re.search(r"gdesc\[(UR\d+)\]",t).group(1) for t in g if 'HGMMA' in t)
                st.append((nh,len(descs),sum('R2UR' in t for t in g),len(g)))
            rows.append((r['shape'], r['n'], r['hgmma'], r['hist']['LDL'], r['hist']['STL'], st))
        tot=dict(n=len(ins), hgmma=sum('HGMMA' in t for _,t in ins), ldl=sum(bool(re.search(r"\bLDL\b",t)) for _,t in ins), stl=sum(bool(re.search(r"\bSTL\b",t)) for _,t in ins))
        out[name]=(tot,rows)
    return out
def resusage(obj):
    env=dict(os.environ); env['PATH']=BIN+':'+env['PATH']
    o=subprocess.run([BIN+'/cuobjdump','-res-usage',obj],capture_output=True,text=True,env=env).stdout
    res={}; fn=None
    for l in o.splitlines():
        m=re.search(r"Function (\S+):",l)
        if m: fn=m.group(1); continue
        m=re.search(r"REG:(\d+) STACK:(\d+)",l)
        if m and fn and 'fused_grouped_gemm' in fn: res[fn]=(int(m.group(1)),int(m.group(2)))
    return res
if __name__=='__main__':
    a,b=sys.argv[1],sys.argv[2]
    A,B=summarize(a),summarize(b); RA,RB=resusage(a),resusage(b)
    for name in A:
        ta,ra=A[name]; tb,rb=B[name]
        short=re.sub(r'_ZN7fp4gemm6detail4sm9018fused_grouped_gemmI','',name)[:70]
        print(f"== {short}\n   A tot {ta} res {RA.get(name)}\n   B tot {tb} res {RB.get(name)}")
        for x,y in zip(ra,rb):
            mark = '' if x==y else '  *'
            print(f"  {x[0]:>10} A n={x[1]:4d} h={x[2]:2d} L{x[3]}S{x[4]} {x[5]}   B n={y[1]:4d} h={y[2]:2d} L{y[3]}S{y[4]} {y[5]}{mark}")
