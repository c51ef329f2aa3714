#!/usr/bin/env python3
"""Where the MoE layer's decode path stops paying: each model of the layer suite at T = 1..8 tokens,
the decode path (`--decode-tokens 8`) against the general path (`--decode-tokens 0`), in one run,
through the CLI's `layer` command (L2 flushed before each rep, median of --iters). Prints a table
and, per model and activation type, the largest T up to which the decode path is faster at every
T -- the data behind MoeLayerOptions::decode_tokens' default (kDecodeTokensAuto) -- next to the
bound the layer picks today (from its describe() line).

Usage: python3 bench/decode_crossover.py --cli build/release/tools/fp4gemm [--acts bf16,nvfp4]
           [--models deepseek-v3,qwen3-30b-a3b,gpt-oss-120b,mixtral-8x7b] [--tokens 1-8] [--iters 100]
           [--json out.json]
No torch needed. Rounds alternate the two paths per cell (decode, general, decode, general, ...)
and each cell keeps the best median of --rounds.
"""
import argparse
import json
import re
import subprocess
import sys

MODELS = {  # name: (experts, hidden, inter, topk, activation) -- the layer suite's (tools/layer_problem.cpp)
    "deepseek-v3": (256, 7168, 2048, 8, "silu"),
    "qwen3-30b-a3b": (128, 2048, 768, 8, "silu"),
    "gpt-oss-120b": (128, 2880, 2880, 4, "swigluoai"),
    "mixtral-8x7b": (8, 4096, 14336, 2, "silu"),
}

TIME_RE = re.compile(r"^time: ([0-9.]+) us")
BOUND_RE = re.compile(r"decode path for T <= (\d+)")


def parse_time(text):
    """The median (us) of `fp4gemm layer`'s 'time: X us (median of N, ...)' line, or None."""
    for line in text.splitlines():
        m = TIME_RE.match(line.strip())
        if m:
            return float(m.group(1))
    return None


def parse_bound(text):
    """The decode bound describe() names ('decode path for T <= N'); 0 for 'no decode path'; None
    where the output says neither."""
    m = BOUND_RE.search(text)
    if m:
        return int(m.group(1))
    return 0 if "no decode path" in text else None


def run_layer(cli, model, act, tokens, decode_tokens, iters):
    e, h, i, k, activation = MODELS[model]
    cmd = [cli, "layer", "--experts", str(e), "--hidden", str(h), "--inter", str(i), "--topk", str(k), "--tokens",
           str(tokens), "--act", act, "--activation", activation, "--decode-tokens", str(decode_tokens), "--iters",
           str(iters)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    t = parse_time(out.stdout)
    if t is None:
        raise RuntimeError(f"no 'time:' line in the output of {' '.join(cmd)}")
    return t, out.stdout


def token_list(text):
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-"))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",")]


def crossover(rows):
    """Largest T such that the decode path is faster at every T' <= T (0: never faster at T 1)."""
    bound = 0
    for r in sorted(rows, key=lambda r: r["tokens"]):
        if r["decode_us"] < r["general_us"]:
            bound = r["tokens"]
        else:
            break
    return bound


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True, help="the fp4gemm CLI binary")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--acts", default="bf16,nvfp4")
    ap.add_argument("--tokens", default="1-8")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    models = a.models.split(",")
    for m in models:
        if m not in MODELS:
            sys.exit(f"--models: unknown model {m!r} (known: {', '.join(MODELS)})")
    tokens = token_list(a.tokens)
    if not tokens or min(tokens) < 1 or max(tokens) > 8:
        sys.exit("--tokens: 1..8 (the decode path's range)")
    result = {"cli": a.cli, "iters": a.iters, "rounds": a.rounds, "cells": []}
    print(f"{'model':14s} {'act':6s} {'T':>2s} {'decode_us':>10s} {'general_us':>10s} {'ratio':>6s}", flush=True)
    for model in models:
        for act in a.acts.split(","):
            rows = []
            for t in tokens:
                dec, gen = [], []
                for _ in range(a.rounds):
                    dec.append(run_layer(a.cli, model, act, t, 8, a.iters)[0])
                    gen.append(run_layer(a.cli, model, act, t, 0, a.iters)[0])
                r = {"model": model, "act": act, "tokens": t, "decode_us": min(dec), "general_us": min(gen)}
                rows.append(r)
                print(f"{model:14s} {act:6s} {t:2d} {r['decode_us']:10.2f} {r['general_us']:10.2f} "
                      f"{r['decode_us'] / r['general_us']:6.3f}", flush=True)
            _, text = run_layer(a.cli, model, act, 8, -1, 10)  # max_tokens 8: the bound is not clamped
            best, today = crossover(rows), parse_bound(text)
            print(f"  -> {model} {act}: decode path faster up to T {best}; the layer's default bound: "
                  f"{today if today is not None else '(not named in describe())'}", flush=True)
            result["cells"] += rows
            result.setdefault("crossover", []).append({"model": model, "act": act, "measured": best, "default": today})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
