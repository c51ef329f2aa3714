"""GPU tier: GPU MODE's nvfp4_dual_gemm drop-in (fp4gemm.gpumode.dual_gemm_custom_kernel) -- bit for
bit the host reference with the FP32 epilogue on GPU MODE data (the NumPy MoeGemm GLU path), within
GPU MODE's rule of the float64 dual GEMM on a benchmark shape, and still right when the harness
refills the same tensors with new data (the plan is cached on their addresses)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tier needs torch and a CUDA device)")

from fp4gemm import gpumode, moe  # noqa: E402


@pytest.fixture(autouse=True)
def _fast_kernel_only(backend):
    if backend != "auto":
        pytest.skip(f"the dual GEMM runs only the fast kernel (sm_90); this tier runs backend {backend!r}")


def _host_glu(data, i):
    """The NumPy path of MoeGemm's separate-layout GLU on batch i (reference::moe_gemm, glu_fp32)."""
    a, b1, b2, sfa, sfb1, sfb2 = (np.ascontiguousarray(t[:, :, i].view(torch.uint8).cpu().numpy()) for t in data[:6])
    m, n = a.shape[0], b1.shape[0]
    g = moe.MoeGemm(b1[None], sfb1[None], format="nvfp4", scale_layout="linear", out_dtype="float16", capacity=m,
                    epilogue="silu", gate_up="separate", w_up=b2[None], w_up_scales=sfb2[None])
    return g.run(a, sfa, expert_offsets=np.array([0, m], np.int32), out=np.empty((m, n), np.float16))


def test_small_batched_bit_exact():
    data = gpumode.dual_generate_input(64, 256, 512, l=3, seed=3)
    data[-1].fill_(float("nan"))
    c = gpumode.dual_gemm_custom_kernel(data)
    torch.cuda.synchronize()
    assert c is data[-1]
    for i in range(3):
        got = c[:, :, i].cpu().numpy()
        assert np.array_equal(got.view(np.uint16), _host_glu(data, i).view(np.uint16)), i


def test_reference_backend_same_bytes():
    """The GPU reference kernel's dual GEMM (backend 'reference'): the same bytes as the fast kernel
    and the host reference on GPU MODE values; the drop-in's plan cache keys on the backend."""
    import fp4gemm

    data = gpumode.dual_generate_input(96, 512, 1024, l=2, seed=7)
    fast = gpumode.dual_gemm_custom_kernel(data).clone()
    before = fp4gemm.get_default_backend()
    try:
        fp4gemm.set_default_backend("reference")
        data[-1].fill_(float("nan"))
        ref = gpumode.dual_gemm_custom_kernel(data)
        torch.cuda.synchronize()
    finally:
        fp4gemm.set_default_backend(before)
    assert torch.equal(fast.view(torch.int16), ref.view(torch.int16))
    for i in range(2):
        assert np.array_equal(ref[:, :, i].cpu().numpy().view(np.uint16), _host_glu(data, i).view(np.uint16)), i


def test_benchmark_shape_within_gpumode_rule_and_refilled_inputs():
    data = gpumode.dual_generate_input(256, 3072, 4096, l=1, seed=4)
    for seed in (4, 5):
        if seed == 5:  # the harness's pattern: new values in the same tensors
            new = gpumode.dual_generate_input(256, 3072, 4096, l=1, seed=5)
            for old, fresh in zip(data, new):
                old.copy_(fresh)
        c = gpumode.dual_gemm_custom_kernel(data)
        torch.cuda.synchronize()
        ref = gpumode.dual_ref_kernel(data).double().numpy()
        got = c.cpu().double().numpy()
        # GPU MODE's rule; outputs beyond float16's range are inf in both (equal infinities pass)
        with np.errstate(invalid="ignore"):
            ok = (got == ref) | (np.abs(got - ref) <= 1e-3 + 1e-3 * np.abs(ref))
        assert ok.all(), (seed, int((~ok).sum()))
        assert np.array_equal(c[:, :, 0].cpu().numpy().view(np.uint16), _host_glu(data, 0).view(np.uint16)), seed


