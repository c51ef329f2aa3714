"""Host tier: fp4gemm.moe on NumPy arrays (the exact CPU reference, reference::moe_gemm) against an
independent NumPy float64 computation, and its argument errors (the device path's validation)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import fp4gemm
from fp4gemm import moe
from fp4gemm.testing import as_float64, random_moe, random_topk

from test_reference import assert_matches


def _run(d, out_dtype="float32", alpha=None, gather=True):
    """fp4gemm.moe.grouped_gemm (contiguous) or MoeGemm.run (masked) on the problem's arrays."""
    out = d.output(out_dtype)
    if d.layout == "masked":
        g = moe.MoeGemm(d.w, d.w_scales, format=d.format, scale_layout=d.scale_layout, out_dtype=out_dtype,
                        activation=d.activation, layout="masked", capacity=d.capacity, alpha=alpha)
        assert g.kernel_name == "cpu_reference" and g.describe().startswith("CPU reference")
        return g.run(d.a, d.a_scales, expert_counts=d.counts, out=out)
    if gather:
        return moe.grouped_gemm(d.a, d.a_scales, d.w, d.w_scales, d.offsets, gather_index=d.gather, out=out,
                                alpha=alpha, format=d.format, scale_layout=d.scale_layout, out_dtype=out_dtype)
    # Without a gather index: the rows pre-permuted into expert order.
    a = np.ascontiguousarray(d.a[d.gather])
    sa = None if d.a_scales is None else np.ascontiguousarray(d.a_scales[d.gather])
    return moe.grouped_gemm(a, sa, d.w, d.w_scales, d.offsets, out=out, alpha=alpha, format=d.format,
                            scale_layout=d.scale_layout, out_dtype=out_dtype)


def _check(out, d, out_dtype, exact, alpha=None):
    ref = d.reference(alpha)
    got = out.reshape(ref.shape[0], -1)
    owned = ~np.isnan(ref[:, 0]) if ref.shape[1] else np.zeros(ref.shape[0], bool)
    assert_matches(got[owned], ref[owned], out_dtype, exact)
    # Rows no expert owns keep the NaN they were filled with.
    assert np.isnan(as_float64(got[~owned], out_dtype)).all()


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("layout", ["linear", "blocked"])
@pytest.mark.parametrize("gather", [True, False])
def test_gpumode_values_bit_exact(fmt, layout, gather):
    d = random_moe(6, 40, 128, 23, 2, fmt, layout, values="gpumode", seed=1)
    _check(_run(d, "float32", gather=gather), d, "float32", exact=True)


