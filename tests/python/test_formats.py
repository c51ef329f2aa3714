"""Host tier: codecs, FP4 packing, scale layouts, quantise / dequantise (NumPy only)."""

from __future__ import annotations

import numpy as np
import pytest

import fp4gemm
from fp4gemm import formats

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def test_e2m1_table_and_round_trip():
    values = fp4gemm.decode_e2m1(np.arange(16, dtype=np.uint8))
    np.testing.assert_array_equal(values, np.array(E2M1, dtype=np.float32))
    assert np.signbit(values[8])  # -0
    codes = fp4gemm.encode_e2m1(values)
    np.testing.assert_array_equal(fp4gemm.decode_e2m1(codes), values)


@pytest.mark.parametrize("x,expect", [(0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0),
                                      (3.5, 4.0), (5.0, 4.0), (7.0, 6.0), (1e9, 6.0), (-5.0, -4.0),
                                      (-0.2, -0.0), (float("nan"), 0.0)])
def test_e2m1_rounding(x, expect):
    got = fp4gemm.decode_e2m1(fp4gemm.encode_e2m1(np.array([x], dtype=np.float32)))[0]
    assert got == expect and np.signbit(got) == np.signbit(expect)


def test_e4m3_decode_matches_ml_dtypes():
    ml = pytest.importorskip("ml_dtypes")
    codes = np.arange(256, dtype=np.uint8)
    ours = fp4gemm.decode_scales(codes, "nvfp4")
    theirs = codes.view(ml.float8_e4m3fn).astype(np.float32)
    np.testing.assert_array_equal(ours, theirs)  # NaN == NaN for assert_array_equal
    assert np.isnan(ours[0x7F]) and np.isnan(ours[0xFF])


