"""The MoE expert layer: fp4gemm's (the `fp4gemm layer` CLI, fp4gemm::MoeLayer) against the same
layer in torch bf16, in one run on one GPU.

torch bf16 layer (weights dequantised in advance, bf16 [E, 2I, H] and [E, H, I]):
    sort the top-k ids (torch.sort, stable) -> offsets (bincount + cumsum, on the device)
    x[token_of_row] -> torch._grouped_mm(x, w13^T, offs) -> silu(gate) * up
    -> torch._grouped_mm(., w2^T, offs) -> * topk_weight -> index_add_ into [T, H] (FP32), -> bf16
torch FP8 layer (the same composition with torch._scaled_grouped_mm: weights e4m3 with a scale
per output row, converted in advance; the tokens and the SwiGLU output quantised to e4m3 per row
inside the timed layer, as an FP8 serving stack does; a speed peer, not exact).
All are timed with CUDA events around the whole layer, L2 flushed before each repetition, the
routing fixed (uniform top-k, distinct experts per token), data random.

Usage: python3 bench/layer_vs_torch.py --cli build/device/tools/fp4gemm [--json out.json]
"""
import argparse
import json
import re
import subprocess
import sys

import torch

from bench_timing import time_us

MODELS = {  # name: (experts, hidden, inter, topk, activation)
    "DeepSeek-V3": (256, 7168, 2048, 8, "silu"),
    "Qwen3-30B-A3B": (128, 2048, 768, 8, "silu"),
    "gpt-oss-120b": (128, 2880, 2880, 4, "swigluoai"),
    "Mixtral-8x7B": (8, 4096, 14336, 2, "silu"),
}
TOKENS = (1, 8, 32, 128, 256, 1024, 4096)


def route(ids, experts):
    """Stable sort of the flat top-k ids: (order, the token of each sorted row, int32 end offsets)."""
    flat = ids.reshape(-1)
    order = torch.sort(flat, stable=True).indices
    offs = torch.cumsum(torch.bincount(flat, minlength=experts), 0).to(torch.int32)
    return order, order // ids.shape[1], offs


def swiglu(h, activation):
    if activation == "silu":  # w13 stacked: gate rows, then up rows
        inter = h.shape[1] // 2
        return torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
    g, u = h[:, 0::2].clamp(max=7.0), h[:, 1::2].clamp(-7.0, 7.0)  # gpt-oss: interleaved gate / up
    return g * torch.sigmoid(1.702 * g) * (u + 1)


def combine(y, weights, order, tok, tokens):
    """Weighted sum of each token's rows in FP32 (index_add), rounded to bf16."""
    y = y.float() * weights.reshape(-1)[order, None]
    out = torch.zeros(tokens, y.shape[1], dtype=torch.float32, device=y.device)
    out.index_add_(0, tok, y)
    return out.to(torch.bfloat16)


def torch_layer(x, ids, weights, w13, w2, activation):
    order, tok, offs = route(ids, w13.shape[0])
    h = torch._grouped_mm(x[tok], w13.transpose(1, 2), offs=offs)
    y = torch._grouped_mm(swiglu(h, activation), w2.transpose(1, 2), offs=offs)
    return combine(y, weights, order, tok, ids.shape[0])


FP8_MAX = 448.0


def fp8_rowwise(t):
    """e4m3 rows with one FP32 scale per row (amax / 448), as torch._scaled_grouped_mm takes them."""
    s = (t.float().abs().amax(dim=-1) / FP8_MAX).clamp(min=1e-12)
    return (t.float() / s.unsqueeze(-1)).to(torch.float8_e4m3fn), s


def fp8_weights(w):
    """[E, N, K] bf16 -> e4m3 [E, N, K] and scales [E, N], one expert at a time (no FP32 copy of all)."""
    q = torch.empty(w.shape, dtype=torch.float8_e4m3fn, device=w.device)
    s = torch.empty(w.shape[0], w.shape[1], dtype=torch.float32, device=w.device)
    for e in range(w.shape[0]):
        q[e], s[e] = fp8_rowwise(w[e])
    return q, s