@pytest.mark.parametrize("out_dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("routing", ["uniform", "skewed", "one-hot", "most-empty"])
def test_full_range(out_dtype, routing):
    if out_dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    d = random_moe(32, 24, 256, 19, 3, "nvfp4", "blocked", values="full", routing=routing, seed=2)
    alpha = np.linspace(-2, 2, 32).astype(np.float32)
    _check(_run(d, out_dtype, alpha=alpha), d, out_dtype, exact=False, alpha=alpha)


def test_scalar_alpha_and_mxfp4_full_range():
    d = random_moe(5, 16, 192, 9, 5, "mxfp4", "linear", values="full", seed=3)
    _check(_run(d, "float32", alpha=0.75), d, "float32", exact=False, alpha=0.75)


@pytest.mark.parametrize("values", ["gpumode", "full"])
def test_w4a16_bf16_activations(values):
    pytest.importorskip("ml_dtypes")
    d = random_moe(4, 32, 128, 11, 2, "mxfp4", "blocked", activation="bf16", values=values, seed=4)
    _check(_run(d, "float32"), d, "float32", exact=values == "gpumode")


def test_masked_layout_leaves_rows_past_counts():
    d = random_moe(5, 24, 64, 0, 1, "nvfp4", "blocked", layout="masked", counts=[0, 7, 3, 8, 1], capacity=8, seed=5)
    _check(_run(d, "float32"), d, "float32", exact=True)


def test_moegemm_object_and_align_routing():
    """MoeGemm built once on host weights runs several routings; align_routing's arrays are what
    random_moe uses (sorted by expert, stable by token)."""
    d = random_moe(8, 32, 64, 12, 2, seed=6)
    g = moe.MoeGemm(d.w, d.w_scales, capacity=d.capacity, out_dtype="float32")
    assert g.on_host and (g.experts, g.n, g.k, g.rows) == (8, 32, 64, 24) and g.output_shape() == (24, 32)
    rng = np.random.default_rng(7)
    for routing in ["uniform", "one-hot", "balanced"]:
        ids = random_topk(rng, 12, 8, 2, routing)
        offsets, gather, order = moe.align_routing(ids, 8)
        assert offsets[-1] == 24 and np.all(np.diff(offsets) >= 0)
        np.testing.assert_array_equal(ids.reshape(-1)[order], np.repeat(np.arange(8), np.diff(offsets)))
        np.testing.assert_array_equal(gather, order // 2)
        d.offsets, d.gather = offsets, gather
        out = g.run(d.a, d.a_scales, offsets, gather_index=gather)
        _check(out, d, "float32", exact=True)
    g.check()  # host runs raise at once; nothing pending


def test_partial_routing_leaves_rows():
    """offsets[E] below the capacity (and offsets[0] above 0): the rows outside stay untouched."""
    d = random_moe(4, 16, 64, 10, 1, seed=8)
    d.offsets = np.array([2, 3, 3, 6, 8], np.int32)
    _check(_run(d), d, "float32", exact=True)


# ---- argument errors ----------------------------------------------------------------------------------


@contextlib.contextmanager
def expect(match, argument=None):
    with pytest.raises(fp4gemm.ArgumentError, match=match) as info:
        yield info
    e = info.value
    assert isinstance(e, ValueError) and str(e).startswith("fp4gemm:")
    if argument is not None:
        assert e.argument == argument, e.argument


@pytest.fixture
def d():
    return random_moe(4, 32, 64, 6, 2, seed=9)


def call(d, **kw):
    args = dict(a=d.a, a_scales=d.a_scales, w=d.w, w_scales=d.w_scales, expert_offsets=d.offsets,
                gather_index=d.gather, out=d.output("float32"), out_dtype="float32")
    args.update(kw)
    return moe.grouped_gemm(args.pop("a"), args.pop("a_scales"), args.pop("w"), args.pop("w_scales"),
                            args.pop("expert_offsets"), **args)


def test_bad_offsets_raise_at_once_on_the_host(d):
    with expect(r"expert_offsets\[2\] = 1, less than expert_offsets\[1\] = 5", "expert_offsets"):
        call(d, expert_offsets=np.array([0, 5, 1, 8, 12], np.int32))
    with expect(r"expert_offsets\[0\] = -1 < 0", "expert_offsets"):
        call(d, expert_offsets=np.array([-1, 5, 6, 8, 12], np.int32))
    with expect(r"expert_offsets\[4\] = 13, more rows than the capacity 12", "expert_offsets"):
        call(d, expert_offsets=np.array([0, 5, 6, 8, 13], np.int32))


def test_bad_gather_index(d):
    bad = d.gather.copy()
    bad[3] = 6
    with expect(r"gather_index\[3\] = 6 is outside \[0, num_tokens = 6\)", "gather_index"):
        call(d, gather_index=bad)
    with expect("gather_index: must be a 1-D int32 array of at least 12 entries", "gather_index"):
        moe.MoeGemm(d.w, d.w_scales, capacity=12).run(d.a, d.a_scales, d.offsets, gather_index=d.gather[:11])
    with expect("gather_index: must be a 1-D int32 array", "gather_index"):
        call(d, gather_index=d.gather.astype(np.int64), out=d.output("float32"))


def test_offsets_shape_and_dtype(d):
    with expect(r"expert_offsets: must be a 1-D int32 array of 5 entries", "expert_offsets"):
        call(d, expert_offsets=d.offsets[:4])
    with expect(r"expert_offsets: must be a 1-D int32 array of 5 entries .*int16/uint16", "expert_offsets"):
        call(d, expert_offsets=d.offsets.astype(np.int16))


def test_weights(d):
    with expect(r"w: must be 3-D \[experts, N, K/2\]", "w"):
        call(d, w=d.w[0])
    with expect("w: has dtype float32", "w"):
        call(d, w=d.w.astype(np.float32))
    with expect(r"w_scales: has shape \(4, 32, 4\); expected \[4, 512\] or \[4, 128, 4\]", "w_scales"):
        call(d, w_scales=np.zeros((4, 32, 4), np.uint8))
    with expect(r"w_scales: has shape .*linear layout", "w_scales"):
        call(d, scale_layout="linear")
    with expect("weights.k: K = 48 must be a positive multiple of the mxfp4 scale block", "weights.k"):
        call(d, w=d.w[:, :, :24].copy(), format="mxfp4")


def test_activations_and_output(d):
    with expect("a: has 5 columns", "a"):
        call(d, a=d.a[:, :5])
    with expect("a_scales: is None; FP4 activations need their scales", "a_scales"):
        call(d, a_scales=None)
    with expect("a_scales: has 5 rows but a has 6", "a_scales"):
        call(d, a_scales=d.a_scales[:5])
    with expect("out: has dtype float16 but out_dtype is float32", "out"):
        call(d, out=d.output("float16"))
    with expect("out: has 11 rows; the plan serves 12", "out"):
        call(d, out=d.output("float32")[:11])
    with expect("a: has 6 rows; the plan serves 12", "a"):  # no gather: a needs a row per routed row
        moe.MoeGemm(d.w, d.w_scales, capacity=12).run(d.a, d.a_scales, d.offsets)
    with expect("activation: must be 'fp4'", "activation"):
        call(d, activation="fp8")
    with expect("options.activation: bf16 activations \\(W4A16\\) need mxfp4 weights", "options.activation"):
        call(d, activation="bf16", format="nvfp4", a=np.zeros((6, 64), np.uint16), a_scales=None)


def test_output_overlapping_an_input(d):
    buf = np.zeros(12 * 32 + 6 * 64, np.float32)
    out = buf[: 12 * 32].reshape(12, 32)
    a = buf.view(np.uint8)[: 6 * 32].reshape(6, 32)  # the same bytes
    with expect(r"out: bytes .* overlap a ", "out"):
        call(d, a=a, out=out)


def test_masked_arguments():
    d = random_moe(3, 16, 64, 0, 1, layout="masked", counts=[1, 0, 2], capacity=4, seed=10)
    g = moe.MoeGemm(d.w, d.w_scales, layout="masked", capacity=4, out_dtype="float32")
    assert g.output_shape() == (3, 4, 16)
    with expect("expert_counts: is None", "expert_counts"):
        g.run(d.a, d.a_scales)
    with expect("expert_offsets: the masked layout takes expert_counts", "expert_offsets"):
        g.run(d.a, d.a_scales, expert_offsets=np.zeros(4, np.int32), expert_counts=d.counts)
    with expect(r"expert_counts\[2\] = 5 is outside \[0, 4\]", "expert_counts"):
        g.run(d.a, d.a_scales, expert_counts=np.array([1, 0, 5], np.int32))
    with expect(r"a: has shape \(3, 3, 32\); the masked layout expects \[experts, capacity, K/2\]", "a"):
        g.run(d.a[:, :3], d.a_scales[:, :3], expert_counts=d.counts)


def test_options():
    d = random_moe(2, 16, 64, 4, 1, seed=11)
    with expect("options.capacity: must be >= 1", "options.capacity"):
        moe.MoeGemm(d.w, d.w_scales, capacity=0)
    with expect("layout: must be 'contiguous' or 'masked'", "layout"):
        moe.MoeGemm(d.w, d.w_scales, capacity=4, layout="ragged")
    with expect("weights.experts: must be 1..512", "weights.experts"):
        moe.MoeGemm(np.zeros((513, 16, 32), np.uint8), np.zeros((513, 128 * 4), np.uint8), capacity=4)
    with expect(r"alpha: must be a number or a float32 array of one value per expert \[2\]", "alpha"):
        moe.MoeGemm(d.w, d.w_scales, capacity=4, alpha=np.ones(3, np.float32))
    with expect("weights.alpha: alpha must be finite", "weights.alpha"):
        moe.MoeGemm(d.w, d.w_scales, capacity=4, alpha=float("inf"))


def test_empty_call_does_nothing(d):
    out = np.zeros((0, 32), np.float32)
    assert moe.grouped_gemm(np.zeros((0, 32), np.uint8), np.zeros((0, 4), np.uint8), d.w, d.w_scales,
                            np.zeros(5, np.int32), out=out, out_dtype="float32") is out
