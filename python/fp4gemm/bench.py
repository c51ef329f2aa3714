"""python -m fp4gemm.bench: GPU MODE's seed cases, timed the way GPU MODE's harness times them.

For every case, 15 different inputs (GPU MODE-style data, seeds seed+42, seed+84, ...) run back to
back after an L2 flush, between two CUDA events, host overhead included; the time per call is the
span / 15, and the report gives the mean and median over the repetitions. In the same run, on the
same inputs and timed the same way:
  * torch._grouped_mm, bf16, on operands dequantised in advance (A stacked [sum M, K], B [G, N, K]);
  * torch._scaled_grouped_mm, FP8 e4m3 with unit row-wise scales, on operands converted in advance
    (GPU MODE's values are exact in e4m3).
Each peer's result on the first input is checked against fp4gemm's. A peer that is missing from
this torch or fails on this GPU is reported as "n/a" with the reason; the run goes on.

Then the plan-build time on a cache miss and the host overhead per call with 8 groups (plans
cached; aim < 10 us) for each entry point. --fresh-data also times fp4gemm on fresh copies of the
inputs in every repetition (as GPU MODE's newer harness clones its data), so every call misses
the plan cache. --json FILE writes everything, GPU name included.

--moe runs the MoE suite instead (fp4gemm.moe_bench: SPEC 4's model shapes at 1..16384 tokens,
fp4gemm.moe against torch._grouped_mm bf16 and the dynamic-routing loop of both).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable, List, Optional, Sequence

try:  # --help works without torch; main() says clearly that the benchmark needs it
    import torch
except ImportError:  # pragma: no cover
    torch = None

import fp4gemm
from fp4gemm import gpumode

if torch is not None:
    from fp4gemm import torch_utils

PEERS = ("torch._grouped_mm bf16", "torch._scaled_grouped_mm fp8")


def _sync():
    torch.cuda.synchronize()


def time_back_to_back(fn: Callable, inputs: Sequence, reps: int, flush, prepare: Optional[Callable] = None) -> List[float]:
    """Microseconds per call of fn over all inputs, per repetition (after one warm-up pass).

    Each repetition: (prepare the inputs, untimed), synchronise, overwrite the L2 flush buffer,
    record an event, call fn on every input back to back, record an event, synchronise.
    """
    for x in inputs:
        fn(x)
    _sync()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for r in range(reps):
        batch = prepare(inputs) if prepare is not None else inputs
        _sync()
        flush.fill_(r & 0xFF)  # evict the L2
        start.record()
        for x in batch:
            fn(x)
        end.record()
        _sync()
        times.append(start.elapsed_time(end) * 1e3 / len(batch))
        del batch
    return times


def _stats(times: List[float]) -> dict:
    return {"mean_us": statistics.fmean(times), "median_us": statistics.median(times), "min_us": min(times),
            "std_us": statistics.stdev(times) if len(times) > 1 else 0.0, "reps": len(times)}


def _na(reason: str) -> dict:
    return {"status": "n/a", "reason": reason}


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


def _reason(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}"


def _try_peer(op: str, fp8: bool, fn: Callable, datas, reps, flush, expected) -> dict:
    """Times one torch peer like fp4gemm; {"status": "n/a", "reason"} when it cannot run here."""
    if not hasattr(torch, op):
        return _na(f"torch.{op} does not exist in torch {torch.__version__}")
    dense = None
    try:
        dense = [_Dense(d, fp8) for d in datas]
        out = fn(dense[0])
        _sync()
        diff = (out.float() - expected.float()).abs().max().item() if out.numel() else 0.0
        scale = expected.float().abs().max().item() if expected.numel() else 0.0
        r = _stats(time_back_to_back(fn, dense, reps, flush))
        r["status"] = "ok"
        # bf16 output vs fp4gemm's f16 output of the same exact product: agree to bf16 rounding
        r["max_abs_diff_vs_fp4gemm"] = diff
        r["agrees_with_fp4gemm"] = bool(diff <= 2 ** -7 * scale + 1e-3)
        return r
    except Exception as e:  # noqa: BLE001  (a peer may be unsupported on this GPU / torch version)
        return _na(_reason(e))
    finally:
        del dense
        torch.cuda.empty_cache()


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


def bench_cases(cases: Sequence[int], inputs: int, reps: int, backend: Optional[str], peers: bool,
                fresh_data: bool = False) -> List[dict]:
    flush = torch_utils.l2_flush_buffer()
    rows = []
    for idx in cases:
        spec = gpumode.SEED_CASES[idx - 1]
        # GPU MODE: input i of a benchmark uses seed + 42 * (i + 1)
        datas = [gpumode.generate_input(spec["m"], spec["n"], spec["k"], spec["g"], spec["seed"] + 42 * (i + 1))
                 for i in range(inputs)]
        used = _resolve_backend(backend, datas[0])
        flops = sum(2 * m * n * k for m, n, k in zip(spec["m"], spec["n"], spec["k"]))
        row = {"case": idx, "groups": spec["g"], "m": spec["m"], "n": spec["n"][0], "k": spec["k"][0],
               "flops": flops, "inputs": inputs, "backend": used}
        # Plan build on a cache miss: host time of the first call (validation, plan, enqueue).
        fp4gemm.clear_plan_cache()
        _sync()
        t0 = time.perf_counter()
        outs = gpumode.custom_kernel(datas[0])
        row["plan_build_us"] = (time.perf_counter() - t0) * 1e6
        _sync()
        expected = torch.cat([c[:, :, 0] for c in outs])  # [sum M, N] f16, for the peers' check
        row["fp4gemm"] = _stats(time_back_to_back(gpumode.custom_kernel, datas, reps, flush))
        if fresh_data:
            row["fp4gemm fresh data"] = _stats(time_back_to_back(gpumode.custom_kernel, datas, reps, flush,
                                                                  prepare=torch_utils.clone_data))
        if peers:
            row[PEERS[0]] = _try_peer("_grouped_mm", False, _peer_grouped_mm, datas, reps, flush, expected)
            row[PEERS[1]] = _try_peer("_scaled_grouped_mm", True, _peer_scaled_grouped_mm, datas, reps, flush,
                                      expected)
        rows.append(row)
        del datas, outs, expected
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


# ---- report ---------------------------------------------------------------------------------------

def _fmt(p: dict, notes: List[str]) -> str:
    if p.get("status") == "n/a":
        if p["reason"] not in notes:
            notes.append(p["reason"])
        return f"n/a [{notes.index(p['reason']) + 1}]"
    flag = "" if p.get("agrees_with_fp4gemm", True) else " !"
    return f"{p['mean_us']:8.1f} / {p['median_us']:8.1f}{flag}"


def _print_cases(rows: List[dict], inputs: int, reps: int, peers: bool) -> None:
    print(f"\n{inputs} inputs back to back after an L2 flush, host overhead included; "
          f"us per call, mean / median of {reps} repetitions")
    fresh = any("fp4gemm fresh data" in r for r in rows)
    head = f"{'case':>4} {'G':>2} {'N':>5} {'K':>5} {'backend':>9} {'fp4gemm':>19} {'TFLOP/s':>8}"
    if fresh:
        head += f"  {'fp4gemm fresh data':>19}"
    if peers:
        head += f"  {'_grouped_mm bf16':>19}  {'_scaled_grouped_mm fp8':>22}"
    print(head)
    notes: List[str] = []
    for r in rows:
        f = r["fp4gemm"]
        line = (f"{r['case']:>4} {r['groups']:>2} {r['n']:>5} {r['k']:>5} {r['backend']:>9} "
                f"{f['mean_us']:8.1f} / {f['median_us']:8.1f} {r['flops'] / f['median_us'] / 1e6:8.1f}")
        if fresh:
            line += f"  {_fmt(r['fp4gemm fresh data'], notes):>19}"
        if peers:
            line += f"  {_fmt(r[PEERS[0]], notes):>19}  {_fmt(r[PEERS[1]], notes):>22}"
        print(line)
    for i, n in enumerate(notes):
        print(f"  [{i + 1}] {n}")
    if peers and any(r[p].get("agrees_with_fp4gemm") is False for r in rows for p in PEERS):
        print("  ! the peer's result on the first input differs from fp4gemm's by more than bf16 rounding")
    print("plan build on a cache miss (host us, first call): " +
          ", ".join(f"case {r['case']}: {r['plan_build_us']:.0f}" for r in rows))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fp4gemm.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="1,2,3,4", help="seed cases to run, from 1-4 (default: all)")
    ap.add_argument("--inputs", type=int, default=15, help="inputs run back to back per repetition (default 15)")
    ap.add_argument("--reps", type=int, default=30, help="timed repetitions (default 30)")
    ap.add_argument("--backend", default=None, help="auto / fast / reference (default: the library default, "
                                                    "falling back to reference when auto has no kernel)")
    ap.add_argument("--no-peers", action="store_true", help="skip the torch peers")
    ap.add_argument("--fresh-data", action="store_true",
                    help="also time fp4gemm on fresh copies of the inputs every repetition (plan-cache misses)")
    ap.add_argument("--overhead-only", action="store_true", help="only measure the host overhead")
    ap.add_argument("--json", metavar="FILE", default=None, help="also write the results to FILE")
    ap.add_argument("--moe", action="store_true",
                    help="run the MoE suite instead (fp4gemm.moe vs torch._grouped_mm bf16, dynamic-routing loop; "
                         "see fp4gemm.moe_bench)")
    ap.add_argument("--moe-cases", default="", help="--moe: 1-based cases of the 56 (model, GEMM, tokens); default all")
    ap.add_argument("--act", default="nvfp4", choices=["nvfp4", "mxfp4", "bf16"],
                    help="--moe: W4A4 in nvfp4 / mxfp4, or W4A16 (bf16 activations, mxfp4 weights)")
    ap.add_argument("--steps", type=int, default=50, help="--moe: steps of the dynamic-routing loop")
    args = ap.parse_args(argv)

    cases = [int(x) for x in args.cases.split(",") if x.strip()]
    if any(c < 1 or c > len(gpumode.SEED_CASES) for c in cases):
        ap.error(f"--cases: each case must be in 1..{len(gpumode.SEED_CASES)}")
    if args.inputs < 1 or args.reps < 2:
        ap.error("--inputs must be >= 1 and --reps >= 2")
    if torch is None:
        print("fp4gemm.bench: needs torch (pip install torch)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("fp4gemm.bench: no CUDA device", file=sys.stderr)
        return 2

    dev = torch.cuda.get_device_name()
    cc = torch.cuda.get_device_capability()
    info = fp4gemm.device_info()
    print(f"GPU: {dev} (sm_{cc[0]}{cc[1]}, {info['multiprocessors']} SMs, L2 {info['l2_bytes'] >> 20} MiB, "
          f"fast kernel: {'yes' if info['has_fast_kernel'] else 'no'})")
    print(f"fp4gemm {fp4gemm.__version__}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"Python {sys.version.split()[0]}")
    result = {"device": dev, "compute_capability": list(cc), "device_info": info, "fp4gemm": fp4gemm.__version__,
              "torch": torch.__version__, "torch_cuda": torch.version.cuda, "python": sys.version.split()[0],
              "method": {"inputs": args.inputs, "reps": args.reps, "l2_flush": True, "host_overhead_included": True,
                         "time_per_call": "span of the back-to-back inputs / inputs"}}
    if args.moe:
        from fp4gemm import moe_bench

        moe_cases = [int(x) for x in args.moe_cases.split(",") if x.strip()]
        if any(c < 1 or c > len(moe_bench.suite()) for c in moe_cases):
            ap.error(f"--moe-cases: each case must be in 1..{len(moe_bench.suite())}")
        fmt = "mxfp4" if args.act == "bf16" else args.act
        result["moe_ceilings"] = moe_bench.ceilings()
        result["moe"] = moe_bench.run(moe_cases, args.act, fmt, args.reps, args.steps, not args.no_peers,
                                      ceil=result["moe_ceilings"])
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(result, fh, indent=2, default=str)
            print(f"\nwrote {args.json}")
        return 0
    if not args.overhead_only:
        rows = bench_cases(cases, args.inputs, args.reps, args.backend, not args.no_peers, args.fresh_data)
        result["cases"] = rows
        _print_cases(rows, args.inputs, args.reps, not args.no_peers)
    oh = host_overhead(8, args.backend)
    result["host_overhead_us"] = oh
    print("\nhost overhead per call, 8 groups, plans cached (us; aim < 10):")
    for k, v in oh.items():
        if k != "plan_cache":
            print(f"  {k:<48} {v:7.2f}")
    print(f"  plan cache: {oh['plan_cache']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2, default=str)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
