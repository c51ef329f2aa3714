"""Host tier: the NumPy (CPU reference) path runs the same C++ validation as the GPU path
(fp4gemm::detail::validate_groups), so a call the device rejects is rejected on the host too,
with the same message, before anything is written. Each of these used to be accepted on the host:
overlapping outputs computed wrong rows, the others computed something the device refuses."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import fp4gemm
from fp4gemm.testing import numpy_reference, round_to


def run(d, **kw):
    args = dict(a=d.a, b=d.b, sfa=d.sfa, sfb=d.sfb, c=d.outputs())
    args.update(kw)
    return fp4gemm.grouped_gemm(**args)


@contextlib.contextmanager
def rejects(match, argument, group):
    with pytest.raises(fp4gemm.ArgumentError, match=match) as info:
        yield info
    assert info.value.argument == argument and info.value.group == group


def aligned_empty(nbytes, offset=0):
    """A uint8 buffer whose element `offset` is 64-byte aligned (NumPy only promises 16)."""
    raw = np.zeros(nbytes + offset + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + offset + nbytes]


def test_overlapping_outputs(d):
    """Two groups' C views sharing rows: used to run, and the later group overwrote the earlier
    one's rows."""
    buf = np.full((40, 64), np.nan, np.float16)
    c = [buf[0:16], buf[8:40]]
    with rejects(r"groups\[1\]\.c: the output .* overlaps the output groups\[0\]\.c .*; outputs of distinct "
                 r"groups must not overlap", "groups[1].c", 1):
        run(d, c=c)
    assert np.isnan(buf).all()  # nothing written


def test_output_aliasing_an_input(d):
    """C of group 0 on top of B of group 1 (the same bytes viewed as float16)."""
    buf = aligned_empty(64 * 64 * 2)
    b1 = buf.reshape(128, 64)[:64]
    b1[...] = d.b[1]
    c0 = buf.view(np.float16).reshape(64, 64)[:16]
    with rejects(r"groups\[0\]\.c: the output .* overlaps the input groups\[1\]\.b .*; outputs must not alias "
                 r"any input", "groups[0].c", 0):
        run(d, b=[d.b[0], b1], c=[c0, d.outputs()[1]])


@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_alpha(d, alpha):
    with rejects(r"groups\[1\]\.alpha: alpha must be finite", "groups[1].alpha", 1):
        run(d, alpha=[1.0, alpha])
    with rejects(r"groups\[0\]\.alpha: alpha must be finite", "groups[0].alpha", 0):
        run(d, alpha=np.array([alpha, 1.0], np.float32))


def test_row_stride_of_a_not_a_multiple_of_16(d):
    """lda = K/2 + 8 bytes (a padded buffer): fine for a CPU loop, not for TMA."""
    a0 = d.a[0]
    pad = aligned_empty(a0.shape[0] * (a0.shape[1] + 8)).reshape(a0.shape[0], a0.shape[1] + 8)
    pad[:, : a0.shape[1]] = a0
    with rejects(r"groups\[0\]\.lda: row stride of A is 72 bytes; it must be a multiple of 16 bytes",
                 "groups[0].lda", 0):
        run(d, a=[pad[:, : a0.shape[1]], d.a[1]])


def test_row_stride_of_c_not_a_multiple_of_8(d):
    wide = np.zeros((32, 68), np.float16)
    with rejects(r"groups\[1\]\.ldc: row stride of C is 68 elements; it must be a multiple of 8 elements",
                 "groups[1].ldc", 1):
        run(d, c=[d.outputs()[0], wide[:, :64]])


@pytest.mark.parametrize("which", ["a", "sfb", "c"])
def test_unaligned_pointer(d, which):
    """A view starting 1 (c: 2) bytes into a buffer: the device requires 16-byte aligned operands."""
    arrays = {"a": d.a, "sfb": d.sfb, "c": d.outputs()}
    src = arrays[which][1]
    shift = src.itemsize
    raw = aligned_empty(src.nbytes, offset=shift)
    view = raw[shift:].view(src.dtype).reshape(src.shape)
    view[...] = src
    bad = list(arrays[which])
    bad[1] = view
    with rejects(rf"groups\[1\]\.{which}: pointer 0x[0-9a-f]+ is not 16-byte aligned", f"groups[1].{which}", 1):
        run(d, **{which: bad})


def test_aligned_views_still_compute(d):
    """Views at 16-byte aligned offsets with legal strides run as before."""
    a0 = d.a[0]
    pad = aligned_empty(a0.shape[0] * (a0.shape[1] + 16) + 16).reshape(-1)[16:]
    a_view = pad.reshape(a0.shape[0], a0.shape[1] + 16)[:, : a0.shape[1]]
    a_view[...] = a0
    big = np.full((48, 72), 7.0, np.float16)
    c = [big[0:16, 8:72], big[16:48, 0:64]]  # ldc = 72, second view 16 rows down
    fp4gemm.grouped_gemm([a_view, d.a[1]], d.b, d.sfa, d.sfb, c)
    for g, (out, ref) in enumerate(zip(c, numpy_reference(d))):
        np.testing.assert_array_equal(out.astype(np.float64), round_to(ref), err_msg=f"group {g}")
    assert np.all(big[0:16, 0:8] == 7.0) and np.all(big[16:48, 64:] == 7.0)
