"""Batch invariance of the MoE expert layer: does a token's output row depend on the other tokens
in the batch? For each shape and format, `--probes` tokens are run alone (T = 1) and then inside
batches of other random tokens (T in --batches, the probe at a random position, a fresh routing
for the others); the probe's row must be the same bits every time. Prints, per shape and format,
how many (probe, batch) pairs differed and the largest absolute difference.

    python3 bench/batch_invariance.py [--shapes gpt-oss-120b,Qwen3-30B-A3B,DeepSeek-V3]
                                      [--acts bf16,nvfp4] [--batches 37,64,200] [--probes 8]

Each case runs with the layer's default and with MoeLayer(batch_invariant=True) (no stream-K split
of a tile's K between CTAs: the schedule's one batch-dependent summation order). Weights: random e2m1 nibbles with E4M3 /
UE8M0 scales in the normal range (within a few binades of 1/8); tokens: standard normal bf16.
Needs torch and an sm_90 GPU.
"""
import argparse

import numpy as np
import torch

from fp4gemm import moe

SHAPES = {  # experts, hidden, inter, topk, activation
    "gpt-oss-120b": (128, 2880, 2880, 4, "swigluoai"),
    "Qwen3-30B-A3B": (128, 2048, 768, 8, "silu"),
    "DeepSeek-V3": (256, 7168, 2048, 8, "silu"),
    "Mixtral-8x7B": (8, 4096, 14336, 2, "silu"),
}


def weights(g, dev, e, rows, cols, fmt):
    vec = 16 if fmt == "nvfp4" else 32
    w = torch.randint(0, 256, (e, rows, cols // 2), generator=g, dtype=torch.uint8, device=dev)
    if fmt == "nvfp4":  # E4M3 codes 0x28..0x38 (1/32 .. 1)
        s = torch.randint(0x28, 0x39, (e, rows, cols // vec), generator=g, device=dev)
    else:  # UE8M0 codes 120..127 (2^-7 .. 1)
        s = torch.randint(120, 128, (e, rows, cols // vec), generator=g, device=dev)
    return w, s.to(torch.uint8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="gpt-oss-120b,Qwen3-30B-A3B,DeepSeek-V3")
    ap.add_argument("--acts", default="bf16,nvfp4")
    ap.add_argument("--batches", default="37,64,200")
    ap.add_argument("--probes", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    dev = torch.device("cuda")
    batches = [int(b) for b in args.batches.split(",")]
    print(torch.cuda.get_device_name(), flush=True)
    for name in args.shapes.split(","):
        e, h, i, k, activation = SHAPES[name]
        for act in args.acts.split(","):
            fmt = "nvfp4" if act == "nvfp4" else "mxfp4"
            g = torch.Generator(device=dev).manual_seed(args.seed)
            w13, s13 = weights(g, dev, e, 2 * i, h, fmt)
            w2, s2 = weights(g, dev, e, h, i, fmt)
            kw = dict(a1_scale=0.05, a2_scale=0.05) if act == "nvfp4" else {}
            for invariant in (False, True):
                layer = moe.MoeLayer(w13, s13, w2, s2, max_tokens=max(batches), topk=k, act_format=act,
                                     activation=activation, scale_layout="linear", batch_invariant=invariant, **kw)
                probe(layer, g, dev, args, e, h, k, batches, f"{name:15s} {act:6s} batch_invariant={invariant!s:5s}")
                del layer
            torch.cuda.empty_cache()


def probe(layer, g, dev, args, e, h, k, batches, label):
    rng = np.random.default_rng(args.seed + 1)
    differed, pairs, worst = 0, 0, 0.0
    for p in range(args.probes):
        x = torch.randn((1, h), generator=g, device=dev).to(torch.bfloat16)
        ids = torch.tensor(rng.permutation(e)[:k][None], dtype=torch.int32, device=dev)
        wts = torch.rand((1, k), generator=g, device=dev)
        alone = layer.run(x, ids, wts).clone()
        for t in batches:
            xs = torch.randn((t, h), generator=g, device=dev).to(torch.bfloat16)
            all_ids = torch.tensor(np.stack([rng.permutation(e)[:k] for _ in range(t)]), dtype=torch.int32,
                                   device=dev)
            ws = torch.rand((t, k), generator=g, device=dev)
            at = int(rng.integers(0, t))
            xs[at], all_ids[at], ws[at] = x[0], ids[0], wts[0]
            row = layer.run(xs, all_ids, ws)[at]
            pairs += 1
            if not torch.equal(row.view(torch.int16), alone[0].view(torch.int16)):
                differed += 1
                worst = max(worst, float((row.float() - alone[0].float()).abs().max()))
    print(f"{label}: {differed} of {pairs} (probe, batch) pairs differ from the probe alone; "
          f"max |diff| {worst:.4g}", flush=True)


if __name__ == "__main__":
    main()
