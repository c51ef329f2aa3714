#!/usr/bin/env python3
"""How far apart a consumer thread's two weight loads sit in the MoE kernels' wide k-loops.

In the fused kernel's mainloop (src/device/mainloop.cuh, load_half) a consumer thread reads 8 bytes
of each of its two weight rows, r and r + 8, per half: two LDS.64 in the SASS. Issued back to back,
their shared-memory latencies overlap; ptxas at its default register-usage level once gave both one
register pair in the MoE kernels, so the second load waited until the first's value was used, 16-52
instructions later: two latencies in a row per k-block, 1.5-2.5 % of the 136-160-token classes'
time (docs/PERF.md v65). CMakeLists.txt compiles the MoE units at --register-usage-level=10 for it.

    python3 scripts/sass_load_pairs.py --objects "a.cu.o;b.cu.o" --max-gap 8 [--min-n 144]

For every MoeDeviceSchedule / MoeDeviceScheduleGlu function: its k-loops (scripts/sass_local_memory.py's
loops: the innermost loops that hold HGMMA) whose HGMMA has N >= min-n (the k-block-group path, one
half per k-block set), the LDS.64 in program order taken two by two, and the instruction distance
within each pair. Exits 1 when a pair is more than max-gap apart, when a kernel has no such k-loop,
or when there is no MoE kernel at all (the parse would be wrong). Also takes a saved cuobjdump -sass
listing instead of --objects (the host tier's self-test: tests/fixtures/load_pair_gap.sass).

The *Pieces schedulers' kernels (WeightLayout::pieces) read a thread's two rows with one LDS.128 per half: no pair
to space. For them the check is that their wide k-loops hold those LDS.128 and no LDS.64 (the parse and the layout).
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sass_local_memory import loops_of, parse, sass_of_objects  # (same directory)


def pair_gaps(funcs, min_n):
    """(name, [(N, [gap, ...]) per wide k-loop]) for every MoE fused kernel."""
    out = []
    for name, ins in funcs:
        if "fused_grouped_gemm" not in name or "MoeDeviceSchedule" not in name:
            continue
        block, loops = loops_of(ins)
        hg = {block[i] for i, (_, t) in enumerate(ins) if "HGMMA" in t}
        hloops = [l for l in loops if l & hg]
        kloops = [l for l in hloops if not any(o is not l and o < l and (o & hg) for o in hloops)]
        rows = []
        for loop in kloops:
            idx = [i for i in range(len(ins)) if block[i] in loop]
            ns = {int(m.group(1)) for i in idx for m in [re.search(r"HGMMA\.64x(\d+)x16", ins[i][1])] if m}
            if not ns or min(ns) < min_n:
                continue
            lds = [i for i in idx if re.match(r"(@!?P\d+ )?LDS\.64\b", ins[i][1])]
            if "Pieces" in name:  # (the count of LDS.128 and of LDS.64, in place of the gaps)
                wide = sum(1 for i in idx if re.match(r"(@!?P\d+ )?LDS\.128\b", ins[i][1]))
                rows.append((min(ns), [-wide, len(lds)]))
                continue
            rows.append((min(ns), [lds[k + 1] - lds[k] for k in range(0, len(lds) - 1, 2)]))
        out.append((name, sorted(rows)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", nargs="?", help="a cuobjdump -sass listing")
    ap.add_argument("--objects", nargs="+", help="object files (or ';'-separated lists): run cuobjdump -sass on them")
    ap.add_argument("--max-gap", type=int, default=8, help="the most instructions between a pair's two loads")
    ap.add_argument("--min-n", type=int, default=144, help="k-loops whose HGMMA N is at least this")
    args = ap.parse_args()
    if not args.sass and not args.objects:
        ap.error("a SASS listing or --objects")
    funcs = sass_of_objects(args.objects, "[pairs]") if args.objects else parse(args.sass)
    results = pair_gaps(funcs, args.min_n)
    bad = [] if results else ["no MoE fused kernel found"]
    for name, rows in results:
        if "Pieces" in name:
            wide = sum(-gaps[0] for _, gaps in rows)
            pairs = sum(gaps[1] for _, gaps in rows)
            print(f"[pairs] {name}: {len(rows)} k-loops with N >= {args.min_n}; {wide} LDS.128, {pairs} LDS.64 (pieces)")
            if not rows or wide == 0 or pairs != 0:
                bad.append(f"{name}: the pieces kernel's wide k-loops should hold LDS.128 weight loads and no LDS.64 "
                           f"({wide} and {pairs}; the parse, or the layout's loads)")
            continue
        worst = max((g for _, gaps in rows for g in gaps), default=None)
        print(f"[pairs] {name}: {len(rows)} k-loops with N >= {args.min_n}; largest gap {worst}")
        if not rows or worst is None:
            bad.append(f"{name}: no k-loop with N >= {args.min_n} holding LDS.64 pairs (the parse would be wrong)")
        elif worst > args.max_gap:
            where = sorted({n for n, gaps in rows if max(gaps, default=0) > args.max_gap})
            bad.append(f"{name}: a weight-load pair {worst} instructions apart (> {args.max_gap}) in the N = {where} "
                       "k-loops: ptxas serialised the two LDS.64 (CMakeLists.txt's register-usage level)")
    for b in bad:
        print(f"[pairs] FAILED: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
