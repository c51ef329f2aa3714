"""GPU tier for fp4gemm.moe (torch + CUDA): the device-driven MoE GEMM against the exact host
reference (reference::moe_gemm via the NumPy path, and the independent NumPy float64 product) on
many routings; CUDA graphs replayed with a new routing every time; torch.compile(fullgraph=True)
with a changing routing; bad routing data reported by check(); the masked layout; alpha on the
device; the plan cache; host overhead. Skipped where torch or a CUDA device is missing."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tier needs torch and a CUDA device)")

import fp4gemm  # noqa: E402
from fp4gemm import moe, ops  # noqa: E402
from fp4gemm.testing import MoeData, as_float64, random_moe, random_topk, round_to  # noqa: E402

@pytest.fixture(autouse=True)
def _fast_kernel_only(backend):
    """The MoE GEMM has only the fast kernel (sm_90): there is no reference backend to fall back to."""
    if backend != "auto":
        pytest.skip(f"the MoE GEMM runs only the fast kernel (sm_90); this tier runs backend {backend!r}")


TORCH_OUT = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def cuda(x):
    """A NumPy array (ml_dtypes bfloat16 included) as a CUDA tensor of the same layout."""
    if x is None:
        return None
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def nan_output(d: MoeData, out_dtype="float32"):
    n = d.w.shape[1]
    shape = (d.experts, d.capacity, n) if d.layout == "masked" else (d.capacity, n)
    return torch.full(shape, float("nan"), dtype=TORCH_OUT[out_dtype], device="cuda")


def host_reference(d: MoeData, out_dtype="float32", alpha=None):
    """reference::moe_gemm on the host arrays (the NumPy path), rows no expert owns NaN."""
    out = d.output(out_dtype)
    if d.layout == "masked":
        g = moe.MoeGemm(d.w, d.w_scales, format=d.format, scale_layout=d.scale_layout, out_dtype=out_dtype,
                        activation=d.activation, layout="masked", capacity=d.capacity, alpha=alpha)
        g.run(d.a, d.a_scales, expert_counts=d.counts, out=out)
    else:
        moe.grouped_gemm(d.a, d.a_scales, d.w, d.w_scales, d.offsets, gather_index=d.gather, out=out, alpha=alpha,
                         format=d.format, scale_layout=d.scale_layout, out_dtype=out_dtype)
    return as_float64(out.reshape(-1, out.shape[-1]), out_dtype)


def assert_bit_exact(got, want):
    """Bitwise equal where the reference has a value; NaN (unwritten) where it has NaN."""
    got = got.reshape(want.shape)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{int((~same).sum())} of {same.size} elements differ; first at {np.argwhere(~same)[:3].tolist()}"


def assert_fp32_bound(got, d: MoeData, out_dtype, alpha=None):
    """SPEC §3's FP32 bound against the float64 product: half an output ulp plus K * 2^-23 *
    sum |a_k w_k|; unwritten rows NaN."""
    ref = d.reference(alpha)
    got = got.reshape(ref.shape)
    owned = ~np.isnan(ref[:, 0])
    assert np.isnan(got[~owned]).all(), "a row no expert owns was written"
    absd = MoeData(**{**d.__dict__})
    absd.a = d.a & 0x77 if d.activation == "fp4" else np.abs(d.a)  # |e2m1| clears the sign bit of each nibble
    absd.w = d.w & 0x77
    mag = np.abs(absd.reference(None if alpha is None else np.abs(np.asarray(alpha, np.float32))))
    k = d.w.shape[2] * 2
    slack = k * 2.0**-23 * mag
    mant = {"float16": 10, "bfloat16": 7, "float32": 23}[out_dtype]
    emin = {"float16": -14, "bfloat16": -126, "float32": -126}[out_dtype]
    r, g, s = ref[owned], got[owned], slack[owned]
    ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(r) + s, 2.0**emin))) - mant)
    ok = np.abs(g - r) <= 0.5 * ulp + s
    want = round_to(r, out_dtype)
    ok |= np.isinf(want) & (g == want)
    assert ok.all(), f"{int((~ok).sum())} elements outside the FP32 bound"


def run_device(d: MoeData, out_dtype="float32", alpha=None, plan=None):
    out = nan_output(d, out_dtype)
    if plan is None:
        plan = moe.MoeGemm(cuda(d.w), cuda(d.w_scales), format=d.format, scale_layout=d.scale_layout,
                           out_dtype=out_dtype, activation=d.activation, layout=d.layout, capacity=d.capacity,
                           alpha=alpha)
    if d.layout == "masked":
        plan.run(cuda(d.a), cuda(d.a_scales), expert_counts=cuda(d.counts), out=out)
    else:
        plan.run(cuda(d.a), cuda(d.a_scales), cuda(d.offsets), gather_index=cuda(d.gather), out=out)
    plan.check()
    return out.float().cpu().double().numpy().reshape(-1, out.shape[-1])


CONFIGS = [("nvfp4", "fp4"), ("mxfp4", "fp4"), ("mxfp4", "bf16")]


@pytest.mark.parametrize("fmt,act", CONFIGS)
@pytest.mark.parametrize("layout", ["linear", "blocked"])
@pytest.mark.parametrize("out_dtype", ["float16", "bfloat16", "float32"])
def test_gpumode_values_bit_exact(backend, fmt, act, layout, out_dtype):
    if act == "bf16":
        pytest.importorskip("ml_dtypes")
    d = random_moe(16, 200, 256, 37, 4, fmt, layout, activation=act, values="gpumode", seed=1)
    assert_bit_exact(run_device(d, out_dtype), host_reference(d, out_dtype))


@pytest.mark.parametrize("fmt,act", CONFIGS)
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_full_range_fp32_bound(backend, fmt, act, out_dtype):
    if act == "bf16":
        pytest.importorskip("ml_dtypes")
    d = random_moe(8, 136, 512, 50, 2, fmt, "blocked", activation=act, values="full", seed=2)
    alpha = np.linspace(-2, 2, 8).astype(np.float32)
    plan = moe.MoeGemm(cuda(d.w), cuda(d.w_scales), format=fmt, out_dtype=out_dtype, activation=act,
                       capacity=d.capacity, alpha=cuda(alpha))
    assert_fp32_bound(run_device(d, out_dtype, plan=plan), d, out_dtype, alpha)


def test_300_random_routings(backend):
    """>= 300 routings over E from 1 to 512: all rows to one expert, most experts empty, skewed,
    balanced, capacity exactly full (the contiguous layout always routes tokens * topk rows), and
    rows per expert from 0 to 4096; every one bit-exact against reference::moe_gemm. One plan
    per shape serves all of that shape's routings."""
    rng = np.random.default_rng(3)
    shapes = [(1, 64, 128, 300, 1), (8, 128, 256, 512, 8), (64, 256, 128, 96, 4), (512, 64, 64, 64, 8),
              (4, 64, 64, 4096, 1), (128, 96, 192, 33, 8)]
    done = 0
    for e, n, k, tokens, topk in shapes:
        d = random_moe(e, n, k, tokens, topk, "nvfp4", "blocked", values="gpumode", seed=int(rng.integers(1 << 30)))
        plan = moe.MoeGemm(cuda(d.w), cuda(d.w_scales), capacity=d.capacity, out_dtype="float32")
        a, sa = cuda(d.a), cuda(d.a_scales)
        for i in range(50):
            routing = ["uniform", "skewed", "balanced", "one-hot", "most-empty"][i % 5]
            d.offsets, d.gather, _ = moe.align_routing(random_topk(rng, tokens, e, topk, routing), e)
            out = nan_output(d)
            plan.run(a, sa, cuda(d.offsets), gather_index=cuda(d.gather), out=out)
            plan.check()
            assert_bit_exact(out.cpu().double().numpy(), host_reference(d))
            done += 1
    assert done >= 300


