import sys, re
sys.path.insert(0, __import__('os').path.dirname(__file__))
from desc_sumo import summarize, resusage
a,b=sys.argv[1],sys.argv[2]
only_diff = len(sys.argv)>3
A,B=summarize(a),summarize(b); RA,RB=resusage(a),resusage(b)
for (na,(ta,ra)),(nb,(tb,rb)) in zip(A.items(),B.items()):
    short=re.sub(r'_ZN7fp4gemm6detail4sm9018fused_grouped_gemmI','',na)[:60]
    print(f"== {short}\n   A n={ta['n']} h={ta['hgmma']} L{ta['ldl']}S{ta['stl']} res {RA.get(na)}\n   B n={tb['n']} h={tb['hgmma']} L{tb['ldl']}S{tb['stl']} res {RB.get(nb)}")
    for x,y in zip(ra,rb):
        mark = '' if x==y else '  *'
        if only_diff and not mark: continue
        print(f"  {x[0]:>10} A n={x[1]:4d} h={x[2]:2d} L{x[3]}S{x[4]} {x[5]}   B n={y[1]:4d} h={y[2]:2d} L{y[3]}S{y[4]} {y[5]}{mark}")
