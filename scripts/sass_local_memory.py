#!/usr/bin/env python3
"""Where a kernel's local-memory accesses (LDL / STL) sit: in a k-loop, in a per-piece loop, or once.

    cuobjdump -sass build/.../fused_nvfp4.cu.o > nv.sass    (needs nvdisasm: the CUDA toolkit's, or
    python3 scripts/sass_local_memory.py nv.sass             pip install nvidia-cuda-nvdisasm)

For every function whose name contains `fused_grouped_gemm`: basic blocks from the branch targets,
dominators from the entry (an indirect branch, a switch's BRX, may enter any block no edge enters
from below; subroutines are entered by CALL), natural loops from each back edge (an edge into a block
that dominates its source; the loop: the blocks that reach the latch without passing the header),
the k-loops as the innermost loops that hold HGMMA; each LDL/STL is counted as in a
k-loop, in a loop that holds k-loops (once per work piece), or outside every HGMMA loop (once per
CTA). DESIGN.md "Stack frames of the fused kernel" quotes its output for nvcc 13.0.

    python3 scripts/sass_local_memory.py --objects "a.cu.o;b.cu.o" --fail-on-kloop

runs cuobjdump -sass on the objects itself (found as scripts/check_kernel_stack.py finds it; it needs
nvdisasm beside it or on PATH: the toolkit's, or `pip install nvidia-cuda-nvdisasm`) and fails when
any LDL/STL sits in a k-loop: the host tier's check that no fused kernel reloads spilled values per
k-block (ptxas can do so after an unrelated change; a GLU-only MoE kernel once reloaded its ring
addresses in every k-loop). A fused kernel without k-loops fails too (the parse would be wrong), as
does one whose flow has a cycle that is no natural loop or an HGMMA its entry cannot reach.
(Until v90 every backward edge counted as a loop: the out-of-line blocks ptxas places after EXIT --
an mbarrier try_wait's retry, a BRA.DIV's divergent fallback -- then made "k-loops" that reached the
kernel's entry and held the prologue's LDL / STL; tests/fixtures/kloop_retry.sass.)
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


class IrreducibleFlow(ValueError):
    """A cycle of the control-flow graph that no natural loop holds."""


def dominators(succ, pred):
    """Immediate dominators of the blocks reachable from the root, the last block ({block: idom};
    Cooper, Harvey and Kennedy's iteration over the reverse postorder)."""
    root = len(succ) - 1  # (the root: the last block)
    order, seen, stack = [], {root}, [(root, iter(sorted(succ[root])))]
    while stack:  # iterative depth-first search: postorder
        b, it = stack[-1]
        nxt = next((c for c in it if c not in seen), None)
        if nxt is None:
            order.append(b)
            stack.pop()
        else:
            seen.add(nxt)
            stack.append((nxt, iter(sorted(succ[nxt]))))
    post = {b: i for i, b in enumerate(order)}
    rpo = order[::-1]
    idom = {root: root}

    def meet(a, b):
        while a != b:
            while post[a] < post[b]:
                a = idom[a]
            while post[b] < post[a]:
                b = idom[b]
        return a

    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            done = [p for p in pred[b] if p in idom]
            new = done[0]
            for p in done[1:]:
                new = meet(p, new)
            if idom.get(b) != new:
                idom[b], changed = new, True
    return idom


def dominates(idom, h, b):
    """Whether block h dominates block b (both reachable)."""
    while b != h:
        if idom[b] == b:  # (the root)
            return False
        b = idom[b]
    return True


def cycle_without_back_edges(succ, idom):
    """A block on a cycle of the reachable graph less its back edges (None when that graph is
    acyclic, i.e. the flow is reducible and every cycle is a natural loop's)."""
    indeg = {b: 0 for b in idom}
    fwd = {b: [c for c in succ[b] if c in idom and not dominates(idom, c, b)] for b in idom}
    for b in idom:
        for c in fwd[b]:
            indeg[c] += 1
    ready = [b for b in idom if indeg[b] == 0]
    while ready:
        b = ready.pop()
        for c in fwd[b]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    left = [b for b in idom if indeg[b] > 0]
    return min(left) if left else None


def loops_of(ins):
    """(block of each instruction, [set of blocks of each natural loop]). Raises IrreducibleFlow when
    the flow has a cycle that is no natural loop's, or an HGMMA the flow from the entry cannot reach."""
    index = {a: i for i, (a, _) in enumerate(ins)}
    leaders, calls = {0}, set()
    for i, (a, t) in enumerate(ins):
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", t)
        if m or re.search(r"\b(EXIT|RET|BRX|JMX)\b", t):
            if i + 1 < len(ins):
                leaders.add(i + 1)
        if m and int(m.group(1), 16) in index:
            leaders.add(index[int(m.group(1), 16)])
        c = re.search(r"\bCALL\.REL\S*\s+0x([0-9a-f]+)", t)  # (a subroutine: entered only by CALL)
        if c and int(c.group(1), 16) in index:
            leaders.add(index[int(c.group(1), 16)])
            calls.add(index[int(c.group(1), 16)])
    starts = sorted(leaders)
    block = {}
    for b, s in enumerate(starts):
        for i in range(s, starts[b + 1] if b + 1 < len(starts) else len(ins)):
            block[i] = b
    nb = len(starts)
    succ = [set() for _ in range(nb + 1)]  # (block nb: a root before the entry and the subroutines)
    indirect = []
    for b, s in enumerate(starts):
        last = (starts[b + 1] if b + 1 < len(starts) else len(ins)) - 1
        t = ins[last][1]
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) in index:
            succ[b].add(block[index[int(m.group(1), 16)]])
        if re.search(r"\b(BRX|JMX)\b", t):
            indirect.append(b)
        # (BRA.DIV branches only when the warp has diverged: conditional, though not predicated)
        ends = not t.startswith("@") and ((m and not t.startswith("BRA.DIV")) or re.search(r"\b(EXIT|RET|BRX|JMX)\b", t))
        if not ends and last + 1 < len(ins):
            succ[b].add(b + 1)
    subs = {block[i] for i in calls}
    entered = {c for b, ss in enumerate(succ) for c in ss if b < c}
    # An indirect branch (a switch's jump table, in constant memory) may go to any block that no
    # edge enters from below (a case can be a loop's header, entered from above by its back edge):
    # an over-approximation that keeps each case under its switch's dominators. (Should it give a
    # block a false entry, that block's loop loses its dominating header: IrreducibleFlow, loudly.)
    orphans = [b for b in range(1, nb) if b not in entered and b not in subs]
    for b in indirect:
        succ[b].update(orphans)
    succ[nb] = {0} | subs | (set() if indirect else set(orphans))
    pred = [set() for _ in range(nb + 1)]
    for b, ss in enumerate(succ):
        for c in ss:
            pred[c].add(b)
    idom = dominators(succ, pred)
    loops = []
    for b, ss in enumerate(succ):
        for h in ss:
            # A back edge is one into a block that dominates its source. ptxas places retry blocks
            # (an mbarrier try_wait's, a BRA.DIV's divergent fallback) after the kernel's body and
            # branches from them back into it; such an edge runs backwards in the listing, but its
            # target does not dominate it (the block that branched out reaches it directly), so it
            # is not a loop: taken for one, its "body" ran from the kernel's entry.
            if b in idom and dominates(idom, h, b):
                body, stack = {h}, [b]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(p for p in pred[x] if p in idom)
                loops.append(body)
    cyc = cycle_without_back_edges(succ, idom)
    if cyc is not None:
        raise IrreducibleFlow(f"irreducible control flow through the block at 0x{ins[starts[cyc]][0]:x}: "
                              "a cycle with no dominating header, which this census cannot place")
    lost = [a for i, (a, t) in enumerate(ins) if "HGMMA" in t and block[i] not in idom]
    if lost:
        raise IrreducibleFlow(f"{len(lost)} HGMMA the flow from the entry does not reach (first at 0x{lost[0]:x})")
    return block, loops


def census(funcs):
    """(name, k-loop count, Counter of LDL/STL sites by place) for every fused_grouped_gemm function."""
    out = []
    for name, ins in funcs:
        if "fused_grouped_gemm" not in name:
            continue
        try:
            block, loops = loops_of(ins)
        except IrreducibleFlow as e:
            out.append((name, -1, collections.Counter({str(e): 1})))
            continue
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
        if nk < 0:
            print(f"[kloop] {name}: {next(iter(where))}")
            bad.append(f"{name}: the census cannot place its loops")
            continue
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
