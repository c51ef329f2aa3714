# v109: stall samples per instruction class (HGMMA, mbarrier waits, decode ALU ops, ...) of ncu SASS CSV rows (the
# nonzero rows call11.sh keeps), per kernel. call11's cut kept only the first kernel's header, so its two kernels read
# as one table: argv[2] (hex) then splits it at that code address (GEMM1 below, GEMM2 above).
# Usage: python3 sample_classes.py sass_nonzero_tT.csv [0xSPLIT]
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../scripts"))
from ncu_sass_stalls import load, num, opcode  # noqa: E402

ALL = "Warp Stall Sampling (All Samples)"
DECODE = {"LOP3.LUT", "IMAD", "IMAD.SHL.U32", "SHF.R.U32.HI", "SHF.L.U32", "HMUL2.BF16_V2", "IMAD.U32",
          "IMAD.MOV.U32", "LDS.128", "LDS.U8", "PRMT", "SHF.L.U32.HI"}


def kernels(path, split):
    found = load(path)
    if split is None:
        return found
    rows = [r for _, rs in found for r in rs]
    return [("GEMM1", [r for r in rows if int(r["Address"], 16) < split]),
            ("GEMM2", [r for r in rows if int(r["Address"], 16) >= split])]


def kind(rs, i):
    op = opcode(rs[i]["Source"])
    if op.startswith("HGMMA"):
        return "HGMMA"
    if op == "BRA" and i > 0 and "TRYWAIT" in rs[i - 1]["Source"]:
        return "mbarrier wait (BRA after TRYWAIT)"
    if op.startswith("SYNCS"):
        return "SYNCS"
    if op in DECODE:
        return "decode/ALU (" + op.split(".")[0] + ")"
    return op if op.startswith("WARPGROUP") else "other"


for name, rs in kernels(sys.argv[1], int(sys.argv[2], 16) if len(sys.argv) > 2 else None):
    tot = sum(num(r[ALL]) for r in rs)
    c = collections.Counter()
    for i, r in enumerate(rs):
        c[kind(rs, i)] += num(r[ALL])
    print(f"{name}: {tot:.0f} samples")
    for k, v in c.most_common(14):
        print(f"   {k:40s} {v:7.0f} {100 * v / tot:5.1f}%")
