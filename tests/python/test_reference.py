"""Host tier: grouped_gemm on NumPy arrays (the exact CPU reference) against an independent
NumPy float64 matmul of the dequantised operands."""

from __future__ import annotations

import numpy as np
import pytest

import fp4gemm
from fp4gemm import formats
from fp4gemm.testing import as_float64, numpy_reference, random_groups, round_to

MANT = {"float16": 10, "bfloat16": 7, "float32": 23}
EMIN = {"float16": -14, "bfloat16": -126, "float32": -126}


def _ulp(x, out_dtype):
    e = np.floor(np.log2(np.maximum(np.abs(x), 2.0 ** EMIN[out_dtype])))
    return np.exp2(e - MANT[out_dtype])


def assert_matches(out, ref, out_dtype, exact):
    """exact: bitwise equal to ref rounded once; else within half an ulp plus float64 slack
    (float64 sums of full-range data depend on the summation order)."""
    got = as_float64(out, out_dtype)
    want = round_to(ref, out_dtype)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    if exact:
        np.testing.assert_array_equal(got, want)
        return
    finite = np.isfinite(want) & np.isfinite(got)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    err = np.abs(got - ref)[finite]
    bound = (0.5 * _ulp(ref, out_dtype) + 1e-12 * np.abs(ref))[finite]
    assert np.all(err <= bound), f"max excess {np.max(err - bound)}"


def _c_for(d, out_dtype):
    return d.outputs(out_dtype)


@pytest.mark.parametrize("out_dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("layout", ["linear", "blocked"])
def test_gpumode_values_bit_exact(out_dtype, layout):
    if out_dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    d = random_groups([80, 0, 33, 128], 96, 512, "nvfp4", layout, values="gpumode", seed=2)
    c = fp4gemm.grouped_gemm(d.a, d.b, d.sfa, d.sfb, _c_for(d, out_dtype), format="nvfp4",
                             scale_layout=layout, out_dtype=out_dtype)
    for out, ref in zip(c, numpy_reference(d)):
        assert_matches(out, ref, out_dtype, exact=True)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("out_dtype", ["float16", "bfloat16", "float32"])
def test_full_range(fmt, out_dtype):
    if out_dtype == "bfloat16":
        pytest.importorskip("ml_dtypes")
    d = random_groups([17, 64, 1], [40, 8, 24], [256, 128, 64], fmt, "linear", values="full", seed=7)
    alpha = [0.5, 3.0, -1.25]
    c = fp4gemm.grouped_gemm(d.a, d.b, d.sfa, d.sfb, _c_for(d, out_dtype), alpha=alpha, format=fmt,
                             out_dtype=out_dtype)
    for out, ref in zip(c, numpy_reference(d, alpha)):
        assert_matches(out, ref, out_dtype, exact=False)


def test_random_shapes_blocked_mxfp4():
    rng = np.random.default_rng(9)
    for trial in range(4):
        g = int(rng.integers(1, 5))
        ms = [int(x) for x in rng.integers(0, 200, g)]
        ns = [int(x) * 8 for x in rng.integers(1, 40, g)]
        ks = [int(x) * 64 for x in rng.integers(1, 6, g)]
        d = random_groups(ms, ns, ks, "mxfp4", "blocked", values="full", seed=trial)
        c = fp4gemm.grouped_gemm(d.a, d.b, d.sfa, d.sfb, d.outputs("float32"), format="mxfp4",
                                 scale_layout="blocked", out_dtype="float32")
        for out, ref in zip(c, numpy_reference(d)):
            assert_matches(out, ref, "float32", exact=False)


def test_allocates_outputs_and_scalar_alpha():
    d = random_groups([16, 32], 64, 128, seed=4)
    c = fp4gemm.grouped_gemm(d.a, d.b, d.sfa, d.sfb, alpha=2.0)
    assert [x.shape for x in c] == [(16, 64), (32, 64)] and c[0].dtype == np.float16
    for out, ref in zip(c, numpy_reference(d, [2.0, 2.0])):
        assert_matches(out, ref, "float16", exact=True)
    c2 = fp4gemm.reference_grouped_gemm(d.a, d.b, d.sfa, d.sfb, alpha=np.array([2.0, 2.0], np.float32), threads=1)
    for x, y in zip(c, c2):
        np.testing.assert_array_equal(x, y)


def test_nan_scale_propagates_to_its_row_only():
    d = random_groups([8], 16, 64, seed=5)
    d.sfa[0][3, 2] = 0x7F  # NaN E4M3 scale in row 3
    d.sfa_linear[0] = d.sfa[0]
    (c,) = fp4gemm.grouped_gemm(d.a, d.b, d.sfa, d.sfb, d.outputs("float16"))
    assert np.all(np.isnan(c[3]))
    assert not np.any(np.isnan(np.delete(c, 3, axis=0)))


def test_strided_operands_and_outputs_nothing_outside_c():
    d = random_groups([24, 40], 32, 256, seed=6)
    # A with a padded row stride (lda = K/2 + 32 bytes), C a view into a wider buffer (ldc = N + 8).
    a_pad = [np.zeros((x.shape[0], x.shape[1] + 32), np.uint8) for x in d.a]
    for p, x in zip(a_pad, d.a):
        p[:, : x.shape[1]] = x
    a_views = [p[:, : x.shape[1]] for p, x in zip(a_pad, d.a)]
    big = [np.full((x.shape[0], 40), 7.0, np.float16) for x in d.a]
    c_views = [bb[:, :32] for bb in big]
    fp4gemm.grouped_gemm(a_views, d.b, d.sfa, d.sfb, c_views)
    for bb, ref in zip(big, numpy_reference(d)):
        assert np.all(bb[:, 32:] == 7.0)
        assert_matches(bb[:, :32], ref, "float16", exact=True)


def test_gpumode_shaped_host_arrays():
    """Trailing l = 1 dimensions, the permuted 6-D 'reordered' scale view, float8 scale dtype."""
    ml = pytest.importorskip("ml_dtypes")
    d = random_groups([80, 176], 256, 512, "nvfp4", "linear", seed=8)
    a3 = [x[:, :, None] for x in d.a]
    b3 = [x[:, :, None] for x in d.b]
    c3 = [np.zeros((x.shape[0], 256, 1), np.float16) for x in d.a]
    sfa6 = [formats.blocked_view(fp4gemm.linear_to_blocked(s), *s.shape).view(ml.float8_e4m3fn)
            for s in d.sfa_linear]
    sfb6 = [formats.blocked_view(fp4gemm.linear_to_blocked(s), *s.shape).view(ml.float8_e4m3fn)
            for s in d.sfb_linear]
    fp4gemm.grouped_gemm(a3, b3, sfa6, sfb6, c3, scale_layout="blocked")
    for out, ref in zip(c3, numpy_reference(d)):
        assert_matches(out[:, :, 0], ref, "float16", exact=True)
    # The same through the linear [rows, K/16, 1] scales.
    c3b = [np.zeros_like(x) for x in c3]
    fp4gemm.grouped_gemm(a3, b3, [s[:, :, None] for s in d.sfa_linear], [s[:, :, None] for s in d.sfb_linear], c3b)
    for x, y in zip(c3, c3b):
        np.testing.assert_array_equal(x, y)


def test_empty_call():
    assert fp4gemm.grouped_gemm([], [], [], [], []) == []