def test_batched_drop_in_memo_follows_the_tensors():
    """GPU MODE's l > 1 form through the call memo: a repeated call is a memo hit (nothing read
    again); a parent tensor re-pointed with set_() at other values is planned again and gives the
    new result (the memo keys on the given tensors, whose states stand for their batch views)."""
    import fp4gemm

    data = list(gpumode.dual_generate_input(64, 256, 512, l=3, seed=8))
    gpumode.dual_gemm_custom_kernel(tuple(data))
    before = fp4gemm.plan_cache_info()["memo_hits"]
    data[-1].fill_(float("nan"))
    c = gpumode.dual_gemm_custom_kernel(tuple(data))
    torch.cuda.synchronize()
    assert fp4gemm.plan_cache_info()["memo_hits"] == before + 1
    for i in range(3):
        assert np.array_equal(c[:, :, i].cpu().numpy().view(np.uint16), _host_glu(data, i).view(np.uint16)), i
    fresh = gpumode.dual_generate_input(64, 256, 512, l=3, seed=9)
    data[0].set_(fresh[0].clone())  # a: new storage, new values
    data[-1].fill_(float("nan"))
    c = gpumode.dual_gemm_custom_kernel(tuple(data))
    torch.cuda.synchronize()
    for i in range(3):
        assert np.array_equal(c[:, :, i].cpu().numpy().view(np.uint16), _host_glu(data, i).view(np.uint16)), i


def test_mismatched_shapes_named():
    data = list(gpumode.dual_generate_input(64, 256, 512, l=1, seed=6))
    data[2] = data[2][:128]  # b2 with fewer rows than b1
    with pytest.raises(Exception) as err:
        gpumode.dual_gemm_custom_kernel(tuple(data))
    assert getattr(err.value, "argument", None) == "data", str(err.value)


# ---- fp4gemm.DualGemm on CUDA tensors ---------------------------------------------------------------


def _groups(shapes, seed):
    rng = np.random.default_rng(seed)
    nib = np.array([0x0, 0x1, 0x9, 0x2, 0xA, 0x3, 0xB], np.uint8)
    fp4 = lambda r, k: (nib[rng.integers(0, 7, (r, k // 2))] | (nib[rng.integers(0, 7, (r, k // 2))] << 4)).astype(np.uint8)  # noqa: E731
    sc = lambda r, k: np.array([0x38, 0x40], np.uint8)[rng.integers(0, 2, (r, k // 16))]  # noqa: E731
    return [(fp4(m, k), fp4(n, k), fp4(n, k), sc(m, k), sc(n, k), sc(n, k), np.full((m, n), np.nan, np.float16))
            for m, n, k in shapes]


@pytest.mark.parametrize("act", ["silu", "swigluoai"])
def test_dual_gemm_cuda_equals_the_host_path_bit_for_bit(act):
    import fp4gemm

    groups = _groups([(100, 256, 512), (3, 64, 1024), (300, 136, 256)], seed=7)
    cols = list(zip(*groups))
    host = fp4gemm.DualGemm(*cols, alpha=[1.0, 0.5, 2.0], alpha_up=[0.25, 1.0, 1.0], activation=act)
    host.run()
    dev = [[torch.from_numpy(x).cuda() for x in col] for col in cols]
    d = fp4gemm.DualGemm(*dev, alpha=[1.0, 0.5, 2.0], alpha_up=[0.25, 1.0, 1.0], activation=act)
    assert "dual GEMM" in d.describe()
    d.run()
    torch.cuda.synchronize()
    for g, (want, got) in enumerate(zip(cols[6], dev[6])):
        assert np.array_equal(got.cpu().numpy().view(np.uint16), want.view(np.uint16)), g


def test_dual_gemm_graph_replays_new_data_and_watches_tensors():
    import fp4gemm

    (a, b1, b2, sa, s1, s2, c), = _groups([(64, 128, 512)], seed=8)
    t = [torch.from_numpy(x).cuda() for x in (a, b1, b2, sa, s1, s2, c)]
    d = fp4gemm.DualGemm([t[0]], [t[1]], [t[2]], [t[3]], [t[4]], [t[5]], [t[6]], rescale_each_run=True)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        d.run()  # (warm-up outside the capture)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            d.run()
    for seed in (9, 10):
        (a2, b12, b22, sa2, s12, s22, _), = _groups([(64, 128, 512)], seed=seed)
        for dst, src in zip(t[:6], (a2, b12, b22, sa2, s12, s22)):
            dst.copy_(torch.from_numpy(src))  # new values, scales included, in the same tensors
        t[6].fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        want = np.full((64, 128), np.nan, np.float16)
        fp4gemm.DualGemm([a2], [b12], [b22], [sa2], [s12], [s22], [want]).run()
        assert np.array_equal(t[6].cpu().numpy().view(np.uint16), want.view(np.uint16)), seed
    t[1].set_(torch.empty_like(t[1]))  # the plan's memory is gone from under it
    with pytest.raises(fp4gemm.ArgumentError) as e:
        d.run()
    assert e.value.argument == "b1[0]"
