"""python -m fp4gemm.bench --moe: SPEC 4's MoE suite with the torch peers in the same run.

For each model GEMM (gate-up and down of DeepSeek-V3, Qwen3-30B-A3B, gpt-oss-120b, Mixtral-8x7B)
and token count, on realistic data (random nibbles, scales over the normal range) and a uniform
top-k routing:
  * fp4gemm.moe.grouped_gemm (W4A4 in --format, or W4A16 with --act bf16), gather fused: CUDA events,
    L2 flushed before each repetition;
  * torch._grouped_mm bf16 on the weights dequantised in advance, activations already gathered into
    expert order, device offsets (the peer at its best), timed the same way;
  * torch._scaled_grouped_mm FP8 (rowwise-scaled e4m3 of the same operands: a speed peer, not
    exact) and fp4gemm's pointer-array path (the routing read on the host once, one group per
    active expert; W4A4), timed the same way;
  * the dynamic-routing loop of both: every step a new top-k routing (device tensors drawn before
    the loop), aligned on the device (fp4gemm.moe.align_routing), gathered and multiplied; wall time
    per step over back-to-back steps, nothing synchronised in between. Eager ("dyn": Python and
    launch overheads included) and as a CUDA graph captured once and replayed with a new routing
    copied into its input each step ("graph": how vLLM/SGLang run decode).
  * floors, measured at the start of the same run (torch.mm bf16 8192^3, a 1 GiB device copy): per
    case max(FLOPs / bf16 rate, bytes / copy bandwidth), bytes as the CLI counts them (the active
    experts' weights and scales, the activations once, the output), and fp4gemm's fraction of it.
The C++ tool's `fp4gemm bench --suite moe` times fp4gemm with the same floors (cuBLAS, cudaMemcpy).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, List, Optional, Sequence

import torch

import fp4gemm
from fp4gemm import moe, ops, torch_utils

# (model, experts, top-k, [(gemm, N, K), ...]) as in SPEC 4 and tools/moe_bench.cpp.
MODELS = [
    ("deepseek-v3", 256, 8, [("gate-up", 4096, 7168), ("down", 7168, 2048)]),
    ("qwen3-30b-a3b", 128, 8, [("gate-up", 1536, 2048), ("down", 2048, 768)]),
    ("gpt-oss-120b", 128, 4, [("gate-up", 5760, 2880), ("down", 2880, 2880)]),
    ("mixtral-8x7b", 8, 2, [("gate-up", 28672, 4096), ("down", 4096, 14336)]),
]
TOKENS = (1, 16, 64, 256, 1024, 4096, 16384)
_DEVICE = "cuda"


def _num(v, width: int) -> str:
    return f"{v:{width}.1f}" if v is not None else f"{'n/a':>{width}}"


def suite() -> List[dict]:
    return [dict(model=m, gemm=g, experts=e, topk=k, n=n, kdim=kd, tokens=t)
            for m, e, k, gemms in MODELS for g, n, kd in gemms for t in TOKENS]


def _scales(shape, fmt: str, gen) -> torch.Tensor:
    # E4M3 normal codes 0x08..0x7E (2^-6..448), UE8M0 117..137 (2^-10..2^10).
    lo, hi = (0x08, 0x7F) if fmt == "nvfp4" else (117, 138)
    return torch.randint(lo, hi, shape, dtype=torch.uint8, device=_DEVICE, generator=gen)


def _topk(tokens: int, experts: int, k: int, gen) -> torch.Tensor:
    return torch.rand(tokens, experts, device=_DEVICE, generator=gen).topk(k, dim=1).indices


def _events_us(fn: Callable, reps: int, flush: torch.Tensor) -> List[float]:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for r in range(reps):
        flush.fill_(r & 0xFF)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) * 1e3)
    return out


def _wall_us_per_step(step: Callable[[int], None], steps: int) -> float:
    for s in range(3):
        step(s)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for s in range(steps):
        step(s)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / steps


def _graph_us_per_step(step: Callable[[torch.Tensor], None], pool: Sequence[torch.Tensor], steps: int) -> float:
    """The dynamic-routing loop as a CUDA-graph engine runs it (vLLM's decode): `step(ids)` (routing
    alignment + GEMM) captured once on a static routing buffer; every step copies a new routing into
    the buffer and replays the graph. Wall time per step over back-to-back steps."""
    ids = pool[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (lazy initialisation, plan caches)
        for _ in range(2):
            step(ids)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(ids)

    def replay(s: int) -> None:
        ids.copy_(pool[s % len(pool)])
        graph.replay()

    try:
        return _wall_us_per_step(replay, steps)
    finally:
        del graph


def ceilings(reps: int = 10) -> dict:
    """The floors' rates, measured now as the CLI does: torch.mm bf16 8192^3 (cuBLAS) in TFLOP/s, and
    a device-to-device copy of 1 GiB in TB/s (read + write bytes); medians of `reps`."""
    flush = torch_utils.l2_flush_buffer()
    x = torch.randn(8192, 8192, device=_DEVICE).to(torch.bfloat16)
    y = torch.randn(8192, 8192, device=_DEVICE).to(torch.bfloat16)
    mm_us = statistics.median(_events_us(lambda: torch.mm(x, y), reps, flush))
    del x, y
    src = torch.empty(1 << 30, dtype=torch.uint8, device=_DEVICE)
    dst = torch.empty_like(src)
    copy_us = statistics.median(_events_us(lambda: dst.copy_(src), reps, flush))
    del src, dst
    torch.cuda.empty_cache()
    return {"bf16_tflops": 2 * 8192.0 ** 3 / mm_us / 1e6, "bf16_method": "torch.mm bf16 8192^3, median",
            "copy_tbps": 2.0 * (1 << 30) / copy_us / 1e6, "copy_method": "1 GiB device-to-device copy_, read+write"}


def _floor_us(c: dict, act: str, fmt: str, ids: torch.Tensor, ceil: dict) -> float:
    """max(FLOPs / bf16 rate, bytes / copy bandwidth), bytes as the CLI counts them: the active
    experts' weights and scales, the activations (each token once) and the output."""
    e, n, k, t, topk = c["experts"], c["n"], c["kdim"], c["tokens"], c["topk"]
    vec = 16 if fmt == "nvfp4" else 32
    active = int(torch.unique(ids).numel())
    a_bytes = t * k * 2 if act == "bf16" else t * (k // 2 + k // vec)
    bytes_ = active * n * (k // 2 + k // vec) + a_bytes + t * topk * n * 2
    return max(2.0 * t * topk * n * k / (ceil["bf16_tflops"] * 1e6), bytes_ / (ceil["copy_tbps"] * 1e6))


def bench_case(c: dict, act: str, fmt: str, reps: int, steps: int, peers: bool, flush: torch.Tensor,
               seed: int = 1111, ceil: Optional[dict] = None) -> dict:
    gen = torch.Generator(device=_DEVICE).manual_seed(seed)
    e, n, k, t, topk = c["experts"], c["n"], c["kdim"], c["tokens"], c["topk"]
    vec = 16 if fmt == "nvfp4" else 32
    w = torch.randint(0, 256, (e, n, k // 2), dtype=torch.uint8, device=_DEVICE, generator=gen)
    ws_lin = _scales((e, n, k // vec), fmt, gen)
    ws = torch.stack([torch_utils.linear_to_blocked(ws_lin[i]) for i in range(e)])
    if act == "bf16":
        a, sa = (torch.rand(t, k, device=_DEVICE, generator=gen) * 2 - 1).to(torch.bfloat16), None
    else:
        a = torch.randint(0, 256, (t, k // 2), dtype=torch.uint8, device=_DEVICE, generator=gen)
        sa = _scales((t, k // vec), fmt, gen)
    pool = [_topk(t, e, topk, gen) for _ in range(8)]
    offsets, gather, _ = moe.align_routing(pool[0], e)
    out = torch.empty(t * topk, n, dtype=torch.bfloat16, device=_DEVICE)
    row = dict(c, rows=t * topk, act=act, format=fmt)
    run = lambda: moe.grouped_gemm(a, sa, w, ws, offsets, gather_index=gather, out=out, format=fmt)  # noqa: E731
    us = _events_us(run, reps, flush)
    row["fp4gemm_us"] = statistics.median(us)
    row["fp4gemm_tflops"] = 2 * t * topk * n * k / row["fp4gemm_us"] / 1e6
    if ceil is not None:
        row["floor_us"] = _floor_us(c, act, fmt, pool[0], ceil)
        row["fraction_of_floor"] = row["floor_us"] / row["fp4gemm_us"]

    def dyn_fp4gemm(s):
        off, gat, _ = moe.align_routing(pool[s % len(pool)], e)
        ops.moe_grouped_gemm_out(a, sa, w, ws, off, out, gat, format=fmt)

    row["fp4gemm_dynamic_us_per_step"] = _wall_us_per_step(dyn_fp4gemm, steps)

    def graph_step(ids):
        off, gat, _ = moe.align_routing(ids, e)
        ops.moe_grouped_gemm_out(a, sa, w, ws, off, out, gat, format=fmt)

    row["fp4gemm_graph_us_per_step"] = _graph_us_per_step(graph_step, pool, steps)
    moe.check()
    if peers:
        run()  # `out` again for the timed routing (the dynamic loop left another one there)
        row.update(_peer_grouped_mm(a, sa, w, ws_lin, fmt, act, pool, offsets, gather, reps, steps, flush, out))
    return row


def _peer_grouped_mm(a, sa, w, ws_lin, fmt, act, pool, offsets, gather, reps, steps, flush, ours) -> dict:
    if not hasattr(torch, "_grouped_mm"):
        return {"grouped_mm_status": f"n/a: torch._grouped_mm does not exist in torch {torch.__version__}"}
    e, n = w.shape[0], w.shape[1]
    need = e * n * w.shape[2] * 2 * 2 + a.shape[0] * w.shape[2] * 8 * 4  # bf16 weights, activations
    free, _ = torch.cuda.mem_get_info()
    if need > free * 0.9:
        return {"grouped_mm_status": f"n/a: the bf16 weights need {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"}
    try:
        wb = torch.stack([torch_utils.dequantize(w[i], ws_lin[i], fmt).to(torch.bfloat16) for i in range(e)])
        ab = a if act == "bf16" else torch_utils.dequantize(a, sa, fmt).to(torch.bfloat16)
        a_sorted = ab[gather.long()]
        mm = lambda x, off: torch._grouped_mm(x, wb.transpose(-2, -1), offs=off[1:], out_dtype=torch.bfloat16)  # noqa: E731
        ref = mm(a_sorted, offsets)
        torch.cuda.synchronize()
        diff = (ref.float() - ours.float()).abs().max().item()
        scale = ref.float().abs().max().item()
        r = {"grouped_mm_status": "ok",
             "grouped_mm_us": statistics.median(_events_us(lambda: mm(a_sorted, offsets), reps, flush)),
             "grouped_mm_agrees": bool(diff <= 2**-6 * scale + 1e-3)}

        def dyn(s):
            off, gat, _ = moe.align_routing(pool[s % len(pool)], e)
            mm(ab[gat.long()], off)

        r["grouped_mm_dynamic_us_per_step"] = _wall_us_per_step(dyn, steps)

        def graph_step(ids):
            off, gat, _ = moe.align_routing(ids, e)
            mm(ab[gat.long()], off)

        r["grouped_mm_graph_us_per_step"] = _graph_us_per_step(graph_step, pool, steps)
        r.update(_peer_scaled_grouped_mm(wb, a_sorted, offsets, reps, flush))
        if act != "bf16":
            r.update(_peer_pointer_array(a, sa, w, ws_lin, fmt, offsets, gather, reps, flush))
        return r
    except Exception as ex:  # noqa: BLE001  (the peer may be unsupported on this GPU / torch)
        return {"grouped_mm_status": f"n/a: {type(ex).__name__}: {str(ex).splitlines()[0][:160]}"}
    finally:
        torch.cuda.empty_cache()


def _peer_scaled_grouped_mm(wb, a_sorted, offsets, reps, flush) -> dict:
    """torch._scaled_grouped_mm FP8 (e4m3, rowwise scales: weights per output row, activations
    per row) on the same rows. Not exact (FP8 rounding of the bf16 operands): a speed peer."""
    if not hasattr(torch, "_scaled_grouped_mm"):
        return {"scaled_grouped_mm_status": f"n/a: torch._scaled_grouped_mm does not exist in torch {torch.__version__}"}
    try:
        fmax = torch.finfo(torch.float8_e4m3fn).max
        sb = torch.empty(wb.shape[0], wb.shape[1], dtype=torch.float32, device=wb.device)  # [E, N]
        wq = torch.empty(wb.shape, dtype=torch.float8_e4m3fn, device=wb.device)
        for i in range(wb.shape[0]):  # one expert at a time: no FP32 copy of every weight
            wf = wb[i].float()
            sb[i] = (wf.abs().amax(dim=1) / fmax).clamp(min=1e-12)
            wq[i] = (wf / sb[i][:, None]).to(torch.float8_e4m3fn)
        sa = (a_sorted.float().abs().amax(dim=1) / fmax).clamp(min=1e-12)  # [rows]
        aq = (a_sorted.float() / sa[:, None]).to(torch.float8_e4m3fn)
        mm = lambda: torch._scaled_grouped_mm(aq, wq.transpose(-2, -1), sa, sb, offs=offsets[1:],  # noqa: E731
                                              out_dtype=torch.bfloat16)
        mm()
        torch.cuda.synchronize()
        return {"scaled_grouped_mm_status": "ok", "scaled_grouped_mm_fp8_us": statistics.median(_events_us(mm, reps, flush))}
    except Exception as ex:  # noqa: BLE001
        return {"scaled_grouped_mm_status": f"n/a: {type(ex).__name__}: {str(ex).splitlines()[0][:160]}"}


def _peer_pointer_array(a, sa, w, ws_lin, fmt, offsets, gather, reps, flush) -> dict:
    """Today's pointer-array path on the same rows: the routing copied to the host once (outside
    the timing), the activations gathered into expert order, one group per active expert, linear
    scales (gathered by the producer), the plan cached: what a user without the MoE GEMM runs."""
    try:
        off = offsets.cpu().tolist()
        a_sorted, sa_sorted = a[gather.long()], sa[gather.long()]
        groups = [(e, off[e], off[e + 1]) for e in range(len(off) - 1) if off[e + 1] > off[e]]
        # Each group's rows in a tensor of its own: slices of one tensor would start at row
        # lo * K/16 bytes, not 16-byte aligned for K = 2880 (the pointer-array path's rule).
        ga = [a_sorted[lo:hi].clone() for _, lo, hi in groups]
        gsa = [sa_sorted[lo:hi].clone() for _, lo, hi in groups]
        gb = [w[e] for e, _, _ in groups]
        gsb = [ws_lin[e] for e, _, _ in groups]
        gc = [torch.empty(hi - lo, w.shape[1], dtype=torch.bfloat16, device=a.device) for _, lo, hi in groups]
        call = lambda: fp4gemm.grouped_gemm(ga, gb, gsa, gsb, gc, format=fmt, scale_layout="linear",  # noqa: E731
                                            out_dtype="bfloat16")
        call()
        torch.cuda.synchronize()
        return {"pointer_array_status": "ok", "pointer_array_us": statistics.median(_events_us(call, reps, flush)),
                "pointer_array_groups": len(groups)}
    except Exception as ex:  # noqa: BLE001
        return {"pointer_array_status": f"n/a: {type(ex).__name__}: {str(ex).splitlines()[0][:160]}"}


def run(cases: Optional[Sequence[int]], act: str, fmt: str, reps: int, steps: int, peers: bool,
        ceil: Optional[dict] = None) -> List[dict]:
    all_cases = suite()
    picked = [all_cases[i - 1] for i in cases] if cases else all_cases
    if ceil is None:
        ceil = ceilings()
    print(f"ceilings, measured now: bf16 {ceil['bf16_tflops']:.1f} TFLOP/s ({ceil['bf16_method']}); "
          f"copy {ceil['copy_tbps']:.3f} TB/s ({ceil['copy_method']})")
    flush = torch_utils.l2_flush_buffer()
    rows = []
    print(f"\nMoE suite: {'W4A16 (bf16 x mxfp4)' if act == 'bf16' else f'W4A4 {fmt}'}, uniform top-k routing, "
          f"median of {reps} reps (L2 flushed), dynamic loop {steps} steps; us")
    print(f"{'model gemm':<24} {'T':>6} {'rows':>7} {'fp4gemm':>10} {'TFLOP/s':>8} {'_grouped_mm':>12} "
          f"{'speed-up':>8} {'dyn fp4gemm':>12} {'dyn torch':>10} {'graph fp4gemm':>14} {'graph torch':>12} "
          f"{'fp8 scaled':>10} {'ptr-array':>10} {'floor':>8} {'of floor':>8}")
    for c in picked:
        r = bench_case(c, act, fmt, reps, steps, peers, flush, ceil=ceil)
        rows.append(r)
        gm = r.get("grouped_mm_us")
        gm_text = f"{gm:12.1f}" if gm is not None else f"{'n/a':>12}"
        sp = f"{gm / r['fp4gemm_us']:7.2f}x" if gm is not None else f"{'':>8}"
        dt = r.get("grouped_mm_dynamic_us_per_step")
        dt_text = f"{dt:10.1f}" if dt is not None else f"{'n/a':>10}"
        gt = r.get("grouped_mm_graph_us_per_step")
        gt_text = f"{gt:12.1f}" if gt is not None else f"{'n/a':>12}"
        print(f"{c['model'] + ' ' + c['gemm']:<24} {c['tokens']:>6} {r['rows']:>7} {r['fp4gemm_us']:10.1f} "
              f"{r['fp4gemm_tflops']:8.1f} {gm_text} {sp} {r['fp4gemm_dynamic_us_per_step']:12.1f} {dt_text} "
              f"{r['fp4gemm_graph_us_per_step']:14.1f} {gt_text} "
              f"{_num(r.get('scaled_grouped_mm_fp8_us'), 10)} {_num(r.get('pointer_array_us'), 10)} "
              f"{r['floor_us']:8.1f} {r['fraction_of_floor']:8.2f}"
              + ("" if r.get("grouped_mm_agrees", True) else "  ! peer disagrees"))
        if peers and r["grouped_mm_status"] != "ok":
            print(f"  _grouped_mm: {r['grouped_mm_status']}")
        torch.cuda.empty_cache()
    fp4gemm.clear_plan_cache()
    return rows
