# v107: per-kernel SASS instruction counts by issue class (ALU / FMA pipe / IMAD.WIDE / tensor / other), two builds.
# Usage: cuobjdump -sass A > a.txt; cuobjdump -sass B > b.txt; python3 sass_pipes.py a.txt b.txt REGEX  (kernels whose
# class counts differ and whose name matches REGEX; anonymous-namespace hashes are normalised so the builds pair up).
import re, sys, collections
def parse(path):
    funcs = {}; cur = None
    for line in open(path):
        m = re.search(r"Function : (\S+)", line)
        if m: cur = re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+_(\w+?)_cu_[0-9a-f]{8}", r"ANON_\1", m.group(1)); funcs[cur] = collections.Counter(); continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m and cur: funcs[cur][m.group(2)] += 1
    return funcs
a, b = parse(sys.argv[1]), parse(sys.argv[2])
def cls(op):
    base = op.split('.')[0]
    if op.startswith('IMAD.WIDE'): return 'IMADW'
    if base in ('IMAD','HMUL2','HFMA2','FFMA','FMUL','FADD','HADD2','IMUL'): return 'FMA'
    if base in ('LOP3','SHF','IADD3','LEA','PRMT','ISETP','SEL','IABS','FSEL','FSETP','LOP','SHL','SHR','IMNMX','VIADD','BMSK','PLOP3'): return 'ALU'
    if base in ('HMMA','HGMMA'): return 'TENSOR'
    return 'other'
for f in a:
    if f not in b: continue
    if not re.search(sys.argv[3], f): continue
    ca = collections.Counter(); cb = collections.Counter()
    for op, n in a[f].items(): ca[cls(op)] += n
    for op, n in b[f].items(): cb[cls(op)] += n
    if ca == cb: continue
    print(f[:110]); print("  main", dict(ca)); print("  fold", dict(cb))
