import sys, re, collections
sys.path.insert(0, '/work/main/scripts')
from sass_local_memory import parse_lines, loops_of
from sass_census import opcode

def load(path, sub):
    funcs = parse_lines(open(path).read().splitlines())
    out = [(n, ins) for n, ins in funcs if sub in n]
    assert len(out) == 1, [n for n, _ in out]
    return out[0][1]

def analyse(ins):
    block, loops = loops_of(ins)
    nb = max(block.values()) + 1
    bidx = collections.defaultdict(list)
    for i in range(len(ins)): bidx[block[i]].append(i)
    hg = {block[i] for i, (_, t) in enumerate(ins) if "HGMMA" in t}
    # merge loops with same header
    byhead = {}
    for l in loops:
        h = min(l)
        byhead.setdefault(h, set()).update(l)
    loops = list(byhead.values())
    hloops = [l for l in loops if l & hg]
    kloops = [l for l in hloops if not any(o is not l and o < l and (o & hg) for o in hloops)]
    res = []
    for l in kloops:
        idx = sorted(i for b in l for i in bidx[b])
        shapes = collections.Counter(re.search(r"HGMMA\.(\d+x\d+x\d+)", ins[i][1]).group(1) for i in idx if "HGMMA" in ins[i][1])
        hist = collections.Counter(opcode(ins[i][1]) for i in idx)
        # enclosing loop (piece loop)
        outer = [o for o in loops if l < o]
        outer = min(outer, key=len) if outer else None
        oidx = sorted(i for b in outer for i in bidx[b]) if outer else []
        res.append(dict(shape=shapes.most_common(1)[0][0], n=len(idx), hgmma=sum(shapes.values()), hist=hist,
                        start=ins[idx[0]][0], end=ins[idx[-1]][0], outer=len(oidx), ohist=collections.Counter(opcode(ins[i][1]) for i in oidx),
                        ostart=ins[oidx[0]][0] if oidx else None, oend=ins[oidx[-1]][0] if oidx else None))
    return res, loops, block

if __name__ == "__main__":
    path, sub = sys.argv[1], sys.argv[2]
    ins = load(path, sub)
    print("total", len(ins), "HGMMA", sum("HGMMA" in t for _, t in ins), "LDL", sum(bool(re.search(r"\bLDL\b", t)) for _, t in ins), "STL", sum(bool(re.search(r"\bSTL\b", t)) for _, t in ins))
    res, loops, block = analyse(ins)
    for r in sorted(res, key=lambda r: r['start']):
        h = r['hist']
        print(f"{r['shape']:>12} kloop {r['n']:5d} [{r['start']:#x}-{r['end']:#x}] HGMMA {r['hgmma']} LDS {h['LDS']} BAR {h['BAR']} SYNCS {h['SYNCS']} WARPSYNC {h['WARPSYNC']} F2FP {h['F2FP']} PRMT {h['PRMT']} HMUL2 {h['HMUL2']} HFMA2 {h['HFMA2']} LOP3 {h['LOP3']} LDL {h['LDL']} STL {h['STL']} BRA {h['BRA']} | outer {r['outer']} excl {r['outer']-r['n']}")