def test_rows_outside_the_routing_untouched(backend):
    d = random_moe(4, 64, 128, 40, 1, seed=4)
    d.offsets = np.array([3, 10, 10, 20, 31], np.int32)  # rows [0, 3) and [31, 40) belong to nobody
    got = run_device(d)
    assert np.isnan(got[:3]).all() and np.isnan(got[31:]).all()
    assert_bit_exact(got, host_reference(d))


@pytest.mark.parametrize("act", ["fp4", "bf16"])
def test_masked_layout(backend, act):
    if act == "bf16":
        pytest.importorskip("ml_dtypes")
    fmt = "mxfp4" if act == "bf16" else "nvfp4"
    d = random_moe(6, 128, 256, 0, 1, fmt, "blocked", activation=act, layout="masked",
                   counts=[0, 64, 3, 17, 64, 1], capacity=64, seed=5)
    assert_bit_exact(run_device(d), host_reference(d))


def test_alpha_tensor_read_at_run_time(backend):
    d = random_moe(4, 64, 128, 16, 2, seed=6)
    alpha = torch.tensor([1.0, 2.0, -0.5, 4.0], device="cuda")
    plan = moe.MoeGemm(cuda(d.w), cuda(d.w_scales), capacity=d.capacity, out_dtype="float32", alpha=alpha)
    assert_bit_exact(run_device(d, plan=plan), host_reference(d, alpha=alpha.cpu().numpy()))
    alpha.mul_(-3.0)  # same plan, new values
    assert_bit_exact(run_device(d, plan=plan), host_reference(d, alpha=alpha.cpu().numpy()))


# ---- bad routing data -----------------------------------------------------------------------------


