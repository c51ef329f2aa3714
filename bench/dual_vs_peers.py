"""GPU MODE's nvfp4_dual_gemm shapes: the fused fp4gemm drop-in against the unfused fp4gemm path (two
plain pointer-array GEMMs, FP32 out, + torch silu * mul) and torch bf16 (two matmuls on operands
dequantised in advance + silu * mul), in one run; floor = 4 M N K / the bf16 rate measured here
(torch.matmul 8192^3). Events around each call (eager) or graph replay, L2 flushed, median of 50.

Usage: PYTHONPATH=... python3 bench/dual_vs_peers.py [--json out.json]
"""
import argparse
import json

import torch

from bench_timing import time_us

import fp4gemm
from fp4gemm import gpumode
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
        # The unfused fp4gemm path: two plain pointer-array GEMMs (the stream-K kernel, FP32 out) bound
        # once, then torch's silu * mul.
        c1 = torch.empty((m, n), dtype=torch.float32, device="cuda")
        c2 = torch.empty_like(c1)
        # (the permuted scales: blocked bytes on the GPU; GPU MODE keeps the linear ones on the host)
        av, pa, pb1, pb2 = a.view(u8), *(d[..., 0].view(u8) for d in data[6:9])
        g1 = fp4gemm.GroupedGemm([av], [b1.view(u8)], [pa], [pb1], [c1], out_dtype="float32", scale_layout="blocked")
        g2 = fp4gemm.GroupedGemm([av], [b2.view(u8)], [pa], [pb2], [c2], out_dtype="float32", scale_layout="blocked")

        def unfused():
            g1.run()
            g2.run()
            return (torch.nn.functional.silu(c1) * c2).half()

        t_unfused = time_us(unfused, iters=50)
        graph_u = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph_u):
            unfused()
        t_unfused_graph = time_us(graph_u.replay, iters=50)

        def dq(p, s):
            return torch.from_numpy(dequantize(p.view(u8).cpu().numpy(), s.view(u8).cpu().numpy(), "nvfp4")).to(
                device="cuda", dtype=torch.bfloat16)

        xa, w1, w2 = dq(a, sfa), dq(b1, sfb1), dq(b2, sfb2)
        t_bf16 = time_us(lambda: (torch.nn.functional.silu(xa @ w1.T) * (xa @ w2.T)).half(), iters=50)
        floor = 4 * m * n * k / rate * 1e6
        row = dict(m=m, n=n, k=k, fused_us=fused, fused_graph_us=fused_graph, unfused_us=t_unfused,
                   unfused_graph_us=t_unfused_graph, torch_bf16_us=t_bf16, floor_us=floor)
        rows.append(row)
        print(f"M {m:4d} N {n} K {k}: fused {fused:7.1f} us ({floor / fused:.2f} of floor {floor:.1f}; as a graph "
              f"{fused_graph:.1f}), "
              f"unfused fp4gemm {t_unfused:7.1f} ({t_unfused / fused:.2f}x; graph {t_unfused_graph:.1f}, "
              f"{t_unfused_graph / fused_graph:.2f}x), torch bf16 {t_bf16:7.1f} ({t_bf16 / fused:.2f}x)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu, "bf16_tflops": rate / 1e12, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
