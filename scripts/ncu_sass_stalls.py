#!/usr/bin/env python3
"""Per-instruction stall samples from ncu's SASS source page exported as CSV
(`ncu --import R.ncu-rep --page source --csv --print-source sass > R_sass.csv`), read on any machine.

    python3 scripts/ncu_sass_stalls.py R_sass.csv [--top 25] [--around HGMMA]

Prints the instructions with the most warp-stall samples (all samples and not-issued samples), then for every
instruction whose text contains --around (default HGMMA) the samples on it and on the two instructions before it,
with the stall-reason columns the export has (those whose header holds "stall", by their totals). ncu writes one
table per profiled kernel; each is reported on its own.
"""
import argparse
import csv
import io
import sys


def tables(text):
    """Splits the export into (kernel line, rows) tables: a header row starts with "Address"."""
    out, name, buf = [], "", []
    for line in text.splitlines():
        if line.startswith('"Kernel Name"'):  # (the next table's kernel)
            if buf:
                out.append((name, buf))
                buf = []
            name = next(csv.reader([line]))[1]
        elif line.startswith('"Address"') or line.startswith("Address,"):
            if buf:
                out.append((name, buf))
            buf = [line]
        elif buf and line.startswith('"'):
            buf.append(line)
        elif line.strip():
            if buf:
                out.append((name, buf))
                buf = []
            name = line.strip()
    if buf:
        out.append((name, buf))
    return [(n, list(csv.DictReader(io.StringIO("\n".join(b))))) for n, b in out]


def num(v):
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    """The instruction's opcode, past a predicate (`@!P0 BRA ...` -> `BRA`); '?' for an empty line."""
    words = [w for w in source.split() if not w.startswith("@")]
    return words[0] if words else "?"


def load(path):
    """The export's tables as (kernel, rows); a table with a header only is left out."""
    return [(n, rows) for n, rows in tables(open(path, errors="replace").read()) if rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--around", default="HGMMA")
    a = ap.parse_args()
    found = load(a.csv)
    if not found:
        sys.exit(f"{a.csv}: no table with an Address column (is it ncu's source page as CSV?)")
    for name, rows in found:
        cols = list(rows[0].keys())
        src = next((c for c in cols if c.lower() == "source"), cols[1])
        alls = next((c for c in cols if "Sampling (All" in c), None)
        noti = next((c for c in cols if "Not-issued" in c or "Not Issued" in c), None)
        reasons = [c for c in cols if "stall" in c.lower() and c not in (alls, noti)]
        total = sum(num(r.get(alls, 0)) for r in rows) if alls else 0
        print(f"== {name[:150]}\n   {len(rows)} instructions, {total:.0f} samples; columns: {alls}, {noti}, "
              f"{len(reasons)} reason columns")
        if reasons:
            tot = sorted(((sum(num(r[c]) for r in rows), c) for c in reasons), reverse=True)
            print("   reasons: " + ", ".join(f"{c} {v:.0f}" for v, c in tot[:12] if v > 0))
        key = alls or (reasons[0] if reasons else None)
        if key is None:
            continue
        print(f"   top {a.top} by {key}:")
        for r in sorted(rows, key=lambda r: -num(r.get(key, 0)))[: a.top]:
            extra = "" if noti is None else f" (not issued {num(r[noti]):.0f})"
            print(f"   {r.get('Address', '?'):>8} {num(r[key]):7.0f}{extra}  {r[src][:90]}")
        print(f"   around each {a.around}: samples on the two before it and on it")
        for i, r in enumerate(rows):
            if a.around in r[src]:
                seq = rows[max(0, i - 2): i + 1]
                print("   " + " | ".join(f"{opcode(s[src])} {num(s[key]):.0f}" for s in seq))


if __name__ == "__main__":
    main()