def test_bad_routing_raises_at_check(backend):
    """Bad device data is caught on the device: no output is written, and check() raises naming the
    argument (then the state is clear)."""
    d = random_moe(4, 64, 128, 8, 2, seed=7)
    plan = moe.MoeGemm(cuda(d.w), cuda(d.w_scales), capacity=16, out_dtype="float32")
    a, sa, gather = cuda(d.a), cuda(d.a_scales), cuda(d.gather)
    cases = [
        (np.array([0, 5, 3, 9, 16], np.int32), None, r"expert_offsets\[2\] = 3, less than expert_offsets\[1\]"),
        (np.array([-2, 5, 7, 9, 16], np.int32), None, r"expert_offsets\[0\] = -2"),
        (np.array([0, 5, 7, 9, 17], np.int32), None, r"expert_offsets\[4\] = 17, more rows than the plan's capacity 16"),
    ]
    for offsets, _, match in cases:
        out = nan_output(d)
        plan.run(a, sa, cuda(offsets), gather_index=gather, out=out)
        with pytest.raises(fp4gemm.ArgumentError, match=match) as info:
            plan.check()
        assert info.value.argument == "expert_offsets"
        assert out.isnan().all(), "a bad routing wrote output"
        plan.check()  # cleared
    bad = d.gather.copy()
    bad[5] = 1000
    plan.run(a, sa, cuda(d.offsets), gather_index=cuda(bad), out=nan_output(d))
    with pytest.raises(fp4gemm.ArgumentError, match=r"gather_index\[5\] = 1000") as info:
        plan.check()
    assert info.value.argument == "gather_index"


def test_mxfp4_scale_code_rewritten_after_planning(backend):
    """An MXFP4 plan over blocked scales whose codes are all <= 128 (GPU MODE's values: scales 1
    and 2) decodes with one multiply and is bit for bit the reference; a code > 128 written into the
    scales afterwards is reported by check() naming weights.scales and the expert; restored, the
    plan is right again."""
    d = random_moe(4, 128, 256, 8, 2, format="mxfp4", activation="bf16", seed=12)
    d.offsets = np.array([0, 4, 8, 12, 16], np.int32)
    d.gather = (np.arange(16) % 8).astype(np.int32)
    w_scales = cuda(d.w_scales)
    plan = moe.MoeGemm(cuda(d.w), w_scales, format="mxfp4", activation="bf16", capacity=16, out_dtype="float32")
    assert "one multiply" in plan.describe() and "checked at every run" in plan.describe()
    assert plan.kernel_name == "sm90_fused_swapab_moe" and plan.describe().startswith(plan.kernel_name + " on ")
    want = host_reference(d)
    assert_bit_exact(run_device(d, plan=plan), want)
    flat = w_scales.view(-1)
    at = 2 * (flat.numel() // 4) + 37  # expert 2's blocked byte 37: row 34, column 1
    was = int(flat[at])
    assert was <= 128
    flat[at] = 200
    plan.run(cuda(d.a), None, cuda(d.offsets), gather_index=cuda(d.gather), out=nan_output(d))
    with pytest.raises(fp4gemm.ArgumentError, match=r"MXFP4 scale code > 128 in expert 2") as info:
        plan.check()
    assert info.value.argument == "weights.scales" and info.value.group == 2
    plan.check()  # cleared
    flat[at] = was
    assert_bit_exact(run_device(d, plan=plan), want)


def test_bad_counts_raise_at_check(backend):
    d = random_moe(3, 64, 128, 0, 1, layout="masked", counts=[1, 2, 3], capacity=4, seed=8)
    plan = moe.MoeGemm(cuda(d.w), cuda(d.w_scales), layout="masked", capacity=4, out_dtype="float32")
    out = nan_output(d)
    plan.run(cuda(d.a), cuda(d.a_scales), expert_counts=cuda(np.array([1, 5, 0], np.int32)), out=out)
    with pytest.raises(fp4gemm.ArgumentError, match=r"expert_counts\[1\] = 5") as info:
        plan.check()
    assert info.value.argument == "expert_counts" and out.isnan().all()


def test_module_check_for_cached_plans(backend):
    fp4gemm.clear_plan_cache()
    moe.check()  # nothing pending from earlier tests (pinned plans stay and are checked too)
    d = random_moe(4, 64, 128, 8, 2, seed=9)
    args = [cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales)]
    moe.grouped_gemm(*args, cuda(np.array([0, 9, 3, 12, 16], np.int32)), gather_index=cuda(d.gather))
    with pytest.raises(fp4gemm.ArgumentError, match=r"expert_offsets\[2\] = 3") as info:
        moe.check()
    assert info.value.argument == "expert_offsets"
    moe.check()


# ---- CUDA graphs and torch.compile ----------------------------------------------------------------


def test_cuda_graph_replayed_with_new_routings(backend):
    """Captured once, replayed 1000 times, each replay with a new routing (offsets and gather
    index copied into the captured tensors), every replay checked against the reference."""
    e, n, k, tokens, topk = 16, 128, 256, 24, 4
    d = random_moe(e, n, k, tokens, topk, values="gpumode", seed=10)
    a, sa, w, ws = (cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales))
    offsets, gather = cuda(d.offsets), cuda(d.gather)
    out = torch.empty(d.capacity, n, dtype=torch.float32, device="cuda")
    # Warm-up outside the graph builds and caches the plan.
    moe.grouped_gemm(a, sa, w, ws, offsets, gather_index=gather, out=out, out_dtype="float32")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        moe.grouped_gemm(a, sa, w, ws, offsets, gather_index=gather, out=out, out_dtype="float32")
    assert fp4gemm.plan_cache_info()["moe_pinned"] >= 1
    rng = np.random.default_rng(11)
    for i in range(1000):
        routing = ["uniform", "skewed", "one-hot", "most-empty", "balanced"][i % 5]
        d.offsets, d.gather, _ = moe.align_routing(random_topk(rng, tokens, e, topk, routing), e)
        offsets.copy_(cuda(d.offsets))
        gather.copy_(cuda(d.gather))
        out.fill_(float("nan"))
        graph.replay()
        assert_bit_exact(out.cpu().double().numpy(), host_reference(d))
    moe.check()


