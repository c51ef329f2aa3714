"""python -m fp4gemm.bench: GPU MODE's seed cases, timed the way GPU MODE's harness times them.

For every case, 15 different inputs (GPU MODE-style data) run back to back after an L2 flush,
between two CUDA events, host overhead included; the time per call is the span / 15, and the
report gives the mean and median over the repetitions. In the same run and the same way:
  * torch._grouped_mm, bf16, on operands dequantised in advance (A stacked [sum M, K], B [G, N, K]);
  * torch._scaled_grouped_mm, FP8 e4m3 with unit row-wise scales, on operands converted in advance.
A peer that fails (missing op, unsupported GPU) is reported as "unavailable".

Then the host overhead per call with 8 groups (plans cached), for each entry point.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable, List, Optional, Sequence

import torch

import fp4gemm
from fp4gemm import gpumode, torch_utils


def _sync():
    torch.cuda.synchronize()


def time_back_to_back(fn: Callable, inputs: Sequence, reps: int, flush: torch.Tensor) -> List[float]:
    """Microseconds per call of fn over all inputs, per repetition (after one warm-up pass)."""
    for x in inputs:
        fn(x)
    _sync()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        _sync()
        flush.fill_(reps & 0xFF)  # evict the L2
        start.record()
        for x in inputs:
            fn(x)
        end.record()
        _sync()
        times.append(start.elapsed_time(end) * 1e3 / len(inputs))
    return times


def _stats(times: List[float]) -> dict:
    return {"mean_us": statistics.fmean(times), "median_us": statistics.median(times), "min_us": min(times)}


class _Dense:
    """One input's operands dequantised in advance for the torch peers."""

    def __init__(self, data, fp8: bool):
        abc, sf, _, sizes = data
        dev = abc[0][0].device
        a_rows, b_mats = [], []
        for (a, b, _c), (sfa, sfb) in zip(abc, sf):
            a_rows.append(torch_utils.dequantize(a, sfa[:, :, 0].to(dev)).to(torch.bfloat16))
            b_mats.append(torch_utils.dequantize(b, sfb[:, :, 0].to(dev)).to(torch.bfloat16))
        self.a = torch.cat(a_rows)
        self.b = torch.stack(b_mats)  # [G, N, K]
        ms = [s[0] for s in sizes]
        self.offs = torch.tensor(ms, dtype=torch.int32, device=dev).cumsum(0, dtype=torch.int32)
        if fp8:  # GPU MODE values (multiples of 0.5 up to 3) are exact in e4m3
            self.a = self.a.to(torch.float8_e4m3fn)
            self.b = self.b.to(torch.float8_e4m3fn)
            self.scale_a = torch.ones(self.a.shape[0], dtype=torch.float32, device=dev)
            self.scale_b = torch.ones(self.b.shape[0], self.b.shape[1], dtype=torch.float32, device=dev)


def _peer_grouped_mm(x: _Dense):
    return torch._grouped_mm(x.a, x.b.transpose(-2, -1), offs=x.offs, out_dtype=torch.bfloat16)


def _peer_scaled_grouped_mm(x: _Dense):
    return torch._scaled_grouped_mm(x.a, x.b.transpose(-2, -1), x.scale_a, x.scale_b, offs=x.offs,
                                    out_dtype=torch.bfloat16)


def _try_peer(name: str, make: Callable, fn: Callable, datas, reps, flush) -> dict:
    try:
        dense = [make(d) for d in datas]
        fn(dense[0])
        _sync()
        r = _stats(time_back_to_back(fn, dense, reps, flush))
        del dense
        torch.cuda.empty_cache()
        return r
    except Exception as e:  # noqa: BLE001  (a peer may be missing or unsupported here)
        torch.cuda.empty_cache()
        return {"unavailable": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}


def _resolve_backend(backend: Optional[str], data) -> str:
    """The backend to use: the requested one, or 'reference' when 'auto' has no kernel here."""
    want = backend or fp4gemm.get_default_backend()
    try:
        fp4gemm.set_default_backend(want)
        gpumode.custom_kernel(torch_utils.clone_data(data))
        _sync()
        return want
    except fp4gemm.DeviceError as e:
        if backend is not None:
            raise
        print(f"note: backend '{want}' unavailable ({e}); using 'reference'", file=sys.stderr)
        fp4gemm.set_default_backend("reference")
        return "reference"


def bench_cases(cases: Sequence[int], inputs: int, reps: int, backend: Optional[str], peers: bool) -> List[dict]:
    flush = torch_utils.l2_flush_buffer()
    rows = []
    for idx in cases:
        spec = gpumode.SEED_CASES[idx - 1]
        datas = []
        for i in range(inputs):
            datas.append(gpumode.generate_input(spec["m"], spec["n"], spec["k"], spec["g"], spec["seed"] + 42 * (i + 1)))
        used = _resolve_backend(backend, datas[0])
        flops = sum(2 * m * n * k for m, n, k in zip(spec["m"], spec["n"], spec["k"]))
        row = {"case": idx, "groups": spec["g"], "m": spec["m"], "n": spec["n"][0], "k": spec["k"][0],
               "flops": flops, "backend": used}
        t0 = time.perf_counter()
        fp4gemm.clear_plan_cache()
        gpumode.custom_kernel(datas[0])
        _sync()
        row["plan_build_us"] = (time.perf_counter() - t0) * 1e6
        row["fp4gemm"] = _stats(time_back_to_back(gpumode.custom_kernel, datas, reps, flush))
        if peers:
            row["torch._grouped_mm bf16"] = _try_peer("grouped_mm", lambda d: _Dense(d, fp8=False),
                                                      _peer_grouped_mm, datas, reps, flush)
            row["torch._scaled_grouped_mm fp8"] = _try_peer("scaled_grouped_mm", lambda d: _Dense(d, fp8=True),
                                                            _peer_scaled_grouped_mm, datas, reps, flush)
        rows.append(row)
        del datas
        torch.cuda.empty_cache()
    return rows


