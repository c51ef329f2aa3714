"""Host tier: the MoE GEMM's GLU epilogue through Python (fp4gemm.moe.MoeGemm with epilogue='silu' /
'swigluoai' on NumPy arrays: reference::moe_gemm with the kernel's FP32 epilogue) against an
independent NumPy float64 dual GEMM (GPU MODE's nvfp4_dual_gemm: C = silu(A B1^T) * (A B2^T)); the
three gate/up layouts give the same bits; argument errors name the GLU fields."""

from __future__ import annotations

import numpy as np
import pytest

import fp4gemm
from fp4gemm import moe

_NIBBLES = np.array([0x0, 0x1, 0x9, 0x2, 0xA, 0x3, 0xB], np.uint8)


def _fp4(rng, shape):
    return (_NIBBLES[rng.integers(0, 7, shape)] | (_NIBBLES[rng.integers(0, 7, shape)] << 4)).astype(np.uint8)


def _case(m=24, n=40, k=128, seed=0):
    rng = np.random.default_rng(seed)
    a, b1, b2 = _fp4(rng, (m, k // 2)), _fp4(rng, (n, k // 2)), _fp4(rng, (n, k // 2))
    sc = lambda rows: np.array([0x38, 0x40], np.uint8)[rng.integers(0, 2, (rows, k // 16))]  # noqa: E731
    return a, sc(m), b1, sc(n), b2, sc(n)


def _dual(a, sa, b1, s1, b2, s2, act="silu"):
    x = fp4gemm.dequantize(a, sa).astype(np.float64)
    g = x @ fp4gemm.dequantize(b1, s1).astype(np.float64).T
    u = x @ fp4gemm.dequantize(b2, s2).astype(np.float64).T
    if act == "silu":
        return g / (1 + np.exp(-g)) * u
    g, u = np.minimum(g, 7.0), np.clip(u, -7.0, 7.0)
    return g / (1 + np.exp(-1.702 * g)) * (u + 1)


def _run(a, sa, b1, s1, b2, s2, gate_up, act="silu", out_dtype="float32"):
    m, n = a.shape[0], b1.shape[0]
    offsets = np.array([0, m], np.int32)
    if gate_up == "separate":
        w, ws, kw = b1[None], s1[None], dict(w_up=b2[None], w_up_scales=s2[None])
    elif gate_up == "stacked":
        w, ws, kw = np.concatenate([b1, b2])[None], np.concatenate([s1, s2])[None], {}
    else:
        w = np.stack([b1, b2], axis=1).reshape(2 * n, -1)[None]
        ws = np.stack([s1, s2], axis=1).reshape(2 * n, -1)[None]
        kw = {}
    g = moe.MoeGemm(w, ws, format="nvfp4", scale_layout="linear", out_dtype=out_dtype, capacity=m, epilogue=act,
                    gate_up=gate_up, **kw)
    assert g.n == n
    out = np.full((m, n), np.nan, np.float32 if out_dtype == "float32" else np.float16)
    return g.run(a, sa, expert_offsets=offsets, out=out)


@pytest.mark.parametrize("act", ["silu", "swigluoai"])
def test_glu_matches_a_numpy_dual_gemm_and_layouts_agree(act):
    a, sa, b1, s1, b2, s2 = _case(seed=1)
    want = _dual(a, sa, b1, s1, b2, s2, act)
    outs = {gu: _run(a, sa, b1, s1, b2, s2, gu, act) for gu in ("separate", "stacked", "interleaved")}
    for gu, got in outs.items():
        # The FP32 epilogue (its own exp, <= 1.4 ulp) against float64: a few FP32 ulps.
        assert np.all(np.abs(got - want) <= 1e-5 * np.abs(want) + 1e-30), gu
        assert np.array_equal(got.view(np.uint32), outs["separate"].view(np.uint32)), gu
    f16 = _run(a, sa, b1, s1, b2, s2, "separate", act, out_dtype="float16").astype(np.float64)
    assert np.all(np.abs(f16 - want) <= 1e-3 + 1e-3 * np.abs(want))  # GPU MODE's rule


def test_glu_argument_errors_named():
    a, sa, b1, s1, b2, s2 = _case()
    with pytest.raises(fp4gemm.ArgumentError) as e:
        moe.MoeGemm(b1[None], s1[None], scale_layout="linear", capacity=8, epilogue="silu", gate_up="separate")
    assert e.value.argument == "w_up"
    with pytest.raises(fp4gemm.ArgumentError) as e:
        moe.MoeGemm(b1[None], s1[None], scale_layout="linear", capacity=8, epilogue="silu", gate_up="separate",
                    w_up=b2[None, :-1], w_up_scales=s2[None])
    assert e.value.argument == "w_up"
    with pytest.raises(fp4gemm.ArgumentError) as e:
        moe.MoeGemm(b1[None, :-1], s1[None, :-1], scale_layout="linear", capacity=8, epilogue="silu")  # 39 rows
    assert e.value.argument == "w"
    with pytest.raises(fp4gemm.ArgumentError) as e:
        moe.MoeGemm(b1[None], s1[None], scale_layout="linear", capacity=8, epilogue="gelu")
    assert e.value.argument == "epilogue"
    with pytest.raises(fp4gemm.ArgumentError) as e:
        moe.MoeGemm(b1[None], s1[None], scale_layout="linear", capacity=8, w_up=b2[None], w_up_scales=s2[None])
    assert e.value.argument == "w_up"


# ---- fp4gemm.DualGemm (the pointer-array dual GEMM) on NumPy arrays: the CPU path -----------------


@pytest.mark.parametrize("layout", ["linear", "blocked"])
@pytest.mark.parametrize("act", ["silu", "swigluoai"])
def test_dual_gemm_groups_match_numpy_and_the_moe_glu(act, layout):
    cases = [_case(m=24, n=40, k=128, seed=2), _case(m=7, n=16, k=64, seed=3), _case(m=33, n=8, k=256, seed=4)]
    outs = [np.full((c[0].shape[0], c[2].shape[0]), np.nan, np.float32) for c in cases]
    blk = (lambda s: fp4gemm.linear_to_blocked(s)) if layout == "blocked" else (lambda s: s)  # noqa: E731
    alphas, alphas_up = [0.5, 2.0, 1.0], [1.0, 0.25, 4.0]
    d = fp4gemm.DualGemm([c[0] for c in cases], [c[2] for c in cases], [c[4] for c in cases],
                         [blk(c[1]) for c in cases], [blk(c[3]) for c in cases], [blk(c[5]) for c in cases], outs,
                         alpha=alphas, alpha_up=alphas_up, scale_layout=layout, out_dtype="float32", activation=act)
    assert d.num_groups == 3 and d.flops == sum(4.0 * c[0].shape[0] * c[2].shape[0] * 2 * c[0].shape[1] for c in cases)
    d.run()
    for (a, sa, b1, s1, b2, s2), out, al, au in zip(cases, outs, alphas, alphas_up):
        x = fp4gemm.dequantize(a, sa).astype(np.float64)
        g = al * (x @ fp4gemm.dequantize(b1, s1).astype(np.float64).T)
        u = au * (x @ fp4gemm.dequantize(b2, s2).astype(np.float64).T)
        if act == "silu":
            want = g / (1 + np.exp(-g)) * u
        else:
            gg, uu = np.minimum(g, 7.0), np.clip(u, -7.0, 7.0)
            want = gg / (1 + np.exp(-1.702 * gg)) * (uu + 1)
        assert np.all(np.abs(out - want) <= 1e-5 * np.abs(want) + 1e-30)
    # Bit for bit the MoE GEMM's GLU on the same data (both: the kernel's FP32 epilogue)
    a, sa, b1, s1, b2, s2 = cases[2]
    single = np.full_like(outs[2], np.nan)
    fp4gemm.DualGemm([a], [b1], [b2], [blk(sa)], [blk(s1)], [blk(s2)], [single], scale_layout=layout,
                     out_dtype="float32", activation=act).run()
    assert np.array_equal(single.view(np.uint32), _run(a, sa, b1, s1, b2, s2, "separate", act).view(np.uint32))


def test_dual_gemm_argument_errors_named():
    a, sa, b1, s1, b2, s2 = _case(m=8, n=40, k=128)
    c = np.empty((8, 40), np.float16)

    def make(**kw):
        args = dict(a=[a], b1=[b1], b2=[b2], sfa=[sa], sfb1=[s1], sfb2=[s2], c=[c])
        args.update(kw)
        return fp4gemm.DualGemm(**args)

    with pytest.raises(fp4gemm.ArgumentError) as e:
        make(activation="gelu")
    assert e.value.argument == "activation"
    with pytest.raises(fp4gemm.ArgumentError) as e:  # 36 rows: N not a multiple of 8
        make(b1=[b1[:36]], b2=[b2[:36]], sfb1=[s1[:36]], sfb2=[s2[:36]], c=[c[:, :36]])
    assert e.value.argument == "groups[0].n", e.value.argument
    with pytest.raises(fp4gemm.ArgumentError) as e:  # b2 of another row stride than b1
        wide = np.zeros((40, 80), np.uint8)
        wide[:, :64] = b2
        make(b2=[wide[:, :64]])
    assert e.value.argument == "b2[0]"
    with pytest.raises(fp4gemm.ArgumentError) as e:
        make(b2=[b2[:32]], sfb2=[s2[:32]])  # up weights with fewer rows than the gate's
    assert e.value.argument in ("b2[0]", "sfb2[0]"), e.value.argument
    with pytest.raises(fp4gemm.ArgumentError) as e:
        make(sfb1=[s1[:32]])
    assert e.value.argument == "sfb1[0]", e.value.argument
    with pytest.raises(fp4gemm.ArgumentError):
        make(c=[c, c])  # list lengths differ


def test_dual_gemm_batches_expand_gpumode_layout():
    """fp4gemm.dual_gemm's GPU MODE form (the binding's batches=True, what gpumode's dual drop-in
    calls): arrays with a trailing batch dimension l (outermost in memory, as GPU MODE lays them out)
    are l groups, bit for bit a DualGemm per batch; a list whose batch count differs is named."""
    from fp4gemm import _fp4gemm as _C

    rng = np.random.default_rng(5)
    m, n, k, l = 16, 32, 64, 3
    fp4 = lambda r: _fp4(rng, (l, r, k // 2)).transpose(1, 2, 0)  # noqa: E731
    sc = lambda r: np.array([0x38, 0x40], np.uint8)[rng.integers(0, 2, (l, r, k // 16))].transpose(1, 2, 0)  # noqa: E731
    a, b1, b2 = fp4(m), fp4(n), fp4(n)
    sa, s1, s2 = sc(m), sc(n), sc(n)
    c = np.full((l, m, n), np.nan, np.float16).transpose(1, 2, 0)
    args = lambda **kw: [[kw.get(name, x)] for name, x in  # noqa: E731
                         zip(("a", "b1", "b2", "sfa", "sfb1", "sfb2", "c"), (a, b1, b2, sa, s1, s2, c))]
    _C.dual_gemm(*args(), "nvfp4", "linear", "float16", "silu", _C.SWIGLU_ALPHA, _C.SWIGLU_LIMIT, None, 0, True)
    for i in range(l):
        want = np.full((m, n), np.nan, np.float16)
        one = lambda x: np.ascontiguousarray(x[..., i])  # noqa: E731
        fp4gemm.DualGemm([one(a)], [one(b1)], [one(b2)], [one(sa)], [one(s1)], [one(s2)], [want]).run()
        assert np.array_equal(c[..., i].view(np.uint16), want.view(np.uint16)), i
    with pytest.raises(fp4gemm.ArgumentError) as e:
        _C.dual_gemm(*args(sfb1=s1[..., :2]), "nvfp4", "linear", "float16", "silu", 1.702, 7.0, None, 0, True)
    assert e.value.argument == "sfb1[0]", e.value.argument
    with pytest.raises(fp4gemm.ArgumentError) as e:  # no array at all: named, not a raw AttributeError
        _C.dual_gemm(*args(sfa=[[0]]), "nvfp4", "linear", "float16", "silu", 1.702, 7.0, None, 0, True)
    assert e.value.argument == "sfa[0]", e.value.argument