def test_cuda_graph_with_routing_computed_inside(backend):
    """The router's output (top-k ids) is the only input that changes: align_routing and the op
    (allocating its output in the graph's pool, plan first built during the capture) both run
    inside the graph."""
    e, n, k, tokens, topk = 32, 64, 128, 16, 2
    d = random_moe(e, n, k, tokens, topk, values="gpumode", seed=12)
    a, sa, w, ws = (cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales))
    ids = torch.zeros(tokens, topk, dtype=torch.int64, device="cuda")
    fp4gemm.clear_plan_cache()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        offsets, gather, _ = moe.align_routing(ids, e)
        out = ops.moe_grouped_gemm(a, sa, w, ws, offsets, gather, out_dtype=torch.float32)
    rng = np.random.default_rng(13)
    for routing in ["uniform", "one-hot", "skewed"] * 10:
        topk_ids = random_topk(rng, tokens, e, topk, routing)
        ids.copy_(torch.from_numpy(topk_ids))
        graph.replay()
        d.offsets, d.gather, _ = moe.align_routing(topk_ids, e)
        assert_bit_exact(out.cpu().double().numpy(), host_reference(d))


def test_torch_compile_fullgraph_changing_routing(backend):
    """torch.compile(fullgraph=True) (inductor) of the op: one compiled graph, a new routing per
    call, each result against the reference; the allocator's free blocks poisoned first so an
    unwritten element shows (capacity exactly full: every row is written)."""
    e, n, k, tokens, topk = 8, 128, 256, 20, 2
    d = random_moe(e, n, k, tokens, topk, values="gpumode", seed=14)
    a, sa, w, ws = (cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales))

    def fn(a, sa, w, ws, offsets, gather):
        return ops.moe_grouped_gemm(a, sa, w, ws, offsets, gather, out_dtype=torch.float32) * 2.0 + 1.0

    compiled = torch.compile(fn, fullgraph=True)
    rng = np.random.default_rng(15)
    for i, poison in enumerate([float("nan"), 1e30] * 4):
        d.offsets, d.gather, _ = moe.align_routing(random_topk(rng, tokens, e, topk, "skewed"), e)
        blocks = [torch.full((d.capacity, n), poison, device="cuda") for _ in range(2)]
        torch.cuda.synchronize()
        del blocks
        got = (compiled if i % 2 else fn)(a, sa, w, ws, cuda(d.offsets), cuda(d.gather))
        torch.cuda.synchronize()
        assert_bit_exact(((got.double() - 1.0) / 2.0).cpu().numpy(), host_reference(d))


def test_wrappers_eager_path_matches_the_dispatcher(backend):
    """ops.moe_grouped_gemm(_out) call the implementation directly for plain eager tensors (no
    dispatcher overhead): bitwise the same output as torch.ops.fp4gemm, out's version counter
    bumped like the op's, and a tensor subclass still goes through the dispatcher."""
    d = random_moe(8, 64, 128, 12, 2, seed=24)
    a, sa, w, ws, off, g = (cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather))
    via_op = torch.ops.fp4gemm.moe_grouped_gemm(a, sa, w, ws, off, g, None, None, "", "blocked", torch.float32)
    direct = ops.moe_grouped_gemm(a, sa, w, ws, off, g, out_dtype=torch.float32)
    out = torch.full_like(direct, float("nan"))
    version = out._version
    ops.moe_grouped_gemm_out(a, sa, w, ws, off, out, g)
    assert out._version > version
    torch.cuda.synchronize()
    for got in (direct, out):
        assert torch.equal(got.view(torch.int32), via_op.view(torch.int32))
    assert_bit_exact(direct.cpu().double().numpy(), host_reference(d))

    class Sub(torch.Tensor):
        pass

    assert ops._plain_eager(a, sa, w, ws, off, g, None), "plain tensors take the direct path"
    assert not ops._plain_eager(a.as_subclass(Sub), sa), "a tensor subclass goes through the dispatcher"


