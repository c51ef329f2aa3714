#!/usr/bin/env python3
"""A/B of the decode path's two kernels (A) against the split-K kernel (F, FP4GEMM_DECODE_FUSED=1 at plan
time), same weights, same process: fp4gemm.moe.MoeLayer.run captured in a CUDA graph, median (min, max)
of REPS replays each after a 256 MiB write (L2 flushed with dirty lines, as tk_layer.py), ROUNDS
interleaved rounds; gpt-oss-120b and Qwen3-30B-A3B shapes, W4A16 MXFP4 and W4A4 NVFP4, T in TOKENS.
Outputs: F against A (max |diff|, both are FP32-summed in different orders) and both against the general
path (decode_tokens = 0) relative to the output's scale."""
import os, statistics, sys
import torch
import fp4gemm.moe as moe
TOKENS = [int(t) for t in os.environ.get("TOKENS", "1,2,3,4").split(",")]
REPS = int(os.environ.get("REPS", "100"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))
ACTS = os.environ.get("ACTS", "bf16,nvfp4").split(",")
LAYOUT = os.environ.get("LAYOUT", "linear")
MODELS = {"gptoss": (128, 2880, 2880, 4, "swigluoai"), "qwen3": (128, 2048, 768, 8, "silu")}
dev = torch.device("cuda")
flush_buf = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
def make(env, **kw):
    if env: os.environ["FP4GEMM_DECODE_FUSED"] = "1"
    else: os.environ.pop("FP4GEMM_DECODE_FUSED", None)
    try: return moe.MoeLayer(**kw)
    finally: os.environ.pop("FP4GEMM_DECODE_FUSED", None)
for name, (E, H, I, k, act) in MODELS.items():
    if os.environ.get("MODELS") and name not in os.environ["MODELS"].split(","): continue
    for af in ACTS:
        vec = 16 if af == "nvfp4" else 32
        g = torch.Generator(device=dev); g.manual_seed(1234)
        w13 = torch.randint(0, 256, (E, 2 * I, H // 2), dtype=torch.uint8, device=dev, generator=g)
        w2 = torch.randint(0, 256, (E, H, I // 2), dtype=torch.uint8, device=dev, generator=g)
        lo, hi = (0x28, 0x38) if af == "nvfp4" else (120, 127)
        s13 = torch.randint(lo, hi + 1, (E, 2 * I, H // vec), dtype=torch.uint8, device=dev, generator=g)
        s2 = torch.randint(lo, hi + 1, (E, H, I // vec), dtype=torch.uint8, device=dev, generator=g)
        kw = dict(w13=w13, w13_scales=s13, w2=w2, w2_scales=s2, max_tokens=max(TOKENS), topk=k, act_format=af,
                  activation=act, scale_layout=LAYOUT)  # (random codes: any layout)
        layers = {"A": make(False, **kw), "F": make(True, **kw), "G": make(False, decode_tokens=0, **kw)}
        print(f"# {name} {af}: F plan: {layers['F'].describe() if hasattr(layers['F'], 'describe') else '?'}", flush=True)
        for T in TOKENS:
            x = torch.randn(T, H, dtype=torch.bfloat16, device=dev, generator=g)
            ids = torch.stack([torch.randperm(E, device=dev, generator=g)[:k] for _ in range(T)]).to(torch.int32)
            wts = torch.softmax(torch.randn(T, k, device=dev, generator=g), dim=-1)
            outs, graphs = {}, {}
            s = torch.cuda.Stream()
            for key, L in layers.items():
                out = torch.full((T, H), float("nan"), dtype=torch.bfloat16, device=dev)
                with torch.cuda.stream(s):
                    for _ in range(3): L.run(x, ids, wts, out=out)
                    gr = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(gr, stream=s):
                        L.run(x, ids, wts, out=out)
                torch.cuda.synchronize()
                outs[key], graphs[key] = out, gr
            times = {"A": [], "F": []}
            for rnd in range(ROUNDS):
                for key in ("A", "F"):
                    ts = []
                    for _ in range(REPS):
                        flush_buf.zero_()
                        torch.cuda._sleep(200000)
                        e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
                        e0.record(); graphs[key].replay(); e1.record()
                        e1.synchronize(); ts.append(e0.elapsed_time(e1) * 1000)
                    times[key].append((statistics.median(ts), min(ts), max(ts)))
            a, f, gen = (outs[key].float() for key in ("A", "F", "G"))
            scale = gen.abs().max().item() or 1.0
            line = " | ".join(f"{key} " + " ".join(f"{m:6.2f} ({lo:.1f}-{hi:.1f})" for m, lo, hi in v) for key, v in times.items())
            print(f"{name} {af} T{T}: {line} | F/A {min(m for m, _, _ in times['F']) / min(m for m, _, _ in times['A']):.3f}"
                  f" | nan A/F {int(a.isnan().sum())}/{int(f.isnan().sum())} max|F-A|/scale {((f - a).abs().max().item()) / scale:.2e}"
                  f" max|A-G| {((a - gen).abs().max().item()) / scale:.2e} max|F-G| {((f - gen).abs().max().item()) / scale:.2e}", flush=True)
        del layers
