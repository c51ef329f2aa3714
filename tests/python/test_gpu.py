"""GPU tier (torch + CUDA): bit-exactness against torch dequantise-then-matmul, the GPU MODE
drop-in on the seed cases, CUDA graph replay, torch.compile(fullgraph=True), the plan cache and
the host overhead. Skipped where torch or a CUDA device is missing, the reason saying which."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tier needs torch and a CUDA device)")

import fp4gemm  # noqa: E402
from fp4gemm import gpumode, torch_utils  # noqa: E402
from fp4gemm.testing import numpy_reference, random_groups, round_to  # noqa: E402

# GPU MODE's test shapes (task.yml) and seed benchmarks.
GPUMODE_TESTS = [
    ([96, 128], [128, 256], [256, 512]),
    ([256, 72], [512, 384], [256, 256]),
    ([128, 128], [128, 256], [512, 256]),
    ([80, 128, 256], [384, 256, 128], [256, 512, 256]),
    ([64, 72, 96], [128, 384, 512], [512, 512, 256]),
    ([64, 256, 128], [768, 128, 256], [512, 256, 512]),
    ([128, 128, 64], [256, 512, 512], [768, 256, 768]),
    ([128] * 4, [128] * 4, [512, 256, 512, 256]),
    ([40, 56, 384, 512], [512, 384, 256, 128], [256] * 4),
    ([512, 384, 256, 128], [256] * 4, [512, 768, 512, 768]),
]


def _check_bit_exact(outs, refs):
    for g, (o, r) in enumerate(zip(outs, refs)):
        assert o.shape == r.shape, f"group {g}"
        if not torch.equal(o, r):
            diff = (o.float() - r.float()).abs()
            raise AssertionError(f"group {g}: {int((o != r).sum())} elements differ, max |diff| {diff.max().item()}")


@pytest.mark.parametrize("case", range(len(GPUMODE_TESTS)))
def test_gpumode_tests_bit_exact(backend, case):
    ms, ns, ks = GPUMODE_TESTS[case]
    data = torch_utils.gpumode_input(ms, ns, ks, seed=1111 + case)
    refs = torch_utils.gpumode_reference(data)
    outs = gpumode.custom_kernel(torch_utils.clone_data(data))
    torch.cuda.synchronize()
    _check_bit_exact(outs, refs)


@pytest.mark.parametrize("case", [1, 2, 3, 4])
def test_gpumode_seed_cases(backend, case):
    spec = gpumode.SEED_CASES[case - 1]
    data = gpumode.generate_input(spec["m"], spec["n"], spec["k"], spec["g"], spec["seed"])
    refs = torch_utils.gpumode_reference(data)
    outs = gpumode.custom_kernel(torch_utils.clone_data(data))
    torch.cuda.synchronize()
    assert len(outs) == spec["g"]
    for o, r in zip(outs, refs):  # GPU MODE's rule, then ours (bit-exact)
        assert torch.allclose(o.float(), r.float(), rtol=1e-3, atol=1e-3)
    _check_bit_exact(outs, refs)


def test_gpumode_batch_l_gt_1(backend):
    """l = 2, laid out as GPU MODE lays out l (outermost in memory): each batch is one group."""
    d1 = torch_utils.gpumode_input([128], [256], [256], seed=3)
    d2 = torch_utils.gpumode_input([128], [256], [256], seed=4)
    u8 = lambda t: t.view(torch.uint8)  # noqa: E731

    def batch(x, y):  # [rows, cols, 1] x2 -> [rows, cols, 2] with l outermost
        return torch.stack([u8(x[:, :, 0]), u8(y[:, :, 0])]).permute(1, 2, 0)

    def batch_scales(x, y):  # reordered views x2 -> (32, 4, rm, 4, rk, 2) over (l, rm, rk, 32, 4, 4)
        rm, rk = x.shape[2], x.shape[4]
        flat = torch.stack([torch_utils.blocked_flat(u8(x)), torch_utils.blocked_flat(u8(y))])
        return flat.reshape(2, rm, rk, 32, 4, 4).permute(3, 4, 1, 5, 2, 0)

    (a1, b1, _), (a2, b2, _) = d1[0][0], d2[0][0]
    (s1a, s1b), (s2a, s2b) = d1[2][0], d2[2][0]
    c = torch.empty(2, 128, 256, dtype=torch.float16, device="cuda").permute(1, 2, 0)
    batched = ([(batch(a1, a2), batch(b1, b2), c)], [None], [(batch_scales(s1a, s2a), batch_scales(s1b, s2b))],
               [(128, 256, 256, 2)])
    (out,) = gpumode.custom_kernel(batched)
    torch.cuda.synchronize()
    _check_bit_exact([out[:, :, 0:1], out[:, :, 1:2]],
                     torch_utils.gpumode_reference(d1) + torch_utils.gpumode_reference(d2))


def _to_cuda(d):
    t = lambda xs: [torch.from_numpy(np.ascontiguousarray(x)).cuda() for x in xs]  # noqa: E731
    return t(d.a), t(d.b), t(d.sfa), t(d.sfb)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("layout", ["linear", "blocked"])
@pytest.mark.parametrize("out_dtype", ["float16", "bfloat16", "float32"])
def test_full_range_vs_host_reference(backend, fmt, layout, out_dtype):
    """All 16 nibbles, wide scale ranges, odd shapes, alpha: within half an output ulp plus the
    FP32-accumulation bound (K * 2^-23 * sum|terms|) of the exact float64 result."""
    d = random_groups([1, 0, 77, 200], [8, 64, 136, 256], [64, 128, 256, 512], fmt, layout, values="full", seed=21)
    a, b, sfa, sfb = _to_cuda(d)
    alpha = [1.0, 2.0, 0.5, -3.0]
    outs = fp4gemm.grouped_gemm(a, b, sfa, sfb, alpha=alpha, format=fmt, scale_layout=layout, out_dtype=out_dtype)
    torch.cuda.synchronize()
    mant = {"float16": 10, "bfloat16": 7, "float32": 23}[out_dtype]
    emin = {"float16": -14, "bfloat16": -126, "float32": -126}[out_dtype]
    for g, (o, r) in enumerate(zip(outs, numpy_reference(d, alpha))):
        got = o.float().cpu().double().numpy()
        k = d.a[g].shape[1] * 2
        da = np.abs(fp4gemm.dequantize(d.a[g], d.sfa_linear[g], fmt).astype(np.float64))
        db = np.abs(fp4gemm.dequantize(d.b[g], d.sfb_linear[g], fmt).astype(np.float64))
        slack = k * 2.0**-23 * (da @ db.T) * abs(alpha[g])
        mag = np.maximum(np.abs(r) + slack, 2.0**emin)
        ulp = np.exp2(np.floor(np.log2(mag)) - mant)
        want = round_to(r, out_dtype)
        ok = np.abs(got - r) <= 0.5 * ulp + slack
        ok |= np.isinf(want) & (got == want)
        assert not np.isnan(got).any(), f"group {g}: NaN in the output"
        assert ok.all(), f"group {g}: {int((~ok).sum())} elements out of bounds"


def test_dtype_views_agree(backend):
    data = torch_utils.gpumode_input([96, 128], [256, 256], [512, 512], seed=5)
    a, b, sfa, sfb, c = torch_utils.flatten_groups(data)
    ref = [x.clone() for x in gpumode.custom_kernel(torch_utils.clone_data(data))]
    u8 = lambda xs: [x.view(torch.uint8) for x in xs]  # noqa: E731
    c2 = [torch.empty_like(x) for x in c]
    fp4gemm.grouped_gemm(u8(a), u8(b), u8(sfa), u8(sfb), c2, scale_layout="blocked")
    # flat blocked scales and 2-D operands
    flat = lambda xs: [torch_utils.blocked_flat(x.view(torch.uint8)) for x in xs]  # noqa: E731
    c3 = fp4gemm.grouped_gemm([x[:, :, 0] for x in a], [x[:, :, 0] for x in b], flat(sfa), flat(sfb),
                              scale_layout="blocked")
    torch.cuda.synchronize()
    _check_bit_exact(c2, ref)
    _check_bit_exact([x.unsqueeze(-1) for x in c3], ref)


def test_alpha_device_tensor(backend):
    data = torch_utils.gpumode_input([64, 128], [128, 128], [256, 256], seed=6)
    a, b, sfa, sfb, _ = torch_utils.flatten_groups(data)
    base = fp4gemm.grouped_gemm(a, b, sfa, sfb, scale_layout="blocked", out_dtype="float32")
    alpha = torch.tensor([2.0, -0.5], device="cuda")
    out = fp4gemm.grouped_gemm(a, b, sfa, sfb, alpha=alpha, scale_layout="blocked", out_dtype="float32")
    torch.cuda.synchronize()
    assert torch.equal(out[0], base[0] * 2.0) and torch.equal(out[1], base[1] * -0.5)
    alpha.fill_(4.0)  # read at run time: same plan, new values
    out = fp4gemm.grouped_gemm(a, b, sfa, sfb, alpha=alpha, scale_layout="blocked", out_dtype="float32")
    torch.cuda.synchronize()
    assert torch.equal(out[1], base[1] * 4.0)


def test_plan_cache_and_memo(backend):
    fp4gemm.clear_plan_cache()
    data = torch_utils.gpumode_input([64, 128], [128, 256], [256, 256], seed=7)
    abc = data[0]
    for i, (a, b, c) in enumerate(abc):  # own (non-view) C tensors, so set_/resize_ below are plain
        abc[i] = (a, b, torch.empty(c.shape, dtype=c.dtype, device=c.device))
    for _ in range(5):
        gpumode.custom_kernel(data)
    info = fp4gemm.plan_cache_info()
    assert info["misses"] == 1 and info["memo_hits"] == 4, info
    # New storage behind the same tensor object is noticed, not reused blindly.
    c0 = abc[0][2]
    c0.set_(torch.empty_like(c0))
    gpumode.custom_kernel(data)
    assert fp4gemm.plan_cache_info()["misses"] == 2
    # So is an in-place shape change: validated again, and refused.
    c0.resize_(63, 128, 1)
    with pytest.raises(ValueError, match=r"c\[0\]: has shape \(63, 128, 1\)"):
        gpumode.custom_kernel(data)
    fp4gemm.set_plan_cache_capacity(2)
    for s in range(4):
        gpumode.custom_kernel(torch_utils.gpumode_input([64], [128], [256], seed=100 + s))
    assert fp4gemm.plan_cache_info()["plans"] <= 2
    fp4gemm.set_plan_cache_capacity(64)


def test_cuda_graph_replay(backend):
    shapes = ([80, 176, 128], [256] * 3, [512] * 3)
    data = torch_utils.gpumode_input(*shapes, seed=8)
    a, b, sfa, sfb, c = torch_utils.flatten_groups(data)
    # Direct API: warm up (builds the plan), capture, then replay with new input values.
    fp4gemm.grouped_gemm(a, b, sfa, sfb, c, scale_layout="blocked")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fp4gemm.grouped_gemm(a, b, sfa, sfb, c, scale_layout="blocked")
    fresh = torch_utils.gpumode_input(*shapes, seed=9)
    fa, fb, fsa, fsb, _ = torch_utils.flatten_groups(fresh)
    for x, y in zip(a + b + sfa + sfb, fa + fb + fsa + fsb):
        x.view(torch.uint8).copy_(y.view(torch.uint8))
    for cc in c:
        cc.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check_bit_exact(c, torch_utils.gpumode_reference(fresh))
    assert fp4gemm.plan_cache_info()["pinned"] >= 1


def test_cuda_graph_capture_of_the_op_without_warmup(backend):
    """The functional op allocates C inside the graph's pool: its plan is first built during the
    capture (outside the graph, in relaxed capture mode) and pinned."""
    from fp4gemm import ops

    data = torch_utils.gpumode_input([64, 192], [256, 256], [256, 256], seed=10)
    a, b, sfa, sfb, _ = torch_utils.flatten_groups(data)
    a2, b2 = [x[:, :, 0] for x in a], [x[:, :, 0] for x in b]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.grouped_gemm(a2, b2, sfa, sfb, scale_layout="blocked")
        out_b = [torch.empty(x.shape[0], y.shape[0], dtype=torch.float16, device="cuda") for x, y in zip(a2, b2)]
        ops.grouped_gemm_out(a2, b2, sfa, sfb, out_b, scale_layout="blocked")
    graph.replay()
    torch.cuda.synchronize()
    refs = [r[:, :, 0] for r in torch_utils.gpumode_reference(data)]
    _check_bit_exact(out, refs)
    _check_bit_exact(out_b, refs)


def _poison_free_blocks(shapes, value):
    """Fills fresh float32 blocks of these shapes with `value` and frees them: torch's caching
    allocator hands the same memory to the next allocations of those sizes (the op's own
    torch.empty outputs), so an output element the kernel does not write shows the poison."""
    blocks = [torch.full(s, value, dtype=torch.float32, device="cuda") for s in shapes]
    torch.cuda.synchronize()
    del blocks


def test_torch_compile_fullgraph(backend):
    """torch.compile(fullgraph=True) of the functional op against the independent float64
    reference (exact here: GPU MODE values), with the allocator's free memory poisoned first by
    two values the reference cannot produce (NaN; 1e30 > every |result|). It used to compare the
    compiled op with the eager op on unpoisoned torch.empty memory, i.e. the kernel with itself."""
    from fp4gemm import ops

    ms, ns, ks = [80, 128], [256, 256], [512, 512]
    data = torch_utils.gpumode_input(ms, ns, ks, seed=11)
    a, b, sfa, sfb, _ = torch_utils.flatten_groups(data)
    a2, b2 = [x[:, :, 0] for x in a], [x[:, :, 0] for x in b]
    alpha_values = [1.0, 0.5]
    refs = [torch_utils.reference_matmul(a[g], b[g], sl[:, :, 0].cuda(), sr[:, :, 0].cuda(), alpha=alpha_values[g],
                                         out_dtype=torch.float64) * 2.0 + 1.0
            for g, (sl, sr) in enumerate(data[1])]

    def fn(a, b, sfa, sfb, alpha):
        outs = ops.grouped_gemm(a, b, sfa, sfb, alpha_tensor=alpha, scale_layout="blocked", out_dtype=torch.float32)
        return [o * 2.0 + 1.0 for o in outs]

    alpha = torch.tensor(alpha_values, device="cuda")
    compiled = torch.compile(fn, fullgraph=True)
    shapes = [(m, n) for m, n in zip(ms, ns)]
    for poison in (float("nan"), 1e30):
        for f in (fn, compiled):
            _poison_free_blocks(shapes, poison)
            got = f(a2, b2, sfa, sfb, alpha)
            torch.cuda.synchronize()
            for g, (o, r) in enumerate(zip(got, refs)):
                assert not o.isnan().any(), f"group {g}: unwritten output (poison {poison})"
                assert torch.equal(o.double(), r), f"group {g}: {int((o.double() != r).sum())} elements differ"
            del got


def test_torch_pointer_array_ops_run_the_native_kernel(backend):
    """torch.ops.fp4gemm.grouped_gemm(_out) on CUDA tensors run their C++ kernels (registered
    through torch's stable C ABI; each call's path counted, so a silent fallback fails): exact
    against the float64 reference on GPU MODE data (2-D and 3-D operands), bitwise
    fp4gemm.grouped_gemm with alpha as numbers and as a tensor; the output lists allocated as the
    Python kernel allocates them; every C's version bumped once per call; guard rows around each C
    untouched. The memo of the last call (memo_hits) serves only the same arrays and options: new
    alpha values or another C miss it, new data in the same tensors is read on the device. Lists
    of different lengths and alpha given twice go to the Python kernel, errors named."""
    from fp4gemm import ops

    for op in ("grouped_gemm", "grouped_gemm_out"):
        status = ops.native_status()[op]
        major, minor = (int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
        if (major, minor) < (2, 10):
            pytest.skip(f"torch {torch.__version__} has no stable-ABI kernel registration ({status})")
        assert status == "", f"{op}: the native kernel is not registered: {status}"

    def counted(path, fn):
        hot0, py0 = ops._C._torch_native_counts()
        r = fn()
        hot1, py1 = ops._C._torch_native_counts()
        assert (hot1 - hot0, py1 - py0) == ((1, 0) if path == "hot" else (0, 1))
        return r

    def memo_hits():
        return fp4gemm.plan_cache_info()["memo_hits"]

    ms, ns, ks = [64, 192, 80], [256, 128, 256], [256, 512, 256]
    data = torch_utils.gpumode_input(ms, ns, ks, seed=40)
    a, b, sfa, sfb, _ = torch_utils.flatten_groups(data)
    a2, b2 = [x[:, :, 0] for x in a], [x[:, :, 0] for x in b]
    refs = torch_utils.gpumode_reference(data)
    # the allocating op: [M, N] for 2-D operands, [M, N, 1] for GPU MODE's 3-D ones
    out2 = counted("hot", lambda: torch.ops.fp4gemm.grouped_gemm(a2, b2, sfa, sfb, None, None, "nvfp4", "blocked",
                                                                 torch.float16, ""))
    out3 = counted("hot", lambda: torch.ops.fp4gemm.grouped_gemm(a, b, sfa, sfb, None, None, "nvfp4", "blocked",
                                                                 torch.float16, ""))
    torch.cuda.synchronize()
    _check_bit_exact(out2, [r[:, :, 0] for r in refs])
    _check_bit_exact(out3, refs)
    # the out= op into guarded C: NaN rows above and below each group's C
    bufs = [torch.full((m + 2, n), float("nan"), dtype=torch.float16, device="cuda") for m, n in zip(ms, ns)]
    c = [buf[1:-1] for buf in bufs]

    def run_out(alpha=None, alpha_tensor=None, cs=None, memo=None):
        cs = c if cs is None else cs
        versions = [x._version for x in cs]
        m0 = memo_hits()
        counted("hot", lambda: torch.ops.fp4gemm.grouped_gemm_out(a2, b2, sfa, sfb, cs, alpha, alpha_tensor, "nvfp4",
                                                                  "blocked", ""))
        assert [x._version for x in cs] == [v + 1 for v in versions]
        if memo is not None:
            assert memo_hits() - m0 == memo
        want = fp4gemm.grouped_gemm(a2, b2, sfa, sfb, [torch.empty_like(x) for x in cs], scale_layout="blocked",
                                    alpha=alpha_tensor if alpha_tensor is not None else alpha)
        torch.cuda.synchronize()
        for g, (x, y) in enumerate(zip(cs, want)):
            assert torch.equal(x.view(torch.int16), y.view(torch.int16)), f"group {g}"

    run_out()
    _check_bit_exact(c, [r[:, :, 0] for r in refs])
    run_out(memo=1)
    run_out(alpha=[0.5, 2.0, 0.25], memo=0)
    run_out(alpha=[0.5, 2.0, 0.25], memo=1)
    run_out(alpha=[0.5, 2.0, 0.75], memo=0)
    alpha_t = torch.tensor([0.5, 1.5, 0.25], device="cuda")
    run_out(alpha_tensor=alpha_t, memo=0)
    run_out(alpha_tensor=alpha_t, memo=1)
    alpha_t.copy_(torch.tensor([2.0, 0.5, 1.0]))  # new values in the same tensor: read on the device
    run_out(alpha_tensor=alpha_t, memo=1)
    fresh = torch_utils.gpumode_input(ms, ns, ks, seed=41)  # new data in the same tensors
    fa, fb, fsa, fsb, _ = torch_utils.flatten_groups(fresh)
    for x, y in zip(a + b + sfa + sfb, fa + fb + fsa + fsb):
        x.view(torch.uint8).copy_(y.view(torch.uint8))
    run_out(memo=0)
    run_out(memo=1)
    _check_bit_exact(c, [r[:, :, 0] for r in torch_utils.gpumode_reference(fresh)])
    other = [torch.empty_like(x) for x in c]
    run_out(cs=other, memo=0)
    # alpha in host memory is read when the plan is made: never replayed from the memo
    alpha_cpu = torch.tensor([0.5, 1.5, 0.25])
    run_out(alpha_tensor=alpha_cpu, memo=0)
    alpha_cpu.copy_(torch.tensor([2.0, 0.5, 1.0]))
    run_out(alpha_tensor=alpha_cpu, memo=0)
    # backend "" is the default at call time: a new default misses the memo
    run_out(memo=0)
    run_out(memo=1)
    previous = fp4gemm.get_default_backend()
    try:
        fp4gemm.set_default_backend("reference" if previous != "reference" else "auto")
        run_out(memo=0)
        run_out(memo=1)
    finally:
        fp4gemm.set_default_backend(previous)
    run_out(memo=0)
    for buf in bufs:
        assert torch.isnan(buf[0]).all() and torch.isnan(buf[-1]).all()
    # what the C++ kernels leave to the Python kernels; errors named on both paths
    with pytest.raises(RuntimeError, match=r"ArgumentError: fp4gemm: b: has 2 entries but a has 3"):
        counted("python", lambda: torch.ops.fp4gemm.grouped_gemm_out(a2, b2[:2], sfa, sfb, c, None, None, "nvfp4",
                                                                     "blocked", ""))
    with pytest.raises(RuntimeError, match="ArgumentError: fp4gemm: alpha"):
        torch.ops.fp4gemm.grouped_gemm(a2, b2, sfa, sfb, [1.0] * 3, alpha_t, "nvfp4", "blocked", torch.float16, "")
    with pytest.raises(RuntimeError, match=r"ArgumentError: fp4gemm: alpha: has 2 values for 3 groups"):
        torch.ops.fp4gemm.grouped_gemm_out(a2, b2, sfa, sfb, c, [1.0, 2.0], None, "nvfp4", "blocked", "")
    with pytest.raises(RuntimeError, match=r"ArgumentError: fp4gemm: c\[1\]"):
        torch.ops.fp4gemm.grouped_gemm_out(a2, b2, sfa, sfb, [c[0], c[1][:-1], c[2]], None, None, "nvfp4",
                                           "blocked", "")
    with pytest.raises(fp4gemm.ArgumentError, match="alpha"):  # the private op called directly raises as usual
        torch.ops.fp4gemm._grouped_gemm_python(a2, b2, sfa, sfb, [1.0] * 3, alpha_t, "nvfp4", "blocked",
                                               torch.float16, "")


def test_native_kernels_as_the_first_call_of_a_process(backend):
    """Each C++ torch kernel as the very first fp4gemm call of a fresh process (a kernel used to
    reach the binding's lazily made state without the GIL and crash the process), then again from
    its memo; exact on GPU MODE data."""
    import subprocess
    import sys

    script = """
import torch
from fp4gemm import ops, torch_utils
data = torch_utils.gpumode_input([64], [128], [256], seed=42)
a, b, sfa, sfb, _ = torch_utils.flatten_groups(data)
a, b = [x[:, :, 0] for x in a], [x[:, :, 0] for x in b]
ref = torch_utils.gpumode_reference(data)[0][:, :, 0]
if OP == "grouped_gemm_out":
    c = [torch.full((64, 128), float("nan"), dtype=torch.float16, device="cuda")]
    for _ in range(2):
        torch.ops.fp4gemm.grouped_gemm_out(a, b, sfa, sfb, c, None, None, "nvfp4", "blocked", "")
else:
    for _ in range(2):
        c = torch.ops.fp4gemm.grouped_gemm(a, b, sfa, sfb, None, None, "nvfp4", "blocked", torch.float16, "")
torch.cuda.synchronize()
assert torch.equal(c[0], ref)
assert ops._C._torch_native_counts() == (2, 0), ops._C._torch_native_counts()
print("ok")
"""
    for op in ("grouped_gemm_out", "grouped_gemm"):
        r = subprocess.run([sys.executable, "-c", f"OP = {op!r}\n" + script], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and r.stdout.strip().endswith("ok"), f"{op}: rc {r.returncode}\n{r.stderr[-2000:]}"


def test_opcheck(backend):
    data = torch_utils.gpumode_input([64, 128], [128, 128], [256, 256], seed=12)
    a, b, sfa, sfb, _ = torch_utils.flatten_groups(data)
    a2, b2 = [x[:, :, 0].view(torch.uint8) for x in a], [x[:, :, 0].view(torch.uint8) for x in b]
    # Scales as uint8 views: opcheck's schema check compares inputs with ops (mul) that torch does
    # not implement for float8_e4m3fn; the op accepts both dtypes.
    sfa, sfb = [s.view(torch.uint8) for s in sfa], [s.view(torch.uint8) for s in sfb]
    args = (a2, b2, sfa, sfb, None, None, "nvfp4", "blocked", torch.float16, "")
    torch.library.opcheck(torch.ops.fp4gemm.grouped_gemm.default, args)


def test_errors_on_gpu(backend):
    data = torch_utils.gpumode_input([64], [128], [256], seed=13)
    a, b, sfa, sfb, c = torch_utils.flatten_groups(data)
    with pytest.raises(fp4gemm.ArgumentError, match=r"sfb\[0\]: is on cpu but a\[0\] is on cuda:0"):
        fp4gemm.grouped_gemm(a, b, sfa, [sfb[0].cpu()], c, scale_layout="blocked")
    with pytest.raises(ValueError, match=r"a\[0\]: has dtype float16"):
        fp4gemm.grouped_gemm([c[0]], b, sfa, sfb, c, scale_layout="blocked")
    if not fp4gemm.device_info()["has_fast_kernel"]:
        with pytest.raises(fp4gemm.DeviceError, match="no fast kernel"):
            fp4gemm.grouped_gemm(a, b, sfa, sfb, c, scale_layout="blocked", backend="fast")


@pytest.mark.parametrize("case", ["k_zero", "nan_alpha", "lda_not_16"])
def test_host_and_device_reject_alike(backend, case):
    """The host (NumPy) path runs the device path's validation: the same call is rejected on both
    with the same message (the host path used to accept all three)."""
    d = random_groups([16], 64, 128, seed=16)
    a, b, sfa, sfb = d.a, d.b, d.sfa, d.sfb
    alpha = None
    if case == "k_zero":
        a, b = [np.zeros((16, 0), np.uint8)], [np.zeros((64, 0), np.uint8)]
        sfa, sfb = [np.zeros((16, 0), np.uint8)], [np.zeros((64, 0), np.uint8)]
    elif case == "nan_alpha":
        alpha = [float("nan")]
    else:  # lda = K/2 + 8 bytes
        pad = np.zeros((16, 72), np.uint8)
        pad[:, :64] = d.a[0]
        a = [pad[:, :64]]
    host_c = [np.zeros((16, 64), np.float16)]
    with pytest.raises(fp4gemm.ArgumentError) as host:
        fp4gemm.grouped_gemm(a, b, sfa, sfb, host_c, alpha=alpha)
    cuda = lambda xs: [torch.from_numpy(x).cuda() for x in xs]  # noqa: E731  (keeps the row stride)
    dev_a = [torch.from_numpy(pad).cuda()[:, :64]] if case == "lda_not_16" else cuda(a)
    dev_c = [torch.zeros((16, 64), dtype=torch.float16, device="cuda")]
    with pytest.raises(fp4gemm.ArgumentError) as dev:
        fp4gemm.grouped_gemm(dev_a, cuda(b), cuda(sfa), cuda(sfb), dev_c, alpha=alpha)
    assert str(host.value) == str(dev.value)
    assert host.value.argument == dev.value.argument
    assert not host_c[0].any() and not dev_c[0].any()


def test_grouped_gemm_object(backend):
    data = torch_utils.gpumode_input([80, 176], [256, 256], [512, 512], seed=14)
    a, b, sfa, sfb, c = torch_utils.flatten_groups(data)
    g = fp4gemm.GroupedGemm(a, b, sfa, sfb, c, scale_layout="blocked")
    assert g.num_groups == 2 and g.flops == 2 * (80 + 176) * 256 * 512
    g.run()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g()  # the current stream
    g.run(stream=s)
    torch.cuda.synchronize()
    _check_bit_exact(c, torch_utils.gpumode_reference(data))


def test_cupy_arrays(backend):
    cp = pytest.importorskip("cupy", reason="cupy is not installed")
    d = random_groups([32, 64], 128, 256, seed=15)
    a, b, sfa, sfb = ([cp.asarray(x) for x in xs] for xs in (d.a, d.b, d.sfa, d.sfb))
    c = fp4gemm.grouped_gemm(a, b, sfa, sfb)
    cp.cuda.get_current_stream().synchronize()
    ref = fp4gemm.grouped_gemm(d.a, d.b, d.sfa, d.sfb)
    for x, y in zip(c, ref):
        np.testing.assert_array_equal(cp.asnumpy(x), y)


def test_host_overhead_8_groups(backend, capsys):
    """Prints the host time per call with 8 groups and cached plans (aim: < 10 us)."""
    from fp4gemm import bench

    r = bench.host_overhead(8)
    with capsys.disabled():
        print("\nhost overhead per call, 8 groups, plans cached (us):")
        for k, v in r.items():
            if k != "plan_cache":
                print(f"  {k:<48} {v:7.2f}")
    assert r["fp4gemm.gpumode.custom_kernel"] < 100.0  # sanity only; the aim is < 10 us


# ---- the call memo, GroupedGemm and the plan cache under hostile use (issue 19) ------------------


def _one_group(m, n, k, seed):
    """2-D operands (uint8 views), reordered scales, a fresh zeroed C and the float16 reference."""
    data = torch_utils.gpumode_input([m], [n], [k], seed=seed)
    a, b, sfa, sfb, _ = torch_utils.flatten_groups(data)
    ref = torch_utils.gpumode_reference(data)[0][:, :, 0]
    return [a[0][:, :, 0]], [b[0][:, :, 0]], sfa, sfb, ref


def test_memo_sees_transposed_output(backend):
    """c.t_() on a square C keeps its data_ptr() and shape: the memo used to reuse the plan and
    write the row-major result under the transposed view. Now the strides are part of the memo's
    key, the call is validated again and the column-major C refused."""
    fp4gemm.clear_plan_cache()
    a, b, sfa, sfb, ref = _one_group(128, 128, 256, seed=30)
    c = torch.zeros(128, 128, dtype=torch.float16, device="cuda")
    for _ in range(2):
        fp4gemm.grouped_gemm(a, b, sfa, sfb, [c], scale_layout="blocked")
    assert fp4gemm.plan_cache_info()["memo_hits"] == 1
    torch.cuda.synchronize()
    _check_bit_exact([c], [ref])
    c.zero_()
    c.t_()
    with pytest.raises(fp4gemm.ArgumentError, match=r"c\[0\]: must be contiguous along its last dimension"):
        fp4gemm.grouped_gemm(a, b, sfa, sfb, [c], scale_layout="blocked")
    torch.cuda.synchronize()
    assert not c.any()  # nothing written


def test_memo_sees_new_row_stride(backend):
    """as_strided_ to another row stride at the same address and shape: a new plan for the new
    layout (the memo used to run the old one, with the old ldc)."""
    fp4gemm.clear_plan_cache()
    a, b, sfa, sfb, ref = _one_group(64, 128, 256, seed=31)
    buf = torch.zeros(64 * 136, dtype=torch.float16, device="cuda")
    c = buf.as_strided((64, 128), (136, 1))
    for _ in range(2):
        fp4gemm.grouped_gemm(a, b, sfa, sfb, [c], scale_layout="blocked")
    c.as_strided_((64, 128), (128, 1))
    buf.zero_()
    fp4gemm.grouped_gemm(a, b, sfa, sfb, [c], scale_layout="blocked")
    torch.cuda.synchronize()
    _check_bit_exact([c], [ref])
    assert not buf[64 * 128:].any()


def test_memo_sees_dtype_change(backend):
    """c.data = c.view(torch.bfloat16): same address, shape and strides, another dtype."""
    fp4gemm.clear_plan_cache()
    a, b, sfa, sfb, _ = _one_group(64, 128, 256, seed=32)
    c = torch.zeros(64, 128, dtype=torch.float16, device="cuda")
    for _ in range(2):
        fp4gemm.grouped_gemm(a, b, sfa, sfb, [c], scale_layout="blocked")
    c.data = c.view(torch.bfloat16)
    with pytest.raises(fp4gemm.ArgumentError, match=r"c\[0\]: has dtype bfloat16 but out_dtype is float16"):
        fp4gemm.grouped_gemm(a, b, sfa, sfb, [c], scale_layout="blocked")


def test_storage_resized_under_the_output(backend):
    """c.untyped_storage().resize_() shrinks the memory under a view whose shape still says
    64 x 128: the call (memoised or not) used to write past the storage."""
    fp4gemm.clear_plan_cache()
    a, b, sfa, sfb, _ = _one_group(64, 128, 256, seed=33)
    c = torch.zeros(64, 128, dtype=torch.float16, device="cuda")
    for _ in range(2):
        fp4gemm.grouped_gemm(a, b, sfa, sfb, [c], scale_layout="blocked")
    c.untyped_storage().resize_(c.numel())  # half the bytes
    with pytest.raises(fp4gemm.ArgumentError, match=r"c\[0\]: the kernel would write bytes .* but the tensor's "
                                                     r"storage is"):
        fp4gemm.grouped_gemm(a, b, sfa, sfb, [c], scale_layout="blocked")
    c2 = torch.zeros(64, 128, dtype=torch.float16, device="cuda")
    c2.untyped_storage().resize_(c2.numel())
    with pytest.raises(fp4gemm.ArgumentError, match=r"c\[0\]: the kernel would write bytes"):
        fp4gemm.GroupedGemm(a, b, sfa, sfb, [c2], scale_layout="blocked")


def test_grouped_gemm_object_after_set_(backend):
    """C[0].set_(...) releases the tensor's old storage: run() used to write into it after it was
    freed. Now the plan holds the storages (nothing is freed under it) and run() refuses a tensor
    whose memory changed, naming it."""
    data = torch_utils.gpumode_input([64, 128], [128, 128], [256, 256], seed=34)
    a, b, sfa, sfb, c = torch_utils.flatten_groups(data)
    c = [torch.zeros(x.shape, dtype=x.dtype, device="cuda") for x in c]  # own storages
    g = fp4gemm.GroupedGemm(a, b, sfa, sfb, c, scale_layout="blocked")
    g.run()
    torch.cuda.synchronize()
    _check_bit_exact(c, torch_utils.gpumode_reference(data))
    fresh = torch.zeros_like(c[0])
    allocated = torch.cuda.memory_allocated()
    c[0].set_(fresh)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == allocated, "the old storage of c[0] was freed under the plan"
    with pytest.raises(fp4gemm.ArgumentError, match=r"c\[0\]: changed since this GroupedGemm was built") as info:
        g.run()
    assert info.value.argument == "c[0]" and info.value.group == 0
    torch.cuda.synchronize()
    assert not c[0].any()
    del g
    import gc

    gc.collect()
    assert torch.cuda.memory_allocated() < allocated  # the old storage goes with the plan


def test_grouped_gemm_object_refuses_changed_inputs(backend):
    """A square A transposed in place keeps its address and shape: run() used to go on reading
    it in the old layout."""
    data = torch_utils.gpumode_input([64, 128], [128, 128], [256, 256], seed=35)
    a, b, sfa, sfb, c = torch_utils.flatten_groups(data)
    g = fp4gemm.GroupedGemm(a, b, sfa, sfb, c, scale_layout="blocked")
    a[1].transpose_(0, 1)  # [128, 128, 1]: same shape, strides swapped
    with pytest.raises(fp4gemm.ArgumentError, match=r"a\[1\]: changed since this GroupedGemm was built"):
        g.run()


def test_plan_cache_bounded_by_bytes(backend):
    fp4gemm.clear_plan_cache()
    try:
        gpumode.custom_kernel(torch_utils.gpumode_input([64], [128], [256], seed=40))
        one = fp4gemm.plan_cache_info()["bytes"]
        if one == 0:
            pytest.skip(f"plans of backend {backend!r} hold no device memory here")
        fp4gemm.set_plan_cache_max_bytes(one)  # room for one plan of this shape
        # Inputs kept alive: new addresses, so every call needs a plan of its own.
        kept = [torch_utils.gpumode_input([64], [128], [256], seed=41 + s) for s in range(6)]
        for data in kept[:3]:
            gpumode.custom_kernel(data)
        info = fp4gemm.plan_cache_info()
        assert info["plans"] == 1 and info["bytes"] == one and info["max_bytes"] == one, info
        fp4gemm.set_plan_cache_max_bytes(2 * one)
        for data in kept[3:]:
            gpumode.custom_kernel(data)
        info = fp4gemm.plan_cache_info()
        assert info["plans"] == 2 and info["bytes"] == 2 * one, info
        fp4gemm.set_plan_cache_max_bytes(0)  # the most recent plan stays
        assert fp4gemm.plan_cache_info()["plans"] == 1
    finally:
        fp4gemm.set_plan_cache_max_bytes(1 << 30)


class _Probed(torch.Tensor):
    """A tensor subclass whose data_ptr() runs Python: the binding's probes then can switch
    threads or re-enter fp4gemm in the middle of a call."""

    hook = None
    switch = False

    def data_ptr(self):
        if _Probed.switch:
            import time

            time.sleep(0)  # give the GIL to another thread
        hook, _Probed.hook = _Probed.hook, None
        if hook is not None:
            hook()
        return super().data_ptr()


@pytest.mark.parametrize("hook", ["clear_plan_cache", "evicting_call"])
def test_memo_entry_dropped_during_its_own_probe(backend, hook):
    """The memo used to keep a raw pointer to its entry while probing the tensors (Python code):
    a probe that clears the cache, or a call that evicts the entry, left it dangling (use after
    free; popping an empty list)."""
    fp4gemm.clear_plan_cache()
    fp4gemm.set_plan_cache_capacity(1)
    try:
        a1, b1, sfa1, sfb1, ref1 = _one_group(64, 128, 256, seed=50)
        a2, b2, sfa2, sfb2, ref2 = _one_group(128, 128, 256, seed=51)
        a1 = [a1[0].as_subclass(_Probed)]
        c1, c2 = [torch.zeros_like(ref1)], [torch.zeros_like(ref2)]
        call1 = lambda: fp4gemm.grouped_gemm(a1, b1, sfa1, sfb1, c1, scale_layout="blocked")  # noqa: E731
        call2 = lambda: fp4gemm.grouped_gemm(a2, b2, sfa2, sfb2, c2, scale_layout="blocked")  # noqa: E731
        call1()  # memoised
        _Probed.hook = fp4gemm.clear_plan_cache if hook == "clear_plan_cache" else call2
        c1[0].zero_()
        call1()  # the memo hit's probe of a1[0] runs the hook
        assert _Probed.hook is None
        torch.cuda.synchronize()
        _check_bit_exact(c1, [ref1])
        if hook == "evicting_call":
            _check_bit_exact(c2, [ref2])
        info = fp4gemm.plan_cache_info()
        assert info["memo"] == 1 and info["plans"] == 1, info
        hits = info["memo_hits"]
        call1()
        assert fp4gemm.plan_cache_info()["memo_hits"] == hits + 1
    finally:
        fp4gemm.set_plan_cache_capacity(64)


def test_concurrent_callers(backend):
    """Threads calling grouped_gemm on their own data while the probes switch threads and a
    small cache evicts all the time (and one thread clears it): every result right, no crash."""
    import threading

    fp4gemm.clear_plan_cache()
    fp4gemm.set_plan_cache_capacity(2)
    problems = []
    for t in range(4):
        a, b, sfa, sfb, ref = _one_group(64 * (t + 1), 128, 256, seed=60 + t)
        problems.append(([a[0].as_subclass(_Probed)], b, sfa, sfb, [torch.zeros_like(ref)], ref))
    errors = []
    stop = threading.Event()

    def worker(p):
        a, b, sfa, sfb, c, _ = p
        try:
            for _ in range(50):
                fp4gemm.grouped_gemm(a, b, sfa, sfb, c, scale_layout="blocked")
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    def clearer():
        while not stop.is_set():
            fp4gemm.clear_plan_cache()
            fp4gemm.plan_cache_info()

    _Probed.switch = True
    try:
        threads = [threading.Thread(target=worker, args=(p,)) for p in problems]
        side = threading.Thread(target=clearer)
        side.start()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        stop.set()
        side.join()
    finally:
        _Probed.switch = False
        fp4gemm.set_plan_cache_capacity(64)
    torch.cuda.synchronize()
    assert not errors, errors
    _check_bit_exact([p[4][0] for p in problems], [p[5] for p in problems])