def _require_native(op):
    """Skips (visibly) on a torch without stable-ABI kernel registration (< 2.10); else the op's C++
    kernel must be registered."""
    status = ops.native_status()[op]
    major, minor = (int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    if (major, minor) < (2, 10):
        pytest.skip(f"torch {torch.__version__} has no stable-ABI kernel registration ({status})")
    assert status == "", f"{op}: the native kernel is not registered: {status}"


def test_torch_op_runs_the_native_kernel(backend):
    """torch.ops.fp4gemm.moe_grouped_gemm on CUDA tensors runs its C++ kernel (registered through
    torch's stable C ABI, torch >= 2.10; each call's path is counted, so a silent fallback fails):
    bitwise fp4gemm.moe.grouped_gemm's output for each out dtype, alpha as a number and as a
    per-expert tensor, W4A4 and W4A16, with and without gather_index, and no routed rows. Linear
    scales and alpha given twice take the Python kernel; bad arguments raise a RuntimeError
    naming them on either path."""
    _require_native("moe_grouped_gemm")
    alpha_t = torch.rand(8, device="cuda") + 0.5

    def call(path, a, sa, w, ws, off, g, alpha, out_dtype, layout="blocked", fmt=""):
        hot0, py0 = ops._C._torch_native_counts()
        al, al_t = (alpha, None) if not isinstance(alpha, torch.Tensor) else (None, alpha)
        got = torch.ops.fp4gemm.moe_grouped_gemm(a, sa, w, ws, off, g, al, al_t, fmt, layout, out_dtype)
        hot1, py1 = ops._C._torch_native_counts()
        assert (hot1 - hot0, py1 - py0) == ((1, 0) if path == "hot" else (0, 1))
        want = moe.grouped_gemm(a, sa, w, ws, off, gather_index=g, alpha=alpha, scale_layout=layout,
                                format=fmt or None, out_dtype=str(out_dtype).split(".")[1])
        torch.cuda.synchronize()
        bits = torch.int32 if out_dtype == torch.float32 else torch.int16
        assert got.dtype == out_dtype and got.shape == want.shape
        assert torch.equal(got.view(bits), want.view(bits))
        return got

    cases = [("nvfp4", "fp4", torch.float32, None, True), ("nvfp4", "fp4", torch.bfloat16, 0.75, True),
             ("mxfp4", "bf16", torch.float16, alpha_t, False), ("mxfp4", "fp4", torch.bfloat16, None, False)]
    for i, (fmt, act, out_dtype, alpha, gathered) in enumerate(cases):
        d = random_moe(8, 64, 128, 12, 2, format=fmt, activation=act, seed=80 + i)
        a, sa, w, ws, off, g = (cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather))
        if not gathered:  # the rows already in expert order
            a, sa, g = a[g.long()], (None if sa is None else sa[g.long()]), None
        for f in ("", fmt) if fmt == ("mxfp4" if act == "bf16" else "nvfp4") else (fmt, fmt):
            call("hot", a, sa, w, ws, off, g, alpha, out_dtype, fmt=f)  # a miss (plan built in C++), a hit
    # no routed rows: an empty [0, N] output
    got = call("hot", a, sa, w, ws, torch.zeros(9, dtype=torch.int32, device="cuda"),
               torch.empty(0, dtype=torch.int32, device="cuda"), None, torch.bfloat16, fmt="mxfp4")
    assert got.shape == (0, 64)
    # linear scales: the Python kernel (its plans are keyed on torch's _version of the scales)
    d = random_moe(8, 64, 128, 12, 2, scale_layout="linear", seed=90)
    args = [cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather)]
    call("python", *args, None, torch.float32, layout="linear")
    # errors, named: on the hot path (the binding's checks) and on the Python path
    d = random_moe(8, 64, 128, 12, 2, seed=91)
    a, sa, w, ws, off, g = (cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather))
    with pytest.raises(RuntimeError, match="ArgumentError: .*expert_offsets"):
        torch.ops.fp4gemm.moe_grouped_gemm(a, sa, w, ws, off.long(), g, None, None, "", "blocked", torch.float32)
    with pytest.raises(RuntimeError, match="ArgumentError: .*a_scales"):
        torch.ops.fp4gemm.moe_grouped_gemm(a, None, w, ws, off, g, None, None, "", "blocked", torch.float32)
    with pytest.raises(RuntimeError, match="ArgumentError: .*alpha"):
        torch.ops.fp4gemm.moe_grouped_gemm(a, sa, w, ws, off, g, 0.5, alpha_t, "", "blocked", torch.float32)
    with pytest.raises(fp4gemm.ArgumentError, match="alpha"):  # the private op called directly raises as usual
        torch.ops.fp4gemm._moe_grouped_gemm_python(a, sa, w, ws, off, g, 0.5, alpha_t, "", "blocked", torch.float32)
    # bad device data through the C++ kernel: reported by moe.check(), naming the argument
    moe.check()
    bad = torch.tensor([0, 9, 3, 12, 16, 16, 16, 16, 24], dtype=torch.int32, device="cuda")
    hot0, _ = ops._C._torch_native_counts()
    torch.ops.fp4gemm.moe_grouped_gemm(a, sa, w, ws, bad, g, None, None, "", "blocked", torch.float32)
    assert ops._C._torch_native_counts()[0] == hot0 + 1
    with pytest.raises(fp4gemm.ArgumentError, match=r"expert_offsets\[2\] = 3"):
        moe.check()
    g_bad = g.clone()
    g_bad[5] = 10**6
    torch.ops.fp4gemm.moe_grouped_gemm(a, sa, w, ws, off, g_bad, None, None, "", "blocked", torch.float32)
    with pytest.raises(fp4gemm.ArgumentError, match="gather_index"):
        moe.check()
    moe.check()  # cleared
    call("hot", a, sa, w, ws, off, g, None, torch.float32)