def test_e4m3_encode_matches_ml_dtypes_in_range():
    ml = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(20000) * np.exp2(rng.integers(-12, 9, 20000))).astype(np.float32)
    x = x[np.abs(x) <= 448]
    ours = fp4gemm.encode_scales(x, "nvfp4")
    theirs = x.astype(ml.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(ours, theirs)
    assert fp4gemm.encode_scales(np.array([1e6], np.float32), "nvfp4")[0] == 0x7E  # saturates to 448


def test_ue8m0():
    codes = np.arange(256, dtype=np.uint8)
    v = fp4gemm.decode_scales(codes, "mxfp4")
    np.testing.assert_array_equal(v[:255], np.exp2(np.arange(255, dtype=np.float64) - 127).astype(np.float32))
    assert np.isnan(v[255])
    enc = fp4gemm.encode_scales(np.array([1.0, 1.5, 2.0, 3.0, 0.3], np.float32), "mxfp4")
    np.testing.assert_array_equal(enc, [127, 128, 128, 129, 126])  # smallest power of two >= x


def test_pack_unpack():
    rng = np.random.default_rng(0)
    nib = rng.integers(0, 16, size=(5, 32), dtype=np.uint8)
    packed = fp4gemm.pack_fp4(nib)
    assert packed.shape == (5, 16)
    assert packed[0, 0] == (nib[0, 0] | (nib[0, 1] << 4))  # even k in the low nibble
    np.testing.assert_array_equal(fp4gemm.unpack_fp4(packed), nib)


def _blocked_by_formula(linear):
    rows, cols = linear.shape
    pr, pc = -(-rows // 128) * 128, -(-cols // 4) * 4
    out = np.zeros(pr * pc, dtype=np.uint8)
    for r in range(rows):
        for c in range(cols):
            atom = (r // 128) * (pc // 4) + c // 4
            out[atom * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4] = linear[r, c]
    return out


@pytest.mark.parametrize("rows,cols", [(1, 1), (128, 4), (130, 7), (257, 32), (64, 448)])
def test_blocked_layout(rows, cols):
    rng = np.random.default_rng(rows * 1000 + cols)
    lin = rng.integers(1, 255, size=(rows, cols), dtype=np.uint8)
    blocked = fp4gemm.linear_to_blocked(lin)
    assert blocked.shape == (fp4gemm.scale_bytes("blocked", rows, cols),)
    np.testing.assert_array_equal(blocked, _blocked_by_formula(lin))
    np.testing.assert_array_equal(fp4gemm.blocked_to_linear(blocked, rows, cols), lin)


def test_gpumode_blocked_view():
    rows, cols = 200, 12
    rng = np.random.default_rng(5)
    lin = rng.integers(0, 256, size=(rows, cols), dtype=np.uint8)
    blocked = fp4gemm.linear_to_blocked(lin)
    view = formats.blocked_view(blocked, rows, cols)
    assert view.shape == (32, 4, 2, 4, 3, 1)
    assert np.shares_memory(view, blocked)
    for r, c in [(0, 0), (37, 5), (199, 11), (128, 4), (95, 3)]:
        assert view[r % 32, (r % 128) // 32, r // 128, c % 4, c // 4, 0] == lin[r, c]
    np.testing.assert_array_equal(formats.blocked_flat(view), blocked)


def _numpy_dequant(packed, scales, fmt):
    vec = 16 if fmt == "nvfp4" else 32
    vals = np.array(E2M1, np.float32)[fp4gemm.unpack_fp4(packed)]
    with np.errstate(over="ignore", invalid="ignore"):  # huge UE8M0 scales overflow float32, as they should
        return vals * np.repeat(fp4gemm.decode_scales(scales, fmt), vec, axis=1)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("layout", ["linear", "blocked"])
def test_dequantize_full_range(fmt, layout):
    rng = np.random.default_rng(11)
    rows, k = 130, 256
    vec = fp4gemm.scale_block_size(fmt)
    packed = rng.integers(0, 256, size=(rows, k // 2), dtype=np.uint8)
    scales = rng.integers(0, 256, size=(rows, k // vec), dtype=np.uint8)  # NaN codes included
    s = scales if layout == "linear" else fp4gemm.linear_to_blocked(scales)
    got = fp4gemm.dequantize(packed, s, fmt, layout)
    np.testing.assert_array_equal(got, _numpy_dequant(packed, scales, fmt))


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_quantize_round_trip(fmt):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 256)).astype(np.float32) * np.exp2(rng.integers(-6, 6, (40, 1)))
    packed, scales = fp4gemm.quantize(x, fmt)
    vec = fp4gemm.scale_block_size(fmt)
    assert packed.shape == (40, 128) and scales.shape == (40, 256 // vec)
    dq = fp4gemm.dequantize(packed, scales, fmt)
    amax = np.repeat(np.abs(x).reshape(40, -1, vec).max(axis=2), vec, axis=1)
    assert np.all(np.abs(dq - x) <= 0.25 * amax + 1e-30)
    # Quantising exactly representable data reproduces its values.
    p2, s2 = fp4gemm.quantize(dq, fmt)
    np.testing.assert_array_equal(fp4gemm.dequantize(p2, s2, fmt), dq)
    # Blocked output of quantize is the blocked form of its linear scales.
    _, sb = fp4gemm.quantize(x, fmt, scale_layout="blocked")
    np.testing.assert_array_equal(sb, fp4gemm.linear_to_blocked(scales))


def test_mxfp4_scale_rule():
    x = np.zeros((1, 32), np.float32)
    x[0, 3] = 5.0  # amax 5: 2^(floor(log2 5) - 2) = 1
    _, s = fp4gemm.quantize(x, "mxfp4")
    assert s[0, 0] == 127
    x[0, 3] = 100.0  # 2^(6 - 2) = 16
    _, s = fp4gemm.quantize(x, "mxfp4")
    assert s[0, 0] == 127 + 4


def test_float8_inputs_are_viewed_as_bytes():
    ml = pytest.importorskip("ml_dtypes")
    codes = np.array([[0x38, 0x40]], dtype=np.uint8)
    np.testing.assert_array_equal(fp4gemm.decode_scales(codes.view(ml.float8_e4m3fn)), [[1.0, 2.0]])
