#!/usr/bin/env python3
"""Host-tier check (ctest kernel_stack_frames): the fast kernels' stack frames may not grow.

Reads `cuobjdump -res-usage` of the built library objects (no GPU needed), takes every function of
the fast path -- the fused GEMM kernel instantiations, the activation pre-pass and the MoE layer's
kernels and the expert-parallel exchange kernels (FAST_PATH below) -- and compares its STACK bytes with tests/kernel_stack_budget.json:

  * a kernel over its budget fails (a new spill or a register array indexed at run time);
  * a fast-path kernel missing from the budget fails (a new instantiation needs a line);
  * LOCAL memory other than 0 fails.

A kernel below its budget passes and is reported, so the budget can be lowered in the same change.
`--write` rewrites the budget from the objects (after a deliberate change; say why in the commit).

Where the stack lives and what it costs (the SASS, sm_90a, nvcc 13.0): docs/DESIGN.md "Stack frames".
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys

FAST_PATH = re.compile(r"fused_grouped_gemm|dequant_activations|quantize_kernel|combine_kernel|align_routing|routing_grid_|decode_gate_up|decode_down_combine|decode_fused|decode_wide_prep|decode_wide_combine|ep_count_kernel|ep_send_kernel|ep_back_kernel")


def find_cuda_tool(name: str) -> str | None:
    """A CUDA tool (cuobjdump, nvdisasm) on PATH, beside nvcc, in the CUDA root, or from NVIDIA's
    nvidia-cuda-<name> wheel."""
    cands = [shutil.which(name)]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(os.path.join(os.path.dirname(nvcc), name))
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            cands.append(os.path.join(root, "bin", name))
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvidia")
        for base in (spec.submodule_search_locations or []) if spec else []:
            cands += glob.glob(os.path.join(base, "cu*", "bin", name))
    except (ImportError, ValueError):
        pass
    for c in cands:
        if c and os.path.isfile(c):
            if not os.access(c, os.X_OK):
                try:  # (a wheel unpacked without its mode bits)
                    os.chmod(c, os.stat(c).st_mode | 0o111)
                except OSError:
                    continue
            return c
    return None


def find_cuobjdump() -> str | None:
    return find_cuda_tool("cuobjdump")


def stable_name(mangled: str) -> str:
    """The mangled name without the per-build hash of an anonymous namespace."""
    return re.sub(r"\d+_GLOBAL__N__[0-9a-f]{8}_\d+_(\w+?)_cu_[0-9a-f]{8}", r"(anon:\1.cu)", mangled)


def res_usage(cuobjdump: str, obj: str) -> dict[str, tuple[int, int]]:
    """{function: (STACK, LOCAL)} of one object."""
    out = subprocess.run([cuobjdump, "-res-usage", obj], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"[stack] cuobjdump -res-usage {obj} failed:\n{out.stderr}")
    funcs: dict[str, tuple[int, int]] = {}
    name = None
    for line in out.stdout.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            name = stable_name(m.group(1))
            continue
        m = re.search(r"STACK:(\d+).*?LOCAL:(\d+)", line)
        if m and name:
            funcs[name] = (int(m.group(1)), int(m.group(2)))
            name = None
    return funcs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", nargs="+", required=True, help="object files (or ';'-separated lists)")
    ap.add_argument("--budget", required=True, help="tests/kernel_stack_budget.json")
    ap.add_argument("--write", action="store_true", help="rewrite the budget from these objects")
    ap.add_argument("--self-test", action="store_true",
                    help="check against the budget with 8 B taken off every non-zero entry: must fail (the "
                         "check can see growth)")
    args = ap.parse_args()
    # (device code lives in the CUDA translation units' objects only)
    objects = [o for arg in args.objects for o in arg.split(";") if o.endswith(".cu.o") and os.path.isfile(o)]
    tool = find_cuobjdump()
    if tool is None:
        print("[stack] FAILED: cuobjdump not found (CUDA toolkit's bin/, or `pip install nvidia-cuda-cuobjdump`; "
              "scripts/deps.sh installs it)", file=sys.stderr)
        return 1
    found: dict[str, tuple[int, int]] = {}
    for obj in objects:
        for fn, usage in res_usage(tool, obj).items():
            if FAST_PATH.search(fn):
                found[fn] = usage
    if not found:
        print(f"[stack] FAILED: no fast-path kernel in {len(objects)} objects", file=sys.stderr)
        return 1
    if args.write:
        with open(args.budget, "w") as f:
            json.dump({fn: s for fn, (s, _) in sorted(found.items())}, f, indent=1)
            f.write("\n")
        print(f"[stack] wrote {len(found)} budgets to {args.budget}")
        return 0
    with open(args.budget) as f:
        budget = json.load(f)
    if args.self_test:
        budget = {fn: max(0, b - 8) for fn, b in budget.items()}
    failures = []
    for fn, (stack, local) in sorted(found.items()):
        limit = budget.get(fn)
        if limit is None:
            failures.append(f"{fn}: STACK {stack} B, but it has no budget (add it to {args.budget})")
        elif stack > limit:
            failures.append(f"{fn}: STACK {stack} B > budget {limit} B (a new spill or a run-time-indexed "
                            "register array: read the SASS for LDL/STL)")
        elif stack < limit:
            print(f"[stack] {fn}: STACK {stack} B, below its budget {limit} B (lower the budget)")
        if local != 0:
            failures.append(f"{fn}: LOCAL {local} B")
    print(f"[stack] {len(found)} fast-path kernels in {len(objects)} objects checked with {tool}; "
          f"largest stack {max(s for s, _ in found.values())} B")
    for line in failures:
        print("[stack] FAILED: " + line, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