def test_torch_out_op_runs_the_native_kernel(backend):
    """torch.ops.fp4gemm.moe_grouped_gemm_out on CUDA tensors runs its C++ kernel (each call's path
    counted): bitwise fp4gemm.moe.grouped_gemm's output per out dtype, alpha kind, W4A4 / W4A16,
    with and without gather_index; `out`'s version counter bumped once per call on both paths (as
    its mutates_args says); the guard rows around `out` untouched. The memo of the previous call
    (plan_cache_info()["moe_memo_hits"]) serves only a call with the same arrays and options: a new
    routing written into the same tensors is read on the device, while a new alpha, format or out
    misses it. A CUDA graph of the op replays new routings, and eager calls after it are right."""
    _require_native("moe_grouped_gemm_out")
    alpha_t = torch.rand(8, device="cuda") + 0.5

    def guarded(rows, n, dtype):
        buf = torch.full((rows + 2, n), float("nan"), dtype=dtype, device="cuda")
        return buf, buf[1:rows + 1]

    def call(path, a, sa, w, ws, off, g, out, alpha, fmt="", layout="blocked", memo=None):
        hot0, py0 = ops._C._torch_native_counts()
        memo0 = fp4gemm.plan_cache_info()["moe_memo_hits"]
        version = out._version
        al, al_t = (alpha, None) if not isinstance(alpha, torch.Tensor) else (None, alpha)
        torch.ops.fp4gemm.moe_grouped_gemm_out(a, sa, w, ws, off, g, out, al, al_t, fmt, layout)
        hot1, py1 = ops._C._torch_native_counts()
        assert (hot1 - hot0, py1 - py0) == ((1, 0) if path == "hot" else (0, 1))
        assert out._version == version + 1
        if memo is not None:
            assert fp4gemm.plan_cache_info()["moe_memo_hits"] - memo0 == memo
        check(a, sa, w, ws, off, g, out, alpha, fmt, layout)

    def check(a, sa, w, ws, off, g, out, alpha, fmt="", layout="blocked"):
        want = moe.grouped_gemm(a, sa, w, ws, off, gather_index=g, alpha=alpha, scale_layout=layout,
                                format=fmt or None, out_dtype=str(out.dtype).split(".")[1])
        torch.cuda.synchronize()
        bits = torch.int32 if out.dtype == torch.float32 else torch.int16
        assert torch.equal(out.view(bits), want.view(bits))

    def guards_intact(buf):
        assert torch.isnan(buf[0]).all() and torch.isnan(buf[-1]).all()

    cases = [("nvfp4", "fp4", torch.float32, None, True), ("nvfp4", "fp4", torch.bfloat16, 0.75, True),
             ("mxfp4", "bf16", torch.float16, alpha_t, False), ("mxfp4", "fp4", torch.bfloat16, None, False)]
    for i, (fmt, act, out_dtype, alpha, gathered) in enumerate(cases):
        d = random_moe(8, 64, 128, 12, 2, format=fmt, activation=act, seed=180 + i)
        a, sa, w, ws, off, g = (cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather))
        if not gathered:
            a, sa, g = a[g.long()], (None if sa is None else sa[g.long()]), None
        buf, out = guarded(d.capacity, 64, out_dtype)
        call("hot", a, sa, w, ws, off, g, out, alpha, fmt=fmt, memo=0)  # new weights: the checks and a plan
        call("hot", a, sa, w, ws, off, g, out, alpha, fmt=fmt, memo=1)  # the same arrays: the memo
        guards_intact(buf)
    # the memo against what changes between calls
    d = random_moe(8, 64, 128, 12, 2, format="nvfp4", seed=190)
    a, sa, w, ws, off, g = (cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather))
    buf, out = guarded(d.capacity, 64, torch.bfloat16)
    call("hot", a, sa, w, ws, off, g, out, 0.75)
    call("hot", a, sa, w, ws, off, g, out, 0.75, memo=1)
    for seed in (191, 192):  # a new routing in the same tensors: the memo, read on the device
        r = random_moe(8, 64, 128, 12, 2, format="nvfp4", seed=seed)
        off.copy_(cuda(r.offsets))
        g.copy_(cuda(r.gather))
        call("hot", a, sa, w, ws, off, g, out, 0.75, memo=1)
    call("hot", a, sa, w, ws, off, g, out, 0.5, memo=0)  # alpha
    call("hot", a, sa, w, ws, off, g, out, 0.5, memo=1)
    call("hot", a, sa, w, ws, off, g, out, 0.5, fmt="nvfp4", memo=0)  # format spelled out
    buf2, out2 = guarded(d.capacity, 64, torch.bfloat16)
    call("hot", a, sa, w, ws, off, g, out2, 0.5, fmt="nvfp4", memo=0)  # another out
    guards_intact(buf)
    guards_intact(buf2)
    # a CUDA graph of the op, replayed with new routings; eager calls after it
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.ops.fp4gemm.moe_grouped_gemm_out(a, sa, w, ws, off, g, out, 0.75, None, "", "blocked")
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.ops.fp4gemm.moe_grouped_gemm_out(a, sa, w, ws, off, g, out, 0.75, None, "", "blocked")
    for seed in range(193, 197):
        r = random_moe(8, 64, 128, 12, 2, format="nvfp4", seed=seed)
        off.copy_(cuda(r.offsets))
        g.copy_(cuda(r.gather))
        out.fill_(float("nan"))
        graph.replay()
        check(a, sa, w, ws, off, g, out, 0.75)
        call("hot", a, sa, w, ws, off, g, out2, 0.75)  # eager, the captured plan
    del graph
    guards_intact(buf)
    # inference tensors (no version counter) take the C++ kernel too
    with torch.inference_mode():
        inf = torch.empty(d.capacity, 64, dtype=torch.bfloat16, device="cuda")
        hot0, _ = ops._C._torch_native_counts()
        torch.ops.fp4gemm.moe_grouped_gemm_out(a, sa, w, ws, off, g, inf, None, None, "", "blocked")
        assert ops._C._torch_native_counts()[0] == hot0 + 1
    check(a, sa, w, ws, off, g, inf.clone(), None)
    # out requiring grad, a leaf and a non-leaf: written, version bumped, no autograd node added
    # (as the Python kernel's increment_version)
    leaf = torch.zeros(d.capacity, 64, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    nonleaf = torch.zeros(d.capacity, 64, dtype=torch.bfloat16, device="cuda", requires_grad=True) * 1
    for t in (leaf, nonleaf):
        grad_fn, version = t.grad_fn, t._version
        hot0, _ = ops._C._torch_native_counts()
        torch.ops.fp4gemm.moe_grouped_gemm_out(a, sa, w, ws, off, g, t, None, None, "", "blocked")
        assert ops._C._torch_native_counts()[0] == hot0 + 1
        assert t._version == version + 1 and t.grad_fn is grad_fn and t.requires_grad
        check(a, sa, w, ws, off, g, t.detach(), None)
    # linear scales: the Python kernel, the version bumped there too
    d = random_moe(8, 64, 128, 12, 2, scale_layout="linear", seed=197)
    args = [cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather)]
    buf, out = guarded(d.capacity, 64, torch.float32)
    call("python", *args, out, None, layout="linear")
    guards_intact(buf)
    # errors, named, `out` untouched and its version kept: the C++ checks and the Python kernel's
    d = random_moe(8, 64, 128, 12, 2, seed=198)
    a, sa, w, ws, off, g = (cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather))
    buf, out = guarded(d.capacity, 64, torch.float32)
    version = out._version
    with pytest.raises(RuntimeError, match="ArgumentError: .*expert_offsets"):
        torch.ops.fp4gemm.moe_grouped_gemm_out(a, sa, w, ws, off.long(), g, out, None, None, "", "blocked")
    with pytest.raises(RuntimeError, match="ArgumentError: fp4gemm: out"):
        torch.ops.fp4gemm.moe_grouped_gemm_out(a, sa, w, ws, off, g, out[:-1], None, None, "", "blocked")
    with pytest.raises(RuntimeError, match="ArgumentError: .*alpha"):
        torch.ops.fp4gemm.moe_grouped_gemm_out(a, sa, w, ws, off, g, out, 0.5, alpha_t, "", "blocked")
    assert out._version == version and torch.isnan(buf).all()
    with pytest.raises(fp4gemm.ArgumentError, match="alpha"):  # the private op called directly raises as usual
        torch.ops.fp4gemm._moe_grouped_gemm_out_python(a, sa, w, ws, off, g, out, 0.5, alpha_t, "", "blocked")


