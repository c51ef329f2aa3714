"""Host tier: unusual memory layouts (Fortran order, negative / zero / overlapping strides,
zero-size groups, generic iterables, argument lists changed during the call) either compute the
right result or raise ArgumentError naming the argument; none may crash the interpreter."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import fp4gemm
from fp4gemm.testing import numpy_reference, random_groups, round_to

as_strided = np.lib.stride_tricks.as_strided


def run(d, **kw):
    args = dict(a=d.a, b=d.b, sfa=d.sfa, sfb=d.sfb, c=d.outputs())
    args.update(kw)
    return fp4gemm.grouped_gemm(**args)


@contextlib.contextmanager
def rejects(match, argument):
    with pytest.raises(fp4gemm.ArgumentError, match=match) as info:
        yield info
    assert isinstance(info.value, ValueError) and info.value.argument == argument


def check(d, c, alpha=None):
    for g, (out, ref) in enumerate(zip(c, numpy_reference(d, alpha))):
        np.testing.assert_array_equal(out.astype(np.float64), round_to(ref), err_msg=f"group {g}")


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["a", "b", "c"])
def test_fortran_order_matrix(d, which):
    """Regression: a column-major operand must raise (it crashed the interpreter on a GPU machine)."""
    arrays = {"a": d.a, "b": d.b, "c": d.outputs()}
    bad = list(arrays[which])
    bad[1] = np.asfortranarray(bad[1])
    rows, cols = bad[1].shape
    msg = (rf"{which}\[1\]: must be contiguous along its last dimension, got strides \(1, {rows}\) "
           rf"for shape \({rows}, {cols}\)")
    with rejects(msg, f"{which}[1]"):
        run(d, **{which: bad})


def test_fortran_order_repeated(d):
    """The same error many times over (exception path and message formatting are stable)."""
    for _ in range(200):
        with rejects("contiguous along its last dimension", "a[0]"):
            run(d, a=[np.asfortranarray(d.a[0]), d.a[1]])


def test_one_dimensional_shape_text(d):
    with rejects(r"a\[0\]: must be 2-D .* got shape \(1024,\)", "a[0]"):
        run(d, a=[d.a[0].reshape(-1), d.a[1]])


@pytest.mark.parametrize("which,view,match", [
    ("a", lambda x: x[::-1], "has negative strides"),
    ("a", lambda x: x[:, ::-1], "has negative strides"),
    ("b", lambda x: x[::-1], "has negative strides"),
    ("c", lambda x: x[::-1], "has negative strides"),
    ("sfa", lambda x: x[::-1], "must be dense and row-major"),
    ("sfb", lambda x: x[:, ::-1], "must be dense and row-major"),
    ("sfa", np.asfortranarray, "must be dense and row-major"),
    ("sfa", lambda x: np.repeat(x, 2, axis=1)[:, ::2], "must be dense and row-major"),
])
def test_bad_strides(d, which, view, match):
    arrays = {"a": d.a, "b": d.b, "sfa": d.sfa, "sfb": d.sfb, "c": d.outputs()}
    bad = list(arrays[which])
    bad[0] = view(bad[0])
    with rejects(match, f"{which}[0]"):
        run(d, **{which: bad})


def test_overlapping_rows(d):
    a0 = as_strided(d.a[0], shape=d.a[0].shape, strides=(0, 1))  # every row is row 0
    with rejects(r"a\[0\]: has overlapping rows: row stride 0 < 64", "a[0]"):
        run(d, a=[a0, d.a[1]])
    b1 = as_strided(d.b[1], shape=d.b[1].shape, strides=(16, 1))  # rows overlap by 48 bytes
    with rejects(r"b\[1\]: has overlapping rows", "b[1]"):
        run(d, b=[d.b[0], b1])
    buf = np.zeros(64 * 2, np.float16)
    c0 = as_strided(buf, shape=(16, 64), strides=(0, 2), writeable=True)
    with rejects(r"c\[0\]: has overlapping rows", "c[0]"):
        run(d, c=[c0, d.outputs()[1]])


def test_bad_alpha_arrays(d):
    with rejects("alpha: must be float32", "alpha"):
        run(d, alpha=np.ones(2, np.float64))
    with rejects("alpha: has 3 values", "alpha"):
        run(d, alpha=np.ones(3, np.float32))
    with rejects("alpha: has 0 values", "alpha"):
        run(d, alpha=np.ones((2, 0), np.float32))


# ---- layouts that compute ----------------------------------------------------------------------


def test_negative_and_zero_stride_alpha(d):
    alpha = np.array([2.0, 0.5], np.float32)[::-1]  # strides (-4,): values 0.5, 2.0
    check(d, run(d, alpha=alpha), [0.5, 2.0])
    alpha = np.broadcast_to(np.float32(0.25), (2,))  # stride 0, read-only
    check(d, run(d, alpha=alpha), [0.25, 0.25])


def test_zero_size_groups():
    d = random_groups([0, 8], 16, 64, seed=3)
    c = run(d)
    assert c[0].shape == (0, 16)
    check(d, c)
    # Empty operands may have any strides, also negative ones.
    e = random_groups([0], 16, 64, seed=4)
    c = run(e, a=[e.a[0][:, ::-1]], sfa=[e.sfa[0][::-1, ::-1]], c=[np.zeros((0, 16), np.float16)[:, ::-1]])
    assert c[0].shape == (0, 16)


def test_n_zero_rejected_like_the_device():
    """N = 0 with M > 0: the shared validation requires N >= 1 whenever M > 0 (the host path used
    to accept it)."""
    d = random_groups([0, 8], [16, 0], 64, seed=3)
    with rejects(r"groups\[1\]\.n: N must be >= 1 when M > 0 \(got 0\)", "groups[1].n"):
        run(d)


def test_k_zero_rejected_like_the_device():
    """K = 0 with M > 0 is rejected by the validation both paths share (the host path used to
    accept it and write zeros; the device always rejected it). test_gpu.py checks the device side
    gives the same message."""
    m, n = 8, 16
    a, b = np.zeros((m, 0), np.uint8), np.zeros((n, 0), np.uint8)
    sfa, sfb = np.zeros((m, 0), np.uint8), np.zeros((n, 0), np.uint8)
    c = np.full((m, n), np.nan, np.float16)
    with rejects(r"groups\[0\]\.k: K must be >= 1 when M > 0 \(got 0\)", "groups[0].k") as info:
        fp4gemm.grouped_gemm([a], [b], [sfa], [sfb], [c])
    assert info.value.group == 0
    assert np.isnan(c).all()  # nothing written


def test_single_row_and_column_views():
    """M = 1 and N = 1 (views whose size-1 dimensions carry odd strides)."""
    d = random_groups([1], 1, 128, seed=5)
    wide = np.zeros((3, 200), np.float16)
    c = [wide[1:2, 8:9]]  # 1 x 1 view, strides (200, 1), 16-byte aligned (416 bytes in)
    a = [np.repeat(d.a[0], 3, axis=0)[::3]]  # 1 row, row stride 3 * 64
    fp4gemm.grouped_gemm(a, d.b, d.sfa, d.sfb, c)
    check(d, c)
    assert np.count_nonzero(wide) <= 1


def test_generic_iterables(d):
    """Generators and other iterables are taken once (they used to be consumed twice)."""
    c = d.outputs()
    fp4gemm.grouped_gemm(iter(d.a), (x for x in d.b), map(np.asarray, d.sfa), iter(d.sfb), c)
    check(d, c)
    with rejects("must be a list or tuple of arrays", "sfa"):
        run(d, sfa=42)


def test_lists_changed_during_the_call(d):
    """An array's __dlpack__ that empties the argument lists must not free the arrays the call
    still uses: the call works on a snapshot of each list."""
    a = [np.copy(x) for x in d.a]
    c = d.outputs()
    lists = [a, c]

    class Clearing:
        def __init__(self, x):
            self.x = x

        def __dlpack__(self, *args, **kw):
            for lst in lists:
                lst.clear()
            return self.x.__dlpack__(*args, **kw)

        def __dlpack_device__(self):
            return self.x.__dlpack_device__()

    keep_c = list(c)
    a[0] = Clearing(a[0])
    fp4gemm.grouped_gemm(a, d.b, d.sfa, d.sfb, c)
    assert a == [] and c == []
    check(d, keep_c)

    class ClearingNumber:
        def __float__(self):
            lst.clear()
            return 1.0

    lst = [ClearingNumber(), 1.0]
    c2 = d.outputs()
    fp4gemm.grouped_gemm(d.a, d.b, d.sfa, d.sfb, c2, alpha=lst)
    check(d, c2)