def torch_fp8_layer(x, ids, weights, w13, w13_s, w2, w2_s, activation):
    order, tok, offs = route(ids, w13.shape[0])
    xq, xs = fp8_rowwise(x)
    h = torch._scaled_grouped_mm(xq[tok], w13.transpose(1, 2), xs[tok], w13_s, offs=offs, out_dtype=torch.bfloat16)
    aq, a_s = fp8_rowwise(swiglu(h, activation))
    y = torch._scaled_grouped_mm(aq, w2.transpose(1, 2), a_s, w2_s, offs=offs, out_dtype=torch.bfloat16)
    return combine(y, weights, order, tok, ids.shape[0])


def fp4gemm_layer_us(cli, E, H, I, T, k, act, activation):
    cmd = [cli, "layer", "--experts", str(E), "--hidden", str(H), "--inter", str(I), "--tokens", str(T),
           "--topk", str(k), "--act", act, "--activation", activation, "--iters", "30", "--warmup", "5"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    m = re.search(r"^time: ([0-9.]+) us", out.stdout, re.M)
    return float(m.group(1)) if m else float("nan"), out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--acts", default="nvfp4,bf16")
    ap.add_argument("--no-fp8", action="store_true", help="skip the torch FP8 layer peer")
    ap.add_argument("--json")
    args = ap.parse_args()
    gpu = torch.cuda.get_device_name()
    print(f"MoE layer on {gpu}: fp4gemm (CLI) vs torch bf16 (_grouped_mm + silu*mul + index_add) and torch FP8 "
          f"(_scaled_grouped_mm, rowwise e4m3), us (median)")
    results = []
    for name in args.models.split(","):
        E, H, I, k, activation = MODELS[name]
        torch.manual_seed(0)
        w13 = (torch.randn(E, 2 * I, H, device="cuda") * 0.02).to(torch.bfloat16)
        w2 = (torch.randn(E, H, I, device="cuda") * 0.02).to(torch.bfloat16)
        fp8 = None
        if not args.no_fp8:
            try:
                fp8 = (*fp8_weights(w13), *fp8_weights(w2))
            except Exception as e:  # noqa: BLE001 -- reported, not hidden
                print(f"  FP8 weights failed on {name}: {e}", file=sys.stderr)
        for T in map(int, args.tokens.split(",")):
            x = torch.randn(T, H, device="cuda").to(torch.bfloat16)
            ids = torch.stack([torch.randperm(E, device="cuda")[:k] for _ in range(T)]).to(torch.int32)
            wts = torch.rand(T, k, device="cuda")
            try:
                t_torch = time_us(lambda: torch_layer(x, ids, wts, w13, w2, activation))
            except Exception as e:  # noqa: BLE001 -- reported, not hidden
                print(f"  torch failed on {name} T={T}: {e}", file=sys.stderr)
                t_torch = float("nan")
            t_fp8 = float("nan")
            if fp8 is not None:
                try:
                    t_fp8 = time_us(lambda: torch_fp8_layer(x, ids, wts, fp8[0], fp8[1], fp8[2], fp8[3], activation))
                except Exception as e:  # noqa: BLE001 -- reported, not hidden
                    print(f"  torch FP8 failed on {name} T={T}: {str(e).splitlines()[0][:200]}", file=sys.stderr)
            row = {"model": name, "tokens": T, "torch_bf16_us": t_torch, "torch_fp8_us": t_fp8}
            for act in args.acts.split(","):
                t, _ = fp4gemm_layer_us(args.cli, E, H, I, T, k, act, activation)
                row[f"fp4gemm_{act}_us"] = t
            results.append(row)
            parts = "  ".join(f"{a} {row[f'fp4gemm_{a}_us']:9.1f} ({t_torch / row[f'fp4gemm_{a}_us']:4.2f}x)"
                              for a in args.acts.split(","))
            first = row[f"fp4gemm_{args.acts.split(',')[0]}_us"]
            print(f"{name:14s} T={T:5d}  torch bf16 {t_torch:9.1f}  torch fp8 {t_fp8:9.1f}  fp4gemm {parts}"
                  f"  (fp8 / first: {t_fp8 / first:4.2f}x)", flush=True)
        del w13, w2, fp8
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
