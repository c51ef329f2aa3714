"""Issue 52's table from rounds of ``bench/tk_layer_pieces.py`` (tk_layer.py's JSON, one file per round).

Each cell: fp4gemm's ``MoeLayer.run`` and triton_kernels' layer under CUDA-graph replay, median / min / max over the
sustained rounds (the ones given with --rounds; >= 100 reps each, say so with --min-reps), the short burst beside them
(--burst, optional), the ratio tk / fp4gemm by the medians, the cell's floor and the share of it fp4gemm's median
reaches, and the issue's target for the cell with whether the median meets it -- on an H200 only, the card the
issue's targets are set for (on another card "met" is left empty). The GPU is read from the files, which must all
name the same one (figures from different cards do not compare).

The floor, as the issue defines it: the larger of the HBM floor -- the active experts' MXFP4 weight and scale bytes
(active x 3 H I x (0.5 + 1/32), as the peers' tk_layer.py counts them) over the GPU's copy rate (read + write counted) -- and the
bf16 floor, 2 T k 3 H I over the GPU's cuBLAS bf16 rate. The rates default to the issue's H200 figures (4.24 TB/s,
790 TFLOP/s); on another card the floor column is left out unless both are given (--copy-rate-tbps, e.g. from
bench/results/v96/probe/copy_rate.py, and --bf16-tflops).

Usage:
  python3 bench/issue52_rounds.py --rounds r1/tk_layer.json r2/tk_layer.json [--burst r3/tk_layer.json]
                                  [--json out.json] [--min-reps 100] [--copy-rate-tbps R --bf16-tflops F]
Prints a markdown table; --json writes the same figures.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

# Issue 52's targets (µs, H200): >= 1.5x triton_kernels' layer or within 0.8 of the floor, as the issue lists them.
TARGETS_US = {
    "gpt-oss-120b": {1: 25.0, 8: 120.0, 64: 433.0, 512: 572.0, 4096: 1454.0},
    "qwen3-30b-a3b": {1: 16.0, 8: 60.0, 64: 108.0, 512: 170.0, 4096: 545.0},
}
IMPL_OURS, IMPL_PEER = "fp4gemm_run", "tk"
# The H200 rates for the floors: the measured device copy rate and cuBLAS bf16 rate.
H200_COPY_TBPS, H200_BF16_TFLOPS = 4.24, 790.0


def cell_floor(r: dict, copy_tbps: float, bf16_tflops: float) -> dict | None:
    """The cell's floors (µs) from a tk_layer.py result row, or None where the row lacks the dims."""
    try:
        T, k, H, I, active = (int(r[x]) for x in ("T", "topk", "H", "I", "active_experts"))
    except (KeyError, TypeError, ValueError):
        return None
    hbm = active * 3.0 * H * I * (0.5 + 1.0 / 32.0) / (copy_tbps * 1e12) * 1e6
    bf16 = 2.0 * T * k * 3.0 * H * I / (bf16_tflops * 1e12) * 1e6
    return {"hbm_us": hbm, "bf16_us": bf16, "us": max(hbm, bf16), "bound": "hbm" if hbm >= bf16 else "bf16"}


def load(path: str) -> dict:
    with open(path) as f:
        d = json.load(f)
    if "results" not in d or "gpu" not in d:
        raise SystemExit(f"{path}: not a tk_layer.py result (no 'results' / 'gpu')")
    return d


def cell_times(d: dict, impl: str) -> dict[tuple[str, int], float]:
    out = {}
    for r in d["results"]:
        t = r.get("impls", {}).get(impl, {}).get("graph_us")
        if t is not None:
            out[(r["shape"], int(r["T"]))] = float(t)
    return out


