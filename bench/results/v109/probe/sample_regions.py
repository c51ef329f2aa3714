# v109: stall samples by code region (argv[2] bytes, hex; default 0x800) of ncu SASS CSV rows, per table of the
# export: each region's share, its HGMMA shapes and top stall reasons (the CSV's 18 reason columns; HGMMA samples
# are mostly outside them).
# Usage: python3 sample_regions.py sass_nonzero_tT.csv [0x1000]
import collections
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../scripts"))
from ncu_sass_stalls import load, num  # noqa: E402

ALL = "Warp Stall Sampling (All Samples)"
width = int(sys.argv[2], 16) if len(sys.argv) > 2 else 0x800
for t, (_, rows) in enumerate(load(sys.argv[1]), 1):
    reasons = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c]
    regions = collections.defaultdict(list)
    for r in rows:
        regions[int(r["Address"], 16) // width * width].append(r)
    tot = sum(num(r[ALL]) for r in rows)
    print(f"== table {t}: {tot:.0f} samples")
    for a, rs in sorted(regions.items(), key=lambda kv: -sum(num(r[ALL]) for r in kv[1]))[:14]:
        s = sum(num(r[ALL]) for r in rs)
        hg = collections.Counter(re.search(r"HGMMA\.(\S+?)\.F32", r["Source"]).group(1) for r in rs if "HGMMA" in r["Source"])
        rc = sorted(((sum(num(r[c]) for r in rs), c[6:]) for c in reasons), reverse=True)[:6]
        print(f"  {a:#x} {s:7.0f} ({100 * s / tot:4.1f}%) n={len(rs)} hgmma={dict(hg)} | "
              + ", ".join(f"{c} {v:.0f}" for v, c in rc))