def test_opcheck(backend):
    d = random_moe(4, 64, 128, 8, 2, seed=16)
    args = [cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather)]
    torch.library.opcheck(torch.ops.fp4gemm.moe_grouped_gemm.default, (*args, None, None, "", "blocked", torch.float32))


# ---- host side ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["offsets_dtype", "a_cols", "out_rows"])
def test_host_and_device_reject_alike(backend, case):
    d = random_moe(4, 32, 64, 6, 2, seed=17)
    host = dict(a=d.a, a_scales=d.a_scales, w=d.w, w_scales=d.w_scales, expert_offsets=d.offsets,
                gather_index=d.gather, out=d.output("float32"))
    if case == "offsets_dtype":
        host["expert_offsets"] = d.offsets.astype(np.int16)
    elif case == "a_cols":
        host["a"] = np.ascontiguousarray(d.a[:, :16])
    else:
        host["out"] = d.output("float32")[:5]
    dev = {key: cuda(v) for key, v in host.items()}
    errors = []
    for args in (host, dev):
        with pytest.raises(fp4gemm.ArgumentError) as info:
            moe.grouped_gemm(args["a"], args["a_scales"], args["w"], args["w_scales"], args["expert_offsets"],
                             gather_index=args["gather_index"], out=args["out"], out_dtype="float32")
        errors.append(info.value)
    assert str(errors[0]) == str(errors[1]) and errors[0].argument == errors[1].argument


