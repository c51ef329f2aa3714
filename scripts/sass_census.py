#!/usr/bin/env python3
"""Instruction census of the fused kernel's k-block loop for one width class, from SASS alone
(no GPU needed): instructions per k-block on each path through the loop, and the opcode histogram.

    python3 scripts/sass_census.py build/device/CMakeFiles/fp4gemm.dir/src/kernels/sm90/fused_mxfp4.cu.o \\
        [--function MoeDeviceSchedule] [--hgmma 64x16x16]

Needs `cuobjdump` (and the `nvdisasm` it calls) on PATH: the CUDA toolkit's, or on a machine without
them the PyPI wheels nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm (13.2 disassembles sm_90a). The
loop is the innermost backward branch around the first HGMMA of that shape; it holds two k-blocks
(mainloop.cuh unrolls the register sets by two), so counts are halved. If-else diamonds inside the
loop (`@P BRA target` ... `BRA join` / target: ... join:) are reported as the two paths through it.
Used for docs/PERF.md's v20 census.
"""
import argparse
import collections
import re
import subprocess
import sys

INS = re.compile(r"^\s+/\*([0-9a-f]+)\*/\s+(.*?)\s*;")


def functions(sass):
    out, name, body = {}, None, []
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                out[name] = body
            name, body = m.group(1), []
            continue
        m = INS.match(line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2)))
    if name:
        out[name] = body
    return out


def opcode(text):
    text = re.sub(r"^@!?U?P[T0-9]+\s+", "", text)
    return text.split()[0].split(".")[0]


def census(body, shape):
    at = {a: i for i, (a, _) in enumerate(body)}
    first = next((i for i, (_, t) in enumerate(body) if f"HGMMA.{shape}." in t), None)
    if first is None:
        sys.exit(f"no HGMMA.{shape} in this function")
    # The innermost backward branch (a loop's back edge) that encloses the first HGMMA.
    best = None
    for i, (a, t) in enumerate(body):
        m = re.search(r"BRA (0x[0-9a-f]+)", t)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target <= body[first][0] < a and (best is None or a - target < best[1][0] - best[0]):
            best = (target, (a, i))
    if best is None:
        sys.exit("no loop around the HGMMA")
    start, (end, end_i) = best[0], best[1]
    loop = body[at[start]:end_i + 1]
    hgmma = sum(1 for _, t in loop if "HGMMA" in t)
    # Diamonds: @P BRA t (fall-through block ends with an unconditional BRA j just before t).
    fall_total = taken_total = 0
    for a, t in loop:
        m = re.match(r"@!?P[0-9]+ BRA (0x[0-9a-f]+)", t)
        if not m:
            continue
        target = int(m.group(1), 16)
        if not start <= target <= end or target <= a:
            continue
        prev = body[at[target] - 1][1] if target in at else ""
        j = re.match(r"BRA (0x[0-9a-f]+)", prev)
        if j:
            join = int(j.group(1), 16)
            fall_total += (target - 16 - a) // 16
            taken_total += (join - target) // 16
    static = len(loop)
    hist = collections.Counter(opcode(t) for _, t in loop)
    return static, hgmma, fall_total, taken_total, hist


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("object", help="a .cu.o (or a saved cuobjdump -sass listing, *.txt)")
    ap.add_argument("--function", default="MoeDeviceSchedule", help="substring of the kernel's mangled name")
    ap.add_argument("--hgmma", default="64x16x16", help="the width class's HGMMA shape")
    args = ap.parse_args()
    if args.object.endswith(".txt"):
        sass = open(args.object).read()
    else:
        try:
            sass = subprocess.run(["cuobjdump", "-sass", args.object], check=True, capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit(f"sass_census: cuobjdump failed ({e}); see the docstring for where to get it")
    fns = {n: b for n, b in functions(sass).items() if args.function in n}
    if not fns:
        sys.exit(f"sass_census: no function matching '{args.function}'")
    for name, body in fns.items():
        static, hgmma, fall, taken, hist = census(body, args.hgmma)
        blocks = hgmma / 16 * 2 if hgmma else 2  # 8 HGMMA per k-block (two halves x 4 k-steps) on 256-row tiles
        print(f"{name}\n  loop: {static} static instructions, {hgmma} HGMMA ({blocks:g} k-blocks)")
        if fall or taken:
            print(f"  per k-block: {(static - taken) / blocks:.1f} on the fall-through path, "
                  f"{(static - fall) / blocks:.1f} on the taken path of its if-else diamonds")
        else:
            print(f"  per k-block: {static / blocks:.1f}")
        print("  opcodes (whole loop): " + ", ".join(f"{op} {n}" for op, n in hist.most_common(14)))


if __name__ == "__main__":
    main()
