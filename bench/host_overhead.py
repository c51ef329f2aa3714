#!/usr/bin/env python3
"""Host time per call (enqueue only) of fp4gemm's MoE layer entry points, and what it is made of.

    python3 bench/host_overhead.py [--calls 400] [--json out.json]

Needs a CUDA GPU with torch and the fp4gemm package importable. Each entry point runs 20 warm-up
calls, then `--calls` calls timed with perf_counter, best of 5 rounds (the GPU drains between; the
launches queue behind the GPU's work, so this is the host's cost, not the layer's GPU time). The
layer is small (E 16, H 256, I 128, top-4, T 8) so that the GPU never backs the queue up.

Also timed: the torch primitives the binding reads per tensor, a torch.empty, and the custom-op
dispatch of a do-nothing op (torch.library.custom_op against Library.define + impl), so the
report says where the microseconds go. Issue 21's target: <= 10 us per call for MoeLayer.run,
fp4gemm.ops.fused_experts and torch.ops.fp4gemm.fused_experts.
"""
import argparse
import json
import sys
import time

import numpy as np
import torch

import fp4gemm
from fp4gemm import moe, ops


def per_call_us(fn, calls):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):  # best of five rounds: the host's own noise (other processes) only adds
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def layer_problem(e=16, h=256, i=128, k=4, t=8, seed=41):
    rng = np.random.default_rng(seed)
    dev = "cuda"
    w13 = torch.from_numpy(rng.integers(0, 256, (e, 2 * i, h // 2), dtype=np.uint8)).to(dev)
    w2 = torch.from_numpy(rng.integers(0, 256, (e, h, i // 2), dtype=np.uint8)).to(dev)
    # E4M3 scales in [2^-3, 2^3): codes 0x20..0x4f; blocked layout bytes per expert
    s13 = torch.from_numpy(rng.integers(0x20, 0x50, (e, fp4gemm.scale_bytes("blocked", 2 * i, h // 16)),
                                        dtype=np.uint8)).to(dev)
    s2 = torch.from_numpy(rng.integers(0x20, 0x50, (e, fp4gemm.scale_bytes("blocked", h, i // 16)),
                                       dtype=np.uint8)).to(dev)
    x = torch.randn(t, h, device=dev).to(torch.bfloat16)
    ids = torch.from_numpy(np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32)).to(dev)
    wts = torch.rand(t, k, device=dev)
    return w13, s13, w2, s2, x, ids, wts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("host_overhead: no CUDA device visible; nothing to measure", file=sys.stderr)
        return 2
    print(f"[host overhead] {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{args.calls} calls x best of 5", flush=True)
    w13, s13, w2, s2, x, ids, wts = layer_problem()
    out = torch.empty_like(x)
    layer = moe.MoeLayer(w13, s13, w2, s2, max_tokens=8, topk=4)
    raw = layer._layer
    stream = torch.cuda.current_stream().cuda_stream
    results = {}

    def row(name, fn):
        us = per_call_us(fn, args.calls)
        results[name] = round(us, 2)
        print(f"  {name:<58s} {us:7.2f} us", flush=True)

    # Spin the host up first (frequency scaling made the first rows of a run read high).
    t_end = time.perf_counter() + 0.3
    while time.perf_counter() < t_end:
        raw.run(x, ids, wts, out, stream, 0, None, None)
    torch.cuda.synchronize()
    print("entry points (issue 21: <= 10 us each):")
    row("MoeLayer.run(out=...)", lambda: layer.run(x, ids, wts, out=out))
    row("MoeLayer.run (allocates out)", lambda: layer.run(x, ids, wts))
    row("ops.fused_experts", lambda: ops.fused_experts(x, w13, s13, w2, s2, wts, ids))
    row("moe.fused_experts", lambda: moe.fused_experts(x, w13, s13, w2, s2, wts, ids))
    native = ops.native_status()["fused_experts"]
    row("torch.ops.fp4gemm.fused_experts" + (" (C++ kernel)" if native == "" else f" (Python kernel: {native})"),
        lambda: torch.ops.fp4gemm.fused_experts(x, w13, s13, w2, s2, wts, ids, None, None, None, "silu", "nvfp4", "",
                                                "blocked", 1.0, 1.0))
    # the same op with its Python kernel (what the C++ kernel replaces), for the A/B
    row("torch.ops.fp4gemm._fused_experts_python (Python kernel)",
        lambda: torch.ops.fp4gemm._fused_experts_python(x, w13, s13, w2, s2, wts, ids, None, None, None, "silu",
                                                        "nvfp4", "", "blocked", 1.0, 1.0))
    # The MoE grouped GEMM's entry points (E 8, 12 tokens x top-2, N 64, K 128, W4A4 NVFP4, gathered).
    from fp4gemm.testing import random_moe

    d = random_moe(8, 64, 128, 12, 2, seed=24)

    def dev(v):
        return torch.from_numpy(np.ascontiguousarray(v)).cuda()

    ga, gsa, gw, gws, goff, gg = (dev(v) for v in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather))
    gout = torch.empty((gg.shape[0], gw.shape[1]), dtype=torch.bfloat16, device="cuda")
    print("MoE grouped GEMM (issue 21: the existing torch ops <= 10 us):")
    row("fp4gemm.moe.grouped_gemm(out=...)", lambda: moe.grouped_gemm(ga, gsa, gw, gws, goff, gather_index=gg, out=gout))
    row("ops.moe_grouped_gemm_out", lambda: ops.moe_grouped_gemm_out(ga, gsa, gw, gws, goff, gout, gg))
    row("ops.moe_grouped_gemm (allocates)", lambda: ops.moe_grouped_gemm(ga, gsa, gw, gws, goff, gg,
                                                                         out_dtype=torch.bfloat16))
    row("torch.ops.fp4gemm.moe_grouped_gemm_out",
        lambda: torch.ops.fp4gemm.moe_grouped_gemm_out(ga, gsa, gw, gws, goff, gg, gout, None, None, "", "blocked"))
    row("torch.ops.fp4gemm.moe_grouped_gemm (allocates)",
        lambda: torch.ops.fp4gemm.moe_grouped_gemm(ga, gsa, gw, gws, goff, gg, None, None, "", "blocked",
                                                   torch.bfloat16))
    # the same ops with their Python kernels (what the C++ kernels replace), for the A/B
    row("torch.ops.fp4gemm._moe_grouped_gemm_out_python (Python kernel)",
        lambda: torch.ops.fp4gemm._moe_grouped_gemm_out_python(ga, gsa, gw, gws, goff, gg, gout, None, None, "",
                                                               "blocked"))
    row("torch.ops.fp4gemm._moe_grouped_gemm_python (Python kernel)",
        lambda: torch.ops.fp4gemm._moe_grouped_gemm_python(ga, gsa, gw, gws, goff, gg, None, None, "", "blocked",
                                                           torch.bfloat16))
    print("parts:")
    row("_fp4gemm.MoeLayer.run (binding + C++), stream given",
        lambda: raw.run(x, ids, wts, out, stream, 0, None, None))
    row("_fp4gemm.MoeLayer.run (binding + C++), current stream",
        lambda: raw.run(x, ids, wts, out, None, 0, None, None))
    row("_fp4gemm._read_tensors(x, ids, wts, out) (the binding's reads)",
        lambda: fp4gemm._fp4gemm._read_tensors(x, ids, wts, out))
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        row("MoeLayer.run(out=...) on a side stream (not the legacy default)",
            lambda: layer.run(x, ids, wts, out=out))
        row("_fp4gemm.MoeLayer.run on a side stream", lambda: raw.run(x, ids, wts, out, side.cuda_stream, 0, None, None))
    torch.cuda.synchronize()
    row("torch.empty((8, 256), bf16, cuda)", lambda: torch.empty((8, 256), dtype=torch.bfloat16, device="cuda"))
    row("torch.empty_like(x)", lambda: torch.empty_like(x))
    row("x.new_empty((8, 256), dtype=bf16)", lambda: x.new_empty((8, 256), dtype=torch.bfloat16))
    row("x.shape; x.stride(); x.dtype", lambda: (x.shape, x.stride(), x.dtype))
    row("x.is_cuda; x.get_device(); x.data_ptr()", lambda: (x.is_cuda, x.get_device(), x.data_ptr()))
    row("x.untyped_storage().data_ptr(), .nbytes()",
        lambda: (lambda s: (s.data_ptr(), s.nbytes()))(x.untyped_storage()))
    row("torch._C._cuda_getCurrentRawStream(0)", lambda: torch._C._cuda_getCurrentRawStream(0))
    row("torch.compiler.is_compiling()", lambda: torch.compiler.is_compiling())

    # Custom-op dispatch of a do-nothing op, both registration styles.
    result = torch.empty_like(x)
    @torch.library.custom_op("fp4gemm_probe::noop_custom", mutates_args=())
    def _noop_custom(a: torch.Tensor, b: torch.Tensor, s: str, f: float) -> torch.Tensor:
        return result  # (not an input: custom_op forbids returning an alias of one)

    lib = torch.library.Library("fp4gemm_probe", "FRAGMENT")
    lib.define("noop_lib(Tensor a, Tensor b, str s, float f) -> Tensor")
    lib.impl("noop_lib", lambda a, b, s, f: result, "CUDA")
    lib.define("noop_lib_out(Tensor a, Tensor(a!) b, str s, float f) -> ()")
    lib.impl("noop_lib_out", lambda a, b, s, f: None, "CUDA")
    row("torch.ops custom_op no-op (torch.library.custom_op)",
        lambda: torch.ops.fp4gemm_probe.noop_custom(x, out, "silu", 1.0))
    row("torch.ops no-op (Library.define + impl CUDA)", lambda: torch.ops.fp4gemm_probe.noop_lib(x, out, "silu", 1.0))
    row("torch.ops no-op mutating (Library.define + impl CUDA)",
        lambda: torch.ops.fp4gemm_probe.noop_lib_out(x, out, "silu", 1.0))
    torch.cuda.synchronize()
    layer.check()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "calls": args.calls,
                       "us_per_call": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
