#!/usr/bin/env python3
"""Per-kernel SASS of two builds, compared: is a refactor's device code byte-for-byte unchanged?

    scripts/compare_sass.py BEFORE_DIR AFTER_DIR [--cuobjdump PATH]

Each DIR holds object files (*.o) of the library's kernel units, e.g. copies of
build/CMakeFiles/fp4gemm.dir/src/kernels/sm90/*.o (only the units whose sources exist: ninja does
not delete stale objects). Every function's full `cuobjdump -sass` listing (instructions only, no
addresses or encodings) is compared by name; prints the functions that differ (with their
instruction counts), those in one build only (anonymous-namespace names carry a per-build hash),
and the HGMMA count of each build. Exit status 1 when a function present in both differs.
"""
import argparse
import glob
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_census  # noqa: E402  (the project's SASS listing parser)


def functions(cuobjdump, objects):
    """name -> instruction texts (no addresses), over every function of the objects."""
    out = {}
    for o in objects:
        text = subprocess.run([cuobjdump, "-sass", o], capture_output=True, text=True, check=True).stdout
        out.update({name: [t for _, t in body] for name, body in sass_census.functions(text).items()})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--cuobjdump", default=os.environ.get("CUOBJDUMP", "cuobjdump"))
    args = ap.parse_args()
    a = functions(args.cuobjdump, sorted(glob.glob(os.path.join(args.before, "*.o"))))
    b = functions(args.cuobjdump, sorted(glob.glob(os.path.join(args.after, "*.o"))))
    same = differ = 0
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b:
            print("only in", "before" if k in a else "after", k[:120])
        elif a[k] == b[k]:
            same += 1
        else:
            differ += 1
            print("DIFF", k[:120], len(a[k]), "->", len(b[k]), "instructions")
    hgmma = lambda d: sum(1 for k in d for i in d[k] if i.startswith("HGMMA"))
    print(f"{same} functions identical, {differ} different; HGMMA before {hgmma(a)}, after {hgmma(b)}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