def summarise(rounds: list[dict], burst: dict | None = None, min_reps: int = 0, copy_tbps: float | None = None,
              bf16_tflops: float | None = None) -> dict:
    if not rounds:
        raise SystemExit("--rounds: at least one file")
    gpus = {d["gpu"] for d in rounds + ([burst] if burst else [])}
    if len(gpus) != 1:
        raise SystemExit(f"the files name different GPUs {sorted(gpus)}: figures from different cards do not compare")
    for d in rounds:
        reps = d.get("settings", {}).get("reps", 0)
        if reps < min_reps:
            raise SystemExit(f"a sustained round ran {reps} reps (< --min-reps {min_reps})")
    ours = [cell_times(d, IMPL_OURS) for d in rounds]
    peer = [cell_times(d, IMPL_PEER) for d in rounds]
    gpu = next(iter(gpus))
    targets_apply = "H200" in gpu
    if (copy_tbps is None) != (bf16_tflops is None):
        raise SystemExit("--copy-rate-tbps and --bf16-tflops: give both or neither")
    if copy_tbps is not None and (copy_tbps <= 0 or bf16_tflops <= 0):
        raise SystemExit("--copy-rate-tbps / --bf16-tflops: must be positive")
    rates = (copy_tbps, bf16_tflops) if copy_tbps is not None else (
        (H200_COPY_TBPS, H200_BF16_TFLOPS) if targets_apply else None)
    # each cell's dims from the rounds that carry them; rounds that route a cell onto different experts do not compare
    rows: dict[tuple[str, int], dict] = {}
    for d in rounds:
        for r in d["results"]:
            key = (r["shape"], int(r["T"]))
            if "active_experts" not in r:
                continue
            seen = rows.setdefault(key, r)
            if int(seen["active_experts"]) != int(r["active_experts"]):
                raise SystemExit(f"{key[0]} T {key[1]}: the rounds routed onto {seen['active_experts']} and "
                                 f"{r['active_experts']} active experts (different routings do not compare)")
    burst_ours = cell_times(burst, IMPL_OURS) if burst is not None else {}
    burst_peer = cell_times(burst, IMPL_PEER) if burst is not None else {}
    keys = sorted(set().union(*ours), key=lambda k: (k[0], k[1]))
    cells = []
    for key in keys:
        f = [o[key] for o in ours if key in o]
        t = [p[key] for p in peer if key in p]
        shape, T = key
        target = TARGETS_US.get(shape, {}).get(T)
        c = {"shape": shape, "T": T, "rounds": len(f),
             "fp4gemm_us": {"median": statistics.median(f), "min": min(f), "max": max(f)},
             "tk_us": {"median": statistics.median(t), "min": min(t), "max": max(t)} if t else None,
             "target_us": target}
        c["x_tk"] = c["tk_us"]["median"] / c["fp4gemm_us"]["median"] if t else None
        c["met"] = None if target is None or not targets_apply else c["fp4gemm_us"]["median"] <= target
        fl = cell_floor(rows[key], *rates) if rates is not None and key in rows else None
        c["floor"] = fl
        c["of_floor"] = fl["us"] / c["fp4gemm_us"]["median"] if fl is not None else None
        if burst is not None:
            c["fp4gemm_burst_us"] = burst_ours.get(key)
            c["tk_burst_us"] = burst_peer.get(key)
        cells.append(c)
    return {"gpu": gpu, "targets_apply": targets_apply, "sustained_rounds": len(rounds),
            "floor_rates": None if rates is None else {"copy_tbps": rates[0], "bf16_tflops": rates[1]},
            "reps": [d.get("settings", {}).get("reps") for d in rounds],
            "burst_reps": burst.get("settings", {}).get("reps") if burst else None, "cells": cells}


def markdown(s: dict) -> str:
    burst = s["burst_reps"] is not None
    floors = s.get("floor_rates") is not None
    head = ["shape", "T", f"fp4gemm median [min, max] over {s['sustained_rounds']}", "tk median", "x tk"]
    head += ["floor (bound)", "of floor"] if floors else []
    head += ["fp4gemm burst", "tk burst"] if burst else []
    head += ["target", "met"]
    lines = [f"{s['gpu']}: CUDA-graph replay, µs; sustained rounds of {s['reps']} reps"
             + (f", burst of {s['burst_reps']}" if burst else "")
             + ("" if s["targets_apply"] else "; the targets are set for an H200: 'met' left empty")
             + (f"; floors at {s['floor_rates']['copy_tbps']:g} TB/s copy, {s['floor_rates']['bf16_tflops']:g} TFLOP/s bf16"
                if floors else "; no floors (rates for this card not given)"), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    fmt = lambda v: "-" if v is None else f"{v:.1f}"
    for c in s["cells"]:
        f = c["fp4gemm_us"]
        row = [c["shape"], str(c["T"]), f"{f['median']:.1f} [{f['min']:.1f}, {f['max']:.1f}]",
               fmt(c["tk_us"]["median"] if c["tk_us"] else None), "-" if c["x_tk"] is None else f"{c['x_tk']:.2f}"]
        if floors:
            fl = c.get("floor")
            row += ["-", "-"] if fl is None else [f"{fl['us']:.1f} ({fl['bound']})", f"{c['of_floor']:.2f}"]
        if burst:
            row += [fmt(c.get("fp4gemm_burst_us")), fmt(c.get("tk_burst_us"))]
        row += [fmt(c["target_us"]), "-" if c["met"] is None else ("yes" if c["met"] else "no")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", nargs="+", required=True, help="tk_layer.json of each sustained round")
    ap.add_argument("--burst", help="tk_layer.json of the short burst")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--min-reps", type=int, default=0, help="refuse sustained rounds with fewer reps")
    ap.add_argument("--copy-rate-tbps", type=float,
                    help="the card's copy rate (TB/s, read + write) for the HBM floor; with --bf16-tflops (both or "
                         "neither). Default: the issue's 4.24 on an H200, no floors on another card")
    ap.add_argument("--bf16-tflops", type=float,
                    help="the card's cuBLAS bf16 rate (TFLOP/s) for the bf16 floor; with --copy-rate-tbps. Default: the "
                         "issue's 790 on an H200, no floors on another card")
    a = ap.parse_args(argv)
    s = summarise([load(p) for p in a.rounds], load(a.burst) if a.burst else None, a.min_reps, a.copy_rate_tbps,
                  a.bf16_tflops)
    print(markdown(s))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
