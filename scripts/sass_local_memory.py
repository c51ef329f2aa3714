#!/usr/bin/env python3
"""Where a kernel's local-memory accesses (LDL / STL) sit: in a k-loop, in a per-piece loop, or once.

    cuobjdump -sass build/.../fused_nvfp4.cu.o > nv.sass    (needs nvdisasm: the CUDA toolkit's, or
    python3 scripts/sass_local_memory.py nv.sass             pip install nvidia-cuda-nvdisasm)

For every function whose name contains `fused_grouped_gemm`: basic blocks from the branch targets,
natural loops from each backward edge (the blocks that reach the latch without passing the
header), the k-loops as the innermost loops that hold HGMMA; each LDL/STL is counted as in a
k-loop, in a loop that holds k-loops (once per work piece), or outside every HGMMA loop (once per
CTA). DESIGN.md "Stack frames of the fused kernel" quotes its output for nvcc 13.0.
"""
import collections
import re
import sys


def parse(path):
    funcs, cur = [], None
    for line in open(path):
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = [m.group(1), []]
            funcs.append(cur)
            continue
        if cur is None:
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            cur[1].append((int(m.group(1), 16), m.group(2).strip()))
    return funcs


def loops_of(ins):
    index = {a: i for i, (a, _) in enumerate(ins)}
    leaders = {0}
    for i, (a, t) in enumerate(ins):
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", t)
        if m or re.search(r"\b(EXIT|RET|BRX|JMX)\b", t):
            if i + 1 < len(ins):
                leaders.add(i + 1)
        if m and int(m.group(1), 16) in index:
            leaders.add(index[int(m.group(1), 16)])
    starts = sorted(leaders)
    block = {}
    for b, s in enumerate(starts):
        for i in range(s, starts[b + 1] if b + 1 < len(starts) else len(ins)):
            block[i] = b
    succ = [set() for _ in starts]
    for b, s in enumerate(starts):
        last = (starts[b + 1] if b + 1 < len(starts) else len(ins)) - 1
        t = ins[last][1]
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) in index:
            succ[b].add(block[index[int(m.group(1), 16)]])
        ends = (m and not t.startswith("@")) or (re.search(r"\b(EXIT|RET)\b", t) and not t.startswith("@"))
        if not ends and last + 1 < len(ins):
            succ[b].add(b + 1)
    pred = [set() for _ in starts]
    for b, ss in enumerate(succ):
        for c in ss:
            pred[c].add(b)
    loops = []
    for b, ss in enumerate(succ):
        for h in ss:
            if h <= b:
                body, stack = {h}, [b]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(pred[x])
                loops.append(body)
    return block, loops


def main(path):
    for name, ins in parse(path):
        if "fused_grouped_gemm" not in name:
            continue
        block, loops = loops_of(ins)
        hg = {block[i] for i, (_, t) in enumerate(ins) if "HGMMA" in t}
        hloops = [l for l in loops if l & hg]
        kloops = [l for l in hloops if not any(o is not l and o < l and (o & hg) for o in hloops)]
        in_k = set().union(*kloops) if kloops else set()
        in_any = set().union(*hloops) if hloops else set()
        where = collections.Counter()
        for i, (_, t) in enumerate(ins):
            if re.search(r"\b(LDL|STL)\b", t):
                b = block[i]
                where["k-loop" if b in in_k else "per piece" if b in in_any else "once per CTA"] += 1
        print(f"{name}: {len(kloops)} k-loops; LDL/STL {dict(where) or 'none'}")


if __name__ == "__main__":
    main(sys.argv[1])
