#!/usr/bin/env python3
"""Decode-path timing of fp4gemm.moe.MoeLayer (whichever package PYTHONPATH gives), W4A16 and W4A4
NVFP4, gpt-oss-120b and Qwen3-30B-A3B shapes, T in TOKENS: the layer's run captured in a CUDA graph,
median of REPS replays, each after an L2 flush of FLUSH kind (write: a 256 MiB memset, as tk_layer.py;
read: a 256 MiB read, leaving L2 clean; none: back to back). Prints one line per case and a digest of
the output (A/B builds must agree)."""
import hashlib, os, statistics, sys
import torch
import fp4gemm.moe as moe
tag = sys.argv[1]
TOKENS = [int(t) for t in os.environ.get("TOKENS", "1,2,3,4").split(",")]
FLUSHES = os.environ.get("FLUSH", "write").split(",")
REPS = int(os.environ.get("REPS", "100"))
ACTS = os.environ.get("ACTS", "bf16").split(",")
MODELS = {"gptoss": (128, 2880, 2880, 4, "swigluoai"), "qwen3": (128, 2048, 768, 8, "silu")}
dev = torch.device("cuda")
flush_buf = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
def flush(kind):
    if kind == "write": flush_buf.zero_()
    elif kind == "read": flush_buf.view(torch.int64).sum()
for name, (E, H, I, k, act) in MODELS.items():
    if os.environ.get("MODELS") and name not in os.environ["MODELS"].split(","): continue
    for af in ACTS:
        vec = 16 if af == "nvfp4" else 32
        g = torch.Generator(device=dev); g.manual_seed(1234)
        w13 = torch.randint(0, 256, (E, 2 * I, H // 2), dtype=torch.uint8, device=dev, generator=g)
        w2 = torch.randint(0, 256, (E, H, I // 2), dtype=torch.uint8, device=dev, generator=g)
        if af == "nvfp4":  # E4M3 codes of 0.125..1 (normal range)
            lo, hi = 0x28, 0x38
        else:  # UE8M0 codes 2^-7 .. 2^-1
            lo, hi = 120, 127
        s13 = torch.randint(lo, hi + 1, (E, 2 * I, H // vec), dtype=torch.uint8, device=dev, generator=g)
        s2 = torch.randint(lo, hi + 1, (E, H, I // vec), dtype=torch.uint8, device=dev, generator=g)
        layer = moe.MoeLayer(w13, s13, w2, s2, max_tokens=max(TOKENS), topk=k, act_format=af, activation=act,
                             scale_layout="linear")
        for T in TOKENS:
            x = torch.randn(T, H, dtype=torch.bfloat16, device=dev, generator=g)
            ids = torch.stack([torch.randperm(E, device=dev, generator=g)[:k] for _ in range(T)]).to(torch.int32)
            wts = torch.softmax(torch.randn(T, k, device=dev, generator=g), dim=-1)
            out = torch.empty(T, H, dtype=torch.bfloat16, device=dev)
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                for _ in range(3): layer.run(x, ids, wts, out=out)
                gr = torch.cuda.CUDAGraph()
                with torch.cuda.graph(gr, stream=s):
                    layer.run(x, ids, wts, out=out)
            torch.cuda.synchronize()
            res = []
            for fk in FLUSHES:
                ts = []
                for _ in range(REPS):
                    flush(fk)
                    torch.cuda._sleep(200000)
                    e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
                    e0.record(); gr.replay(); e1.record()
                    e1.synchronize(); ts.append(e0.elapsed_time(e1) * 1000)
                res.append(f"{fk} {statistics.median(ts):7.2f}")
            dg = hashlib.sha1(out.cpu().view(torch.int16).numpy().tobytes()).hexdigest()[:12]
            print(f"{tag} {name} {af} T{T}: " + " | ".join(res) + f"  digest {dg}", flush=True)
        del layer
