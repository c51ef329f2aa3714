import sys, re, collections
sys.path.insert(0, __import__('os').path.dirname(__import__('os').path.abspath(__file__)))
from desc_ana import load, analyse
from sass_local_memory import loops_of
def chains(path, sub):
    ins = load(path, sub)
    res, _, _ = analyse(ins)
    at = {a: i for i, (a, _) in enumerate(ins)}
    out = []
    for r in sorted(res, key=lambda r: r['start']):
        # linear range from start to first out-of-line jump: take instructions from start while address < start + n*16*2
        i0 = at[r['start']]
        seg = ins[i0:i0 + r['n'] + 40]
        seg = [x for x in seg if x[0] <= max(a for a, _ in seg)]
        # find arrive..last HGMMA groups
        groups = []
        cur = None
        for a, t in seg:
            if 'WARPGROUP.ARRIVE' in t: cur = []
            if cur is not None:
                cur.append(t)
                if 'HGMMA' in t and 'gsb0' in t:
                    groups.append(cur); cur = None
        stats = []
        for g in groups:
            nh = sum('HGMMA' in t for t in g)
            descs = set(re.search(r"gdesc\[(UR\d+)\]", t).group(1) for t in g if 'HGMMA' in t)
            r2ur = sum('R2UR' in t for t in g)
            stats.append((nh, len(descs), r2ur, len(g)))
        out.append((r['shape'], r['n'], stats))
    return out
if __name__ == "__main__":
 for sub, pa, pb in [(sys.argv[3], sys.argv[1], sys.argv[2])]:
    A, B = chains(pa, sub), chains(pb, sub)
    for (s, na, ga), (_, nb, gb) in zip(A, B):
        print(f"{s:>10} A {na:4d} {ga}   B {nb:4d} {gb}")
