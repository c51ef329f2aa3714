"""GPU MODE's nvfp4_dual_gemm shapes: the fused fp4gemm drop-in against the unfused fp4gemm path (two
MoE-GEMM runs with one expert + torch silu * mul) and torch bf16 (two matmuls on operands
dequantised in advance + silu * mul), in one run; floor = 4 M N K / the bf16 rate measured here
(torch.matmul 8192^3). Events around each call, L2 flushed, median of 50.

Usage: PYTHONPATH=... python3 bench/dual_vs_peers.py [--json out.json]
"""
import argparse
import json

import torch

from bench_timing import time_us

from fp4gemm import gpumode, moe
from fp4gemm.formats import dequantize

SHAPES = [(256, 4096, 7168), (512, 4096, 7168), (256, 3072, 4096), (512, 3072, 7168)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t = time_us(lambda: x @ x, iters=10)
    rate = 2 * 8192**3 / (t * 1e-6)
    gpu = torch.cuda.get_device_name()
    print(f"dual GEMM on {gpu}; bf16 rate {rate / 1e12:.1f} TFLOP/s (torch.matmul 8192^3)")
    rows = []
    for m, n, k in SHAPES:
        data = gpumode.dual_generate_input(m, n, k, l=1, seed=1)
        fused = time_us(lambda: gpumode.dual_gemm_custom_kernel(data), iters=50)
        # The same as a CUDA graph: the GPU time without the Python calls' host gaps.
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            gpumode.dual_gemm_custom_kernel(data)
        fused_graph = time_us(graph.replay, iters=50)
        a, b1, b2, sfa, sfb1, sfb2 = (d[:, :, 0] for d in data[:6])
        u8 = torch.uint8
        off = torch.tensor([0, m], dtype=torch.int32, device="cuda")
        sa = sfa.view(u8).cuda().contiguous()
        g1 = moe.MoeGemm(b1.view(u8).unsqueeze(0), sfb1.view(u8).cuda().contiguous().unsqueeze(0), format="nvfp4",
                         scale_layout="linear", out_dtype="float32", capacity=m)
        g2 = moe.MoeGemm(b2.view(u8).unsqueeze(0), sfb2.view(u8).cuda().contiguous().unsqueeze(0), format="nvfp4",
                         scale_layout="linear", out_dtype="float32", capacity=m)
        av = a.view(u8)

        def unfused():
            r1 = g1.run(av, sa, expert_offsets=off)
            r2 = g2.run(av, sa, expert_offsets=off)
            return (torch.nn.functional.silu(r1) * r2).half()

        t_unfused = time_us(unfused, iters=50)

        def dq(p, s):
            return torch.from_numpy(dequantize(p.view(u8).cpu().numpy(), s.view(u8).cpu().numpy(), "nvfp4")).to(
                device="cuda", dtype=torch.bfloat16)

        xa, w1, w2 = dq(a, sfa), dq(b1, sfb1), dq(b2, sfb2)
        t_bf16 = time_us(lambda: (torch.nn.functional.silu(xa @ w1.T) * (xa @ w2.T)).half(), iters=50)
        floor = 4 * m * n * k / rate * 1e6
        row = dict(m=m, n=n, k=k, fused_us=fused, fused_graph_us=fused_graph, unfused_us=t_unfused,
                   torch_bf16_us=t_bf16, floor_us=floor)
        rows.append(row)
        print(f"M {m:4d} N {n} K {k}: fused {fused:7.1f} us ({floor / fused:.2f} of floor {floor:.1f}; as a graph "
              f"{fused_graph:.1f}), "
              f"unfused fp4gemm {t_unfused:7.1f} ({t_unfused / fused:.2f}x), torch bf16 {t_bf16:7.1f} "
              f"({t_bf16 / fused:.2f}x)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu, "bf16_tflops": rate / 1e12, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