def test_devices_must_match(backend):
    d = random_moe(4, 32, 64, 6, 2, seed=18)
    with pytest.raises(fp4gemm.ArgumentError, match="a: is on cpu but the weights are on cuda:0"):
        moe.grouped_gemm(torch.from_numpy(d.a), cuda(d.a_scales), cuda(d.w), cuda(d.w_scales), cuda(d.offsets),
                         gather_index=cuda(d.gather))


def test_plan_cache_and_host_overhead(backend, capsys):
    """A repeated call hits the cache (one plan per weight set, options and row count); new weights
    miss. Prints the host time per call (aim: < 10 us beyond the launches)."""
    fp4gemm.clear_plan_cache()
    d = random_moe(128, 512, 1024, 64, 8, seed=19)
    a, sa, w, ws, off, g = (cuda(x) for x in (d.a, d.a_scales, d.w, d.w_scales, d.offsets, d.gather))
    out = torch.empty(d.capacity, 512, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        moe.grouped_gemm(a, sa, w, ws, off, gather_index=g, out=out)
    info = fp4gemm.plan_cache_info()
    assert info["moe_misses"] == 1 and info["moe_hits"] == 2 and info["moe_plans"] == 1, info
    moe.grouped_gemm(a, sa, w.clone(), ws, off, gather_index=g, out=out)
    assert fp4gemm.plan_cache_info()["moe_misses"] == 2
    plan = moe.MoeGemm(w, ws, capacity=d.capacity)
    torch.cuda.synchronize()
    timings = {}
    for name, fn in [("fp4gemm.moe.grouped_gemm", lambda: moe.grouped_gemm(a, sa, w, ws, off, gather_index=g, out=out)),
                     ("MoeGemm.run", lambda: plan.run(a, sa, off, gather_index=g, out=out)),
                     ("ops.moe_grouped_gemm_out", lambda: ops.moe_grouped_gemm_out(a, sa, w, ws, off, out, g))]:
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        timings[name] = (time.perf_counter() - t0) / 200 * 1e6
        torch.cuda.synchronize()
    with capsys.disabled():
        print("\nMoE host time per call (us, includes the 2 kernel launches):")
        for name, us in timings.items():
            print(f"  {name:<32} {us:7.2f}")
    assert timings["MoeGemm.run"] < 200.0  # sanity only


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_align_routing_kernel_matches_numpy(dtype):
    """align_routing on a CUDA tensor (one fp4gemm kernel) returns the NumPy path's arrays, for
    routings of every kind, E from 1 to 512 and T * k up to 131072 (outputs are fresh tensors:
    every element is compared)."""
    rng = np.random.default_rng(21)
    cases = [(1, 5, 1), (8, 1, 2), (32, 16, 2), (128, 256, 8), (256, 1000, 8), (512, 300, 4), (256, 16384, 8)]
    for e, tokens, topk in cases:
        for routing in ("uniform", "one-hot", "skewed"):
            ids = random_topk(rng, tokens, e, topk, routing).astype(dtype)
            got = moe.align_routing(torch.from_numpy(ids).cuda(), e)
            want = moe.align_routing(ids, e)
            for g, w, name in zip(got, want, ("offsets", "gather", "order")):
                assert g.is_cuda, name
                np.testing.assert_array_equal(g.cpu().numpy(), w, err_msg=f"{name}: E {e}, T {tokens}, {routing}")


def test_align_routing_kernel_ids_out_of_range():
    """Ids outside [0, E) own no row: the offsets and the rows of [offsets[0], offsets[E]) are the
    NumPy path's; the out-of-range rows lie before and after them (their order among themselves is
    by index on the device, by value in NumPy)."""
    rng = np.random.default_rng(22)
    e, tokens, topk = 16, 200, 4
    ids = rng.integers(-3, e + 3, size=(tokens, topk)).astype(np.int64)
    off, gat, order = (x.cpu().numpy() for x in moe.align_routing(torch.from_numpy(ids).cuda(), e))
    w_off, w_gat, w_order = moe.align_routing(ids, e)
    np.testing.assert_array_equal(off, w_off)
    lo, hi = off[0], off[e]
    np.testing.assert_array_equal(gat[lo:hi], w_gat[lo:hi])
    np.testing.assert_array_equal(order[lo:hi], w_order[lo:hi])
    flat = ids.reshape(-1)
    assert (flat[order[:lo]] < 0).all() and (flat[order[hi:]] >= e).all()
    assert sorted(order.tolist()) == list(range(flat.size))  # a permutation


def test_align_routing_kernel_under_graph_capture():
    """The kernel path inside a CUDA graph, replayed with new ids."""
    e, tokens, topk = 64, 33, 8
    ids = torch.zeros(tokens, topk, dtype=torch.int64, device="cuda")
    moe.align_routing(ids, e)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        offsets, gather, order = moe.align_routing(ids, e)
    rng = np.random.default_rng(23)
    for routing in ("uniform", "skewed", "one-hot") * 3:
        new = random_topk(rng, tokens, e, topk, routing)
        ids.copy_(torch.from_numpy(new))
        gather.fill_(-1)
        graph.replay()
        want = moe.align_routing(new, e)
        for g, w in zip((offsets, gather, order), want):
            np.testing.assert_array_equal(g.cpu().numpy(), w)
