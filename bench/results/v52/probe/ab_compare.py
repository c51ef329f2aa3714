#!/usr/bin/env python3
"""Compares A/B bench JSONs and digest logs: python3 ab_compare.py DIR  (files <suite>_<A|B><round>.json/.txt).
Per suite: B/A ratio of the per-case best-of-rounds median time (median, min, max over cases, the worst 3),
and whether every case's output digest matches."""
import glob, json, os, re, statistics, sys
from collections import defaultdict
d = sys.argv[1]
def case_time(c):
    if "fused" in c: return c["fused"]["time_us"]["median"]
    if "fp4gemm" in c: return c["fp4gemm"]["time_us"]["median"]
    return c["time_us"]["median"]
def label(c):
    return f'{c.get("index")} {c.get("name") or c.get("model") or c.get("gemm","")} T{c.get("tokens","")}'
suites = defaultdict(lambda: defaultdict(dict))  # suite -> side -> case -> [times]
for f in sorted(glob.glob(os.path.join(d, "*.json"))):
    m = re.match(r"(.+)_([AB])(\d)\.json$", os.path.basename(f))
    if not m: continue
    suite, side = m.group(1), m.group(2)
    try: doc = json.load(open(f))
    except Exception as e: print("unreadable", f, e); continue
    for c in doc.get("cases", []):
        suites[suite][side].setdefault(label(c), []).append(case_time(c))
for suite, sides in suites.items():
    A, B = sides.get("A", {}), sides.get("B", {})
    common = [k for k in A if k in B]
    if not common: print(f"{suite}: no common cases"); continue
    r = {k: min(B[k]) / min(A[k]) for k in common}
    v = sorted(r.values())
    worst = sorted(r.items(), key=lambda kv: -abs(kv[1] - 1))[:3]
    print(f"{suite}: {len(common)} cases, B/A median {statistics.median(v):.4f} (min {v[0]:.4f}, max {v[-1]:.4f}); "
          f"worst " + "; ".join(f"{k}: {min(A[k]):.2f}->{min(B[k]):.2f} ({x:.3f})" for k, x in worst))
# digests
dg = defaultdict(dict)
for f in glob.glob(os.path.join(d, "*.txt")):
    m = re.match(r"(.+)_([AB])(\d)\.txt$", os.path.basename(f))
    if not m: continue
    for line in open(f, errors="replace"):
        t = line.split()
        if len(t) == 4 and t[0] == "digest":
            dg[(m.group(1), t[1], t[2])][m.group(2) + m.group(3)] = t[3]
bysuite = defaultdict(lambda: [0, 0, 0, []])
for (suite, s2, idx), v in dg.items():
    st = bysuite[suite]
    a = {x for k, x in v.items() if k[0] == "A"}; b = {x for k, x in v.items() if k[0] == "B"}
    if not a or not b: st[2] += 1; continue
    if len(a) == 1 and a == b: st[0] += 1
    else: st[1] += 1; st[3].append(f"{s2}#{idx} A{sorted(a)} B{sorted(b)}")
for suite, (same, diff, one, bad) in sorted(bysuite.items()):
    print(f"digests {suite}: {same} identical, {diff} differ, {one} one-sided" + ("; " + "; ".join(bad[:6]) if bad else ""))
