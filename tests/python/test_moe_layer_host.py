"""Host tier: the whole expert layer (fp4gemm.moe.MoeLayer / fused_experts) on NumPy arrays -- the
host reference composition (reference::moe_layer, itself checked bit for bit against a naive
per-token composition in the C++ host tier) against an independent NumPy float64 layer, the
options that must not change a bit (scale layout, id and weight dtypes), the plan cache, the
global scale of fp4gemm.quantize, and the argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import fp4gemm
from fp4gemm import moe

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16

_NIBBLES = np.array([0x0, 0x1, 0x9, 0x2, 0xA, 0x3, 0xB], np.uint8)  # 0, +-0.5, +-1, +-1.5


def _weights(rng, e, rows, k, fmt):
    packed = (_NIBBLES[rng.integers(0, 7, (e, rows, k // 2))] | (_NIBBLES[rng.integers(0, 7, (e, rows, k // 2))] << 4))
    vec = 16 if fmt == "nvfp4" else 32
    codes = (np.array([0x38, 0x40], np.uint8) if fmt == "nvfp4" else np.array([127, 128], np.uint8))
    scales = codes[rng.integers(0, 2, (e, rows, k // vec))]
    return packed.astype(np.uint8), scales.astype(np.uint8)


def _blocked(scales):
    return np.stack([fp4gemm.linear_to_blocked(s) for s in scales])


def _problem(fmt="nvfp4", act="nvfp4", e=6, h=64, i=32, k=2, t=9, seed=0, gate_up="stacked"):
    rng = np.random.default_rng(seed)
    w13, s13 = _weights(rng, e, 2 * i, h, fmt)
    w2, s2 = _weights(rng, e, h, i, fmt)
    x = (np.array([0, 0.5, -0.5, 1, -1, 1.5, -1.5], np.float32)[rng.integers(0, 7, (t, h))]).astype(BF16)
    ids = np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32)
    wts = rng.uniform(0.1, 1.0, (t, k)).astype(np.float32)
    return dict(w13=w13, s13=s13, w2=w2, s2=s2, x=x, ids=ids, wts=wts, fmt=fmt, act=act, gate_up=gate_up)


def _numpy_layer(p, activation="silu", a1=1.0, a2=1.0, alphas=None, biases=None):
    """The layer in float64 with NumPy: the same quantisation steps (fp4gemm.quantize), exact
    products, the activation in float64 (the library evaluates it in FP32: a few ulps apart)."""
    fmt, act = p["fmt"], p["act"]
    e, two_i, half_h = p["w13"].shape
    i, h = two_i // 2, 2 * half_h
    x = p["x"].astype(np.float32)
    if act != "bf16":
        q, s = fp4gemm.quantize(x, fmt, global_scale=a1)
        xq = fp4gemm.dequantize(q, s, fmt).astype(np.float64) * a1
    else:
        xq = x.astype(np.float64)
    out = np.zeros((x.shape[0], h))
    for t in range(x.shape[0]):
        for j in range(p["ids"].shape[1]):
            ex = int(p["ids"][t, j])
            if ex < 0 or ex >= e:
                continue
            w13 = fp4gemm.dequantize(p["w13"][ex], p["s13"][ex], fmt).astype(np.float64)
            w2 = fp4gemm.dequantize(p["w2"][ex], p["s2"][ex], fmt).astype(np.float64)
            gu = w13 @ xq[t]
            g, u = (gu[0::2], gu[1::2]) if p["gate_up"] == "interleaved" else (gu[:i], gu[i:])
            if alphas is not None:
                g, u = g * alphas[0][ex], u * alphas[1][ex]
            if biases is not None:  # w13_bias in w13's row order, added before the activation
                b = biases[0][ex].astype(np.float64)
                bg, bu = (b[0::2], b[1::2]) if p["gate_up"] == "interleaved" else (b[:i], b[i:])
                g, u = g + bg, u + bu
            if activation == "silu":
                mid = g / (1 + np.exp(-g)) * u
            else:
                g = np.minimum(g, 7.0)
                u = np.clip(u, -7.0, 7.0)
                mid = g / (1 + np.exp(-1.702 * g)) * (u + 1)
            mid = mid.astype(np.float32).astype(BF16).astype(np.float32)
            if act != "bf16":
                q, s = fp4gemm.quantize(mid[None, :], fmt, global_scale=a2)
                mid = fp4gemm.dequantize(q, s, fmt)[0].astype(np.float64) * a2
            y = w2 @ mid.astype(np.float64)
            if alphas is not None:
                y = y * alphas[2][ex]
            yb = y.astype(BF16).astype(np.float64)
            if biases is not None:  # w2_bias, added to the bf16 y before the weighted combine
                yb = yb + biases[1][ex].astype(np.float64)
            out[t] += p["wts"][t, j] * yb
    return out


def _layer(p, scale_layout="linear", **kw):
    s13, s2 = (p["s13"], p["s2"]) if scale_layout == "linear" else (_blocked(p["s13"]), _blocked(p["s2"]))
    return moe.MoeLayer(p["w13"], s13, p["w2"], s2, max_tokens=kw.pop("max_tokens", 16), topk=p["ids"].shape[1],
                        act_format=p["act"], scale_layout=scale_layout, gate_up=p["gate_up"], **kw)


def _rel(got, want):
    got = got.astype(np.float64)
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)


@pytest.mark.parametrize("fmt,act,activation,gate_up", [("nvfp4", "nvfp4", "silu", "stacked"),
                                                        ("mxfp4", "mxfp4", "swigluoai", "interleaved"),
                                                        ("mxfp4", "bf16", "silu", "interleaved")])
def test_matches_a_numpy_layer(fmt, act, activation, gate_up):
    p = _problem(fmt, act, gate_up=gate_up, seed=3)
    a1, a2 = (0.5, 0.25) if act == "nvfp4" else (1.0, 1.0)
    e = p["w13"].shape[0]
    alphas = [np.linspace(0.5, 2, e).astype(np.float32), np.full(e, 0.75, np.float32),
              np.linspace(1.5, 0.25, e).astype(np.float32)]
    layer = _layer(p, activation=activation, a1_scale=a1, a2_scale=a2, w13_alpha=alphas[0], w13_alpha_up=alphas[1],
                   w2_alpha=alphas[2])
    assert layer.on_host and "CPU reference" in layer.describe()
    got = layer.run(p["x"], p["ids"], p["wts"])
    assert got.dtype == BF16 and got.shape == p["x"].shape
    want = _numpy_layer(p, activation, a1, a2, alphas)
    # bf16 output, FP32 activation vs float64: a few bf16 ulps; the intermediate's quantisation
    # may round a value the other way where the two activations differ.
    assert _rel(got, want) < 1e-2, _rel(got, want)
    assert np.abs(want).max() > 0


@pytest.mark.parametrize("fmt,act,activation,gate_up,dtype", [("mxfp4", "bf16", "swigluoai", "interleaved", "bf16"),
                                                              ("nvfp4", "nvfp4", "silu", "stacked", "f32")])
def test_biases_match_a_numpy_layer_and_are_read_at_every_run(fmt, act, activation, gate_up, dtype):
    """gpt-oss's expert biases: w13_bias [E, 2I] (w13's row order, before the activation) and
    w2_bias [E, H] (added to each pair's bf16 y before the combine), bf16 or float32; an in-place
    update of both is seen by the next run."""
    p = _problem(fmt, act, gate_up=gate_up, seed=5)
    a1, a2 = (0.5, 0.25) if act == "nvfp4" else (1.0, 1.0)
    e, two_i, half_h = p["w13"].shape
    rng = np.random.default_rng(11)
    store = BF16 if dtype == "bf16" else np.float32
    b13 = rng.uniform(-2, 2, (e, two_i)).astype(store)
    b2 = rng.uniform(-2, 2, (e, 2 * half_h)).astype(store)
    layer = _layer(p, activation=activation, a1_scale=a1, a2_scale=a2, w13_bias=b13, w2_bias=b2)
    for round_ in range(2):
        if round_ == 1:  # new values in the same arrays
            b13[...] = rng.uniform(-3, 3, b13.shape).astype(store)
            b2[...] = rng.uniform(-3, 3, b2.shape).astype(store)
        got = layer.run(p["x"], p["ids"], p["wts"])
        want = _numpy_layer(p, activation, a1, a2, biases=(b13.astype(np.float32), b2.astype(np.float32)))
        assert _rel(got, want) < 1e-2, (round_, _rel(got, want))
        without = _numpy_layer(p, activation, a1, a2)
        assert _rel(got, without) > 0.05  # the biases count


def test_bad_biases_named():
    p = _problem("mxfp4", "bf16", gate_up="interleaved", seed=1)
    e, two_i, half_h = p["w13"].shape
    good13, good2 = np.zeros((e, two_i), BF16), np.zeros((e, 2 * half_h), BF16)
    for kwargs, name in [(dict(w13_bias=np.zeros((e, two_i + 1), BF16)), "w13_bias"),
                         (dict(w2_bias=np.zeros((e + 1, 2 * half_h), BF16)), "w2_bias"),
                         (dict(w13_bias=np.zeros((e, two_i), np.int32)), "w13_bias"),
                         (dict(w13_bias=good13, w2_bias=np.zeros((e, 2 * half_h), np.float32)), "w2_bias"),
                         (dict(w13_bias=np.zeros((e, 2 * two_i), BF16)[:, ::2]), "w13_bias")]:
        with pytest.raises(fp4gemm.ArgumentError) as err:
            _layer(p, activation="swigluoai", **kwargs)
        assert err.value.argument == name, (kwargs.keys(), err.value)
    _layer(p, activation="swigluoai", w13_bias=good13, w2_bias=good2)  # and the good ones are taken


def test_options_that_must_not_change_a_bit():
    p = _problem("nvfp4", "nvfp4", seed=5)
    base = _layer(p, a1_scale=0.5).run(p["x"], p["ids"], p["wts"])
    blocked = _layer(p, "blocked", a1_scale=0.5).run(p["x"], p["ids"], p["wts"])
    ids64 = _layer(p, a1_scale=0.5).run(p["x"], p["ids"].astype(np.int64), p["wts"])
    wts16 = p["wts"].astype(BF16)
    bf16w = _layer(p, a1_scale=0.5).run(p["x"], p["ids"], wts16)
    p2 = dict(p, wts=wts16.astype(np.float32))
    f32w = _layer(p2, a1_scale=0.5).run(p["x"], p["ids"], p2["wts"])
    assert np.array_equal(base.view(np.uint16), blocked.view(np.uint16))
    assert np.array_equal(base.view(np.uint16), ids64.view(np.uint16))
    assert np.array_equal(bf16w.view(np.uint16), f32w.view(np.uint16))


def test_ids_outside_the_experts_contribute_nothing():
    p = _problem("mxfp4", "bf16", seed=7)
    e = p["w13"].shape[0]
    ids = p["ids"].copy()
    ids[:, 1] = -1
    ids[2, 0] = e + 3
    got = _layer(p).run(p["x"], ids, p["wts"])
    keep = p["ids"].copy()
    keep_w = p["wts"].copy()
    keep_w[:, 1] = 0  # a zero weight: the same sum as no contribution
    keep_w[2, 0] = 0
    want = _layer(p).run(p["x"], keep, keep_w)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    assert not np.any(got[2].astype(np.float32))  # token 2 has no valid expert left


def test_fused_experts_caches_and_grows_the_plan():
    moe.clear_layer_cache()
    p = _problem("nvfp4", "nvfp4", t=5, seed=9)
    kw = dict(act_format="nvfp4", scale_layout="linear")
    a = moe.fused_experts(p["x"], p["w13"], p["s13"], p["w2"], p["s2"], p["wts"], p["ids"], **kw)
    assert len(moe._cache.plans()) == 1 and moe._cache.plans()[0].max_tokens == 5
    b = moe.fused_experts(p["x"][:3], p["w13"], p["s13"], p["w2"], p["s2"], p["wts"][:3], p["ids"][:3], **kw)
    assert np.array_equal(a[:3].view(np.uint16), b.view(np.uint16))
    assert len(moe._cache.plans()) == 1
    big = _problem("nvfp4", "nvfp4", t=7, seed=9)
    moe.fused_experts(big["x"], p["w13"], p["s13"], p["w2"], p["s2"], big["wts"], big["ids"], **kw)
    assert moe._cache.plans()[0].max_tokens == 10  # doubled
    assert moe._cache.retired() == 1
    moe.clear_layer_cache()
    assert not moe._cache.plans() and moe._cache.retired() == 0


def test_quantize_global_scale_rule():
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((8, 64)) * 3).astype(np.float32)
    gs = 0.37
    q, s = fp4gemm.quantize(x, "nvfp4", global_scale=gs)
    blocks = x.reshape(8, 4, 16)
    amax = np.abs(blocks).max(axis=2)
    s_float = ((amax / np.float32(6)).astype(np.float32) / np.float32(gs)).astype(np.float32)
    # S = E4M3(fl(fl(amax/6)/gs)), the exact code the host rule gives.
    assert np.array_equal(s, fp4gemm.encode_scales(s_float, "nvfp4").reshape(s.shape))
    scale = fp4gemm.decode_scales(s, "nvfp4").reshape(8, 4)
    dq = fp4gemm.dequantize(q, s, "nvfp4").reshape(8, 4, 16)
    # Elements: x / fl(S * gs) rounded to nearest e2m1: dq = e2m1 * S, so |dq * gs - x| is at most
    # half an e2m1 step (<= 1 at the top of the range) of S * gs, unless x saturates at 6.
    d = (scale * np.float32(gs)).astype(np.float32)[:, :, None]
    half_step = np.where(np.abs(dq) >= 4 * scale[:, :, None], 1.0, np.where(np.abs(dq) >= 2 * scale[:, :, None], 0.5, 0.25))
    assert np.all(np.abs(dq * np.float32(gs) - blocks) <= half_step * d * (1 + 1e-6) + 1e-30)
    # Against the NumPy twin of the rule with gs = 1 (the rule's documented special case).
    q1, s1 = fp4gemm.quantize(x, "nvfp4")
    assert np.array_equal(s1, fp4gemm.encode_scales((amax / np.float32(6)).astype(np.float32), "nvfp4").reshape(s1.shape))
    with pytest.raises(fp4gemm.ArgumentError, match="global_scale"):
        fp4gemm.quantize(x, "mxfp4", global_scale=0.5)
    with pytest.raises(fp4gemm.ArgumentError, match="global_scale"):
        fp4gemm.quantize(x, "nvfp4", global_scale=0.0)


@pytest.mark.parametrize("change,argument", [
    (lambda p: p.update(w13=p["w13"][:, :-1]), "w13"),
    (lambda p: p.update(w2=p["w2"][:, :, :-1]), "w2"),
    (lambda p: p.update(s13=p["s13"][:, :, :-1]), "w13_scales"),
    (lambda p: p.update(s2=p["s2"].astype(np.float32)), "w2_scales"),
])
def test_bad_weights_named(change, argument):
    p = _problem()
    change(p)
    with pytest.raises(fp4gemm.ArgumentError) as err:
        _layer(p)
    assert err.value.argument == argument, str(err.value)


def test_bad_run_arguments_named():
    p = _problem()
    layer = _layer(p, max_tokens=9)
    x, ids, wts = p["x"], p["ids"], p["wts"]
    out = np.empty(x.shape, BF16)
    cases = [
        ((x.astype(np.float32), ids, wts, out), "hidden_states"),
        ((x[:, :32], ids, wts, out), "hidden_states"),
        ((x, ids.astype(np.float32), wts, out), "topk_ids"),
        ((x, ids[:, :1], wts, out), "topk_ids"),
        ((x, ids, wts.astype(np.float64), out), "topk_weights"),
        ((x, ids, wts, out[:, :32]), "out"),
        ((x, ids, wts, out.astype(np.float32)), "out"),
    ]
    for args, argument in cases:
        with pytest.raises(fp4gemm.ArgumentError) as err:
            layer._layer.run(*args, None)
        assert err.value.argument == argument, str(err.value)
    big = _problem(t=12)
    with pytest.raises(fp4gemm.ArgumentError, match="max_tokens"):
        layer.run(big["x"], big["ids"], big["wts"])
    with pytest.raises(fp4gemm.ArgumentError) as err:
        moe.MoeLayer(p["w13"], p["s13"], p["w2"], p["s2"], max_tokens=4, topk=2, act_format="fp8",
                     scale_layout="linear")
    assert err.value.argument == "act_format"
    with pytest.raises(fp4gemm.ArgumentError) as err:
        moe.MoeLayer(p["w13"], p["s13"], p["w2"], p["s2"], max_tokens=4, topk=2, activation="gelu",
                     scale_layout="linear")
    assert err.value.argument == "activation"
    # the decode path's token bound: 0..512 (past 8: the wide kernels; at most 512 / topk used), or None / -1: by the layer
    for bad in (-2, 513, 2.5, True):
        with pytest.raises(fp4gemm.ArgumentError) as err:
            moe.MoeLayer(p["w13"], p["s13"], p["w2"], p["s2"], max_tokens=4, topk=2, scale_layout="linear",
                         decode_tokens=bad)
        assert err.value.argument == "options.decode_tokens"
    with pytest.raises(fp4gemm.ArgumentError) as err:  # nvfp4 weights cannot run W4A16
        moe.MoeLayer(p["w13"], p["s13"], p["w2"], p["s2"], max_tokens=4, topk=2, act_format="bf16",
                     scale_layout="linear")
    assert err.value.argument in ("w13_scales", "options.activations")


def test_prequantised_tokens_give_the_same_bits():
    p = _problem("nvfp4", "nvfp4", seed=13)
    layer = _layer(p, a1_scale=0.3)
    want = layer.run(p["x"], p["ids"], p["wts"])
    packed, scales = fp4gemm.quantize(p["x"].astype(np.float32), "nvfp4", global_scale=0.3)
    got = layer.run(None, p["ids"], p["wts"], hidden_fp4=(packed, scales))
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    with pytest.raises(fp4gemm.ArgumentError) as err:
        layer.run(p["x"], p["ids"], p["wts"], hidden_fp4=(packed, scales))
    assert err.value.argument == "hidden_states"
    with pytest.raises(fp4gemm.ArgumentError) as err:
        layer.run(None, p["ids"], p["wts"], hidden_fp4=(packed[:, :-1], scales))
    assert err.value.argument == "hidden_packed"
    w16 = _problem("mxfp4", "bf16", seed=13)
    with pytest.raises(fp4gemm.ArgumentError) as err:
        _layer(w16).run(None, w16["ids"], w16["wts"], hidden_fp4=(packed, scales))
    assert err.value.argument == "hidden_packed"


def test_fused_experts_names_bad_options():
    """fp4gemm.moe.fused_experts (its C++ plan cache) on host arrays: options of the wrong type or
    value are ArgumentErrors naming the option; a good call after them still runs."""
    p = _problem("nvfp4", "nvfp4", seed=17)
    args = (p["x"], p["w13"], p["s13"], p["w2"], p["s2"], p["wts"], p["ids"])
    for kw, name in [(dict(gate_up=5), "gate_up"), (dict(gate_up="sideways"), "gate_up"),
                     (dict(act_format=None), "act_format"), (dict(act_format="fp8"), "act_format"),
                     (dict(activation=1), "activation"), (dict(scale_layout=b"linear"), "scale_layout")]:
        with pytest.raises(fp4gemm.ArgumentError) as err:
            moe.fused_experts(*args, scale_layout=kw.pop("scale_layout", "linear"), **kw)
        assert err.value.argument == name, (kw, err.value.argument)
    out = moe.fused_experts(*args, scale_layout="linear")
    assert out.shape == p["x"].shape