# ---- host overhead --------------------------------------------------------------------------------

def per_call_host_us(fn: Callable, calls: int = 2000, batch: int = 200) -> float:
    """Median host time per call: batches timed with perf_counter, the GPU drained in between
    (so the launch queue never fills and blocks the host)."""
    for _ in range(50):
        fn()
    _sync()
    per_batch = []
    for _ in range(max(1, calls // batch)):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        per_batch.append((time.perf_counter() - t0) * 1e6 / batch)
        _sync()
    return statistics.median(per_batch)


def host_overhead(groups: int = 8, backend: Optional[str] = None) -> dict:
    """Host µs per call for 8 small groups (GPU work kept tiny), plans cached."""
    ms = [80, 176, 128, 72, 64, 248, 96, 160][:groups]
    data = gpumode.generate_input(ms, [256] * groups, [256] * groups, groups, 7)
    _resolve_backend(backend, data)
    a, b, sfa, sfb, c = torch_utils.flatten_groups(data)
    c2 = [x[:, :, 0] for x in c]
    a2, b2 = [x[:, :, 0] for x in a], [x[:, :, 0] for x in b]
    bound = fp4gemm.GroupedGemm(a, b, sfa, sfb, c, scale_layout="blocked")
    small = torch.zeros(16, device="cuda")
    r = {
        "torch add_ (one tiny kernel, for scale)": per_call_host_us(lambda: small.add_(1)),
        "fp4gemm.grouped_gemm": per_call_host_us(
            lambda: fp4gemm.grouped_gemm(a, b, sfa, sfb, c, scale_layout="blocked")),
        "fp4gemm.gpumode.custom_kernel": per_call_host_us(lambda: gpumode.custom_kernel(data)),
        "fp4gemm.GroupedGemm.run": per_call_host_us(bound.run),
    }
    if hasattr(torch.ops, "fp4gemm") and hasattr(torch.ops.fp4gemm, "grouped_gemm_out"):
        from fp4gemm import ops

        r["torch.ops.fp4gemm.grouped_gemm_out"] = per_call_host_us(
            lambda: ops.grouped_gemm_out(a2, b2, sfa, sfb, c2, scale_layout="blocked"))
        r["torch.ops.fp4gemm.grouped_gemm (allocates C)"] = per_call_host_us(
            lambda: ops.grouped_gemm(a2, b2, sfa, sfb, scale_layout="blocked"))
    r["plan_cache"] = fp4gemm.plan_cache_info()
    return r


def _fmt_peer(p: dict) -> str:
    return p["unavailable"] if "unavailable" in p else f"{p['mean_us']:8.1f} / {p['median_us']:8.1f}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp4gemm.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="1,2,3,4", help="seed cases to run (1-4)")
    ap.add_argument("--inputs", type=int, default=15, help="inputs run back to back per repetition")
    ap.add_argument("--reps", type=int, default=30, help="timed repetitions")
    ap.add_argument("--backend", default=None, help="auto / fast / reference (default: the library default, "
                                                    "falling back to reference when auto has no kernel)")
    ap.add_argument("--no-peers", action="store_true", help="skip the torch peers")
    ap.add_argument("--overhead-only", action="store_true", help="only measure the host overhead")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    args = ap.parse_args(argv)

    if not torch.cuda.is_available():
        print("fp4gemm.bench: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.cuda.get_device_name()
    print(f"fp4gemm {fp4gemm.__version__} on {dev}, torch {torch.__version__}")
    result = {"device": dev, "torch": torch.__version__}
    if not args.overhead_only:
        cases = [int(x) for x in args.cases.split(",") if x]
        rows = bench_cases(cases, args.inputs, args.reps, args.backend, not args.no_peers)
        result["cases"] = rows
        print(f"\n{args.inputs} inputs back to back after an L2 flush, host overhead included; "
              f"us per call, mean / median of {args.reps} repetitions")
        head = f"{'case':>4} {'G':>2} {'N':>5} {'K':>5} {'backend':>9} {'fp4gemm':>19} {'TFLOP/s':>8}"
        if not args.no_peers:
            head += f"  {'_grouped_mm bf16':>19}  {'_scaled_grouped_mm fp8':>22}"
        print(head)
        for r in rows:
            f = r["fp4gemm"]
            line = (f"{r['case']:>4} {r['groups']:>2} {r['n']:>5} {r['k']:>5} {r['backend']:>9} "
                    f"{f['mean_us']:8.1f} / {f['median_us']:8.1f} {r['flops'] / f['median_us'] / 1e6:8.1f}")
            if not args.no_peers:
                line += (f"  {_fmt_peer(r['torch._grouped_mm bf16']):>19}"
                         f"  {_fmt_peer(r['torch._scaled_grouped_mm fp8']):>22}")
            print(line)
        print("plan build on a cache miss (us): " +
              ", ".join(f"case {r['case']}: {r['plan_build_us']:.0f}" for r in rows))
    oh = host_overhead(8, args.backend)
    result["host_overhead_us"] = oh
    print("\nhost overhead per call, 8 groups, plans cached (us):")
    for k, v in oh.items():
        if k != "plan_cache":
            print(f"  {k:<48} {v:7.2f}")
    print(f"  plan cache: {oh['plan_cache']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
