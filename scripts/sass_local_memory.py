#!/usr/bin/env python3
"""Where a kernel's local-memory accesses (LDL / STL) sit: in a k-loop, in a per-piece loop, or once.

    cuobjdump -sass build/.../fused_nvfp4.cu.o > nv.sass    (needs nvdisasm: the CUDA toolkit's, or
    python3 scripts/sass_local_memory.py nv.sass             pip install nvidia-cuda-nvdisasm)

For every function whose name contains `fused_grouped_gemm`: basic blocks from the branch targets,
natural loops from each backward edge (the blocks that reach the latch without passing the
header), the k-loops as the innermost loops that hold HGMMA; each LDL/STL is counted as in a
k-loop, in a loop that holds k-loops (once per work piece), or outside every HGMMA loop (once per
CTA). DESIGN.md "Stack frames of the fused kernel" quotes its output for nvcc 13.0.

    python3 scripts/sass_local_memory.py --objects "a.cu.o;b.cu.o" --fail-on-kloop

runs cuobjdump -sass on the objects itself (found as scripts/check_kernel_stack.py finds it; it needs
nvdisasm beside it or on PATH: the toolkit's, or `pip install nvidia-cuda-nvdisasm`) and fails when
any LDL/STL sits in a k-loop: the host tier's check that no fused kernel reloads spilled values per
k-block (ptxas can do so after an unrelated change; a GLU-only MoE kernel once reloaded its ring
addresses in every k-loop). A fused kernel without k-loops fails too (the parse would be wrong).
"""
import argparse
import collections
import os
import re
import subprocess
import sys


def parse(path):
    with open(path) as f:
        return parse_lines(f)


def parse_lines(lines):
    funcs, cur = [], None
    for line in lines:
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


def census(funcs):
    """(name, k-loop count, Counter of LDL/STL sites by place) for every fused_grouped_gemm function."""
    out = []
    for name, ins in funcs:
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
        out.append((name, len(kloops), where))
    return out


def sass_of_objects(objects, tag="[kloop]"):
    """The parsed SASS functions of the objects (cuobjdump -sass, which runs nvdisasm); exits with a
    message naming the missing tool or the failing object."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from check_kernel_stack import find_cuda_tool  # (same directory)
    tool, nvdisasm = find_cuda_tool("cuobjdump"), find_cuda_tool("nvdisasm")
    for name, found in (("cuobjdump", tool), ("nvdisasm", nvdisasm)):
        if found is None:
            sys.exit(f"{tag} FAILED: {name} not found (the CUDA toolkit's, or `pip install nvidia-cuda-{name}`; "
                     "scripts/deps.sh installs it)")
    env = dict(os.environ, PATH=os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", ""))
    funcs = []
    for obj in (o for arg in objects for o in arg.split(";") if o.endswith(".cu.o") and os.path.isfile(o)):
        run = subprocess.run([tool, "-sass", obj], capture_output=True, text=True, env=env)
        if run.returncode != 0:
            sys.exit(f"{tag} FAILED: {tool} -sass {obj}: {run.stderr.strip()[:300]}")
        funcs += parse_lines(run.stdout.splitlines())
    return funcs


def census_of_objects(objects):
    """census() of the objects' SASS."""
    return census(sass_of_objects(objects))


def report(results, fail_on_kloop):
    """Prints each fused kernel's census; with fail_on_kloop, 1 when a k-loop holds an LDL/STL, a
    kernel has no k-loop (the parse would be wrong) or there is no fused kernel at all."""
    bad = [] if results else ["no fused_grouped_gemm kernel found"]
    for name, nk, where in results:
        print(f"[kloop] {name}: {nk} k-loops; LDL/STL {dict(where) or 'none'}")
        if nk == 0:
            bad.append(f"{name}: no k-loop found (HGMMA inside no loop: the parse is wrong)")
        if where["k-loop"]:
            bad.append(f"{name}: {where['k-loop']} LDL/STL sites inside k-loops")
    print(f"[kloop] {len(results)} fused kernels")
    if not fail_on_kloop:
        return 0
    for b in bad:
        print(f"[kloop] FAILED: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", nargs="?", help="a cuobjdump -sass listing")
    ap.add_argument("--objects", nargs="+", help="object files (or ';'-separated lists): run cuobjdump -sass on them")
    ap.add_argument("--fail-on-kloop", action="store_true", help="exit 1 on any LDL/STL inside a k-loop")
    args = ap.parse_args()
    if not args.sass and not args.objects:
        ap.error("a SASS listing or --objects")
    sys.exit(report(census_of_objects(args.objects) if args.objects else census(parse(args.sass)), args.fail_on_kloop))
