#!/usr/bin/env python3
"""v107: per-kernel SASS instruction counts by issue class (ALU / FMA pipe / IMAD.WIDE / tensor / other), two builds.

    cuobjdump -sass A > a.txt; cuobjdump -sass B > b.txt; python3 sass_pipes.py a.txt b.txt REGEX

Prints the kernels whose class counts differ and whose name matches REGEX. The listing is parsed by
scripts/sass_census.py; anonymous-namespace hashes (per build) are normalised so the two builds' kernels pair up.
"""
import collections
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../scripts"))
import sass_census  # noqa: E402  (the project's SASS listing parser)

ALU = {"LOP3", "SHF", "IADD3", "LEA", "PRMT", "ISETP", "SEL", "IABS", "FSEL", "FSETP", "LOP", "SHL", "SHR", "IMNMX",
       "VIADD", "BMSK", "PLOP3"}
FMA = {"IMAD", "HMUL2", "HFMA2", "FFMA", "FMUL", "FADD", "HADD2", "IMUL"}


def classes(path):
    out = {}
    for name, body in sass_census.functions(open(path).read()).items():
        name = re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+_(\w+?)_cu_[0-9a-f]{8}", r"ANON_\1", name)
        c = collections.Counter()
        for _, text in body:
            op = sass_census.opcode(text)
            wide = re.sub(r"^@!?U?P[T0-9]+\s+", "", text).startswith("IMAD.WIDE")
            c["IMADW" if wide else "FMA" if op in FMA else "ALU" if op in ALU else
              "TENSOR" if op in ("HMMA", "HGMMA") else "other"] += 1
        out[name] = c
    return out


a, b = classes(sys.argv[1]), classes(sys.argv[2])
for f, ca in a.items():
    cb = b.get(f)
    if cb is None or ca == cb or not re.search(sys.argv[3], f):
        continue
    print(f[:110])
    print("  main", dict(ca))
    print("  fold", dict(cb))
