"""Host tier: bad arguments raise ArgumentError (a ValueError) naming the argument and group."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import fp4gemm
from fp4gemm.testing import random_groups


def call(d, **kw):
    args = dict(a=d.a, b=d.b, sfa=d.sfa, sfb=d.sfb, c=d.outputs())
    args.update(kw)
    return fp4gemm.grouped_gemm(**args)


@contextlib.contextmanager
def expect(match, argument=None, group=None):
    with pytest.raises(fp4gemm.ArgumentError, match=match) as info:
        yield info
    e = info.value
    assert isinstance(e, ValueError) and str(e).startswith("fp4gemm:")
    if argument is not None:
        assert e.argument == argument
    if group is not None:
        assert e.group == group


def test_list_lengths(d):
    with expect("sfa: has 1 entries but a has 2", "sfa", -1):
        call(d, sfa=d.sfa[:1])


def test_single_array_instead_of_list(d):
    with expect("single array", "a"):
        call(d, a=d.a[0])


def test_none_entry(d):
    with expect(r"b\[1\]: is None", "b[1]", 1):
        call(d, b=[d.b[0], None])


def test_a_dtype(d):
    with expect(r"a\[1\]: has dtype float32", "a[1]", 1):
        call(d, a=[d.a[0], d.a[1].astype(np.float32)])


def test_k_mismatch(d):
    with expect(r"b\[0\]: has K/2 = 32", "b[0]", 0):
        call(d, b=[d.b[0][:, :32], d.b[1]])


def test_k_not_multiple_of_block():
    d = random_groups([16], 64, 128, seed=1)
    with expect("not a multiple of the nvfp4 scale block", "a[0]", 0):
        call(d, a=[d.a[0][:, :12]], b=[d.b[0][:, :12]])


def test_not_k_contiguous(d):
    with expect("contiguous along its last dimension", "a[0]"):
        call(d, a=[np.asfortranarray(d.a[0]), d.a[1]])


def test_scale_shape(d):
    with expect(r"sfb\[1\]: has shape \(64, 7\)", "sfb[1]", 1):
        call(d, sfb=[d.sfb[0], d.sfb[1][:, :7]])
    with expect(r"sfa\[0\]:.*blocked layout", "sfa[0]", 0):
        call(d, scale_layout="blocked")


def test_scale_dtype_for_format(d):
    ml = pytest.importorskip("ml_dtypes")
    with expect("mxfp4 scales must be uint8 or float8_e8m0fnu", "sfa[0]"):
        dm = random_groups([16], 64, 128, "mxfp4", seed=2)
        call(dm, sfa=[dm.sfa[0].view(ml.float8_e4m3fn)], format="mxfp4")


def test_c_shape_and_dtype(d):
    with expect(r"c\[1\]: has shape \(32, 63\)", "c[1]", 1):
        call(d, c=[np.zeros((16, 64), np.float16), np.zeros((32, 63), np.float16)])
    with expect(r"c\[0\]: has dtype float32 but out_dtype is float16", "c[0]", 0):
        call(d, c=[np.zeros((16, 64), np.float32), np.zeros((32, 64), np.float32)])


def test_read_only_output(d):
    c = d.outputs()
    c[0].setflags(write=False)
    with expect("read-only", "c[0]"):
        call(d, c=c)


def test_batch_dimension(d):
    with expect("batch dimension l = 2", "a[0]"):
        call(d, a=[np.stack([d.a[0], d.a[0]], axis=-1), d.a[1]])


@pytest.mark.parametrize("kw,match", [
    (dict(format="nvfp8"), "format: must be 'nvfp4' or 'mxfp4'"),
    (dict(scale_layout="tiled"), "scale_layout: must be 'linear' or 'blocked'"),
    (dict(out_dtype="int8"), "out_dtype: must be"),
    (dict(backend="turbo"), "backend: must be 'auto', 'fast' or 'reference'"),
    (dict(alpha=[1.0]), "alpha: has 1 values for 2 groups"),
    (dict(alpha=[1.0, "x"]), r"alpha\[1\] is not a number"),
    (dict(backend="fast"), "'fast' needs CUDA arrays"),
])
def test_options(d, kw, match):
    with expect(match):
        call(d, **kw)


def test_not_an_array(d):
    with expect(r"sfa\[0\]: expected an array supporting DLPack", "sfa[0]"):
        call(d, sfa=["scales", d.sfa[1]])


def test_unpacked_float4_rejected(d):
    ml = pytest.importorskip("ml_dtypes")
    if not hasattr(ml, "float4_e2m1fn"):
        pytest.skip("ml_dtypes has no float4_e2m1fn")
    with expect("one value per byte", "a[0]"):
        call(d, a=[np.zeros((16, 64), ml.float4_e2m1fn), d.a[1]])


def test_grouped_gemm_object_needs_cuda(d):
    with expect("GroupedGemm needs CUDA arrays"):
        fp4gemm.GroupedGemm(d.a, d.b, d.sfa, d.sfb, d.outputs())


def test_no_device_is_runtime_error():
    if fp4gemm.device_count() > 0:
        pytest.skip("a CUDA device is present")
    with pytest.raises(fp4gemm.DeviceError, match="no CUDA device") as info:
        fp4gemm.device_info()
    assert isinstance(info.value, RuntimeError) and info.value.argument == "device"


def test_helpers_validate():
    with pytest.raises(ValueError, match="not a multiple of the mxfp4 scale block"):
        fp4gemm.quantize(np.zeros((2, 48), np.float32), "mxfp4")
    with pytest.raises(ValueError, match="bytes"):
        fp4gemm.dequantize(np.zeros((2, 8), np.uint8), np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="blocked layout"):
        fp4gemm.blocked_to_linear(np.zeros(100, np.uint8), 2, 2)
