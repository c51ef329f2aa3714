"""Every byte range the kernel will touch must lie inside the memory the array lives in: a shape
check alone cannot see a view that reaches past its buffer (NumPy's as_strided does not bound
views; a torch storage can be resized under its views). Host tier with NumPy (and with CPU torch
tensors where torch is installed); the CUDA side is in test_gpu.py."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import fp4gemm
from fp4gemm.testing import random_groups

as_strided = np.lib.stride_tricks.as_strided


def bounded_buffer(visible, total):
    """A uint8 array whose own buffer is `visible` bytes (64-byte aligned) inside `total` bytes of
    real memory: a view reaching past `visible` stays inside memory this test owns, so the old
    code read or wrote harmlessly instead of corrupting the heap."""
    raw = np.zeros(total + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    backing = raw[start:start + total]
    return np.frombuffer(memoryview(backing)[:visible], np.uint8), backing  # base: the memoryview


def past_the_end(src, visible):
    """`src`'s contents as a view over a buffer of only `visible` bytes (same shape and strides)."""
    buf, backing = bounded_buffer(visible, src.nbytes)
    backing.view(src.dtype)[: src.size] = src.reshape(-1)
    view = as_strided(buf.view(src.dtype), shape=src.shape, strides=src.strides, writeable=True)
    return view, backing


def test_blocked_scales_allocated_at_the_linear_size():
    """sfb[1] has the blocked layout's shape, 1024 bytes (64 rows padded to 128, 8 scale
    columns), over a buffer of the linear layout's 64 x 8 = 512 bytes: used to read past it."""
    d = random_groups([16, 32], 64, 128, scale_layout="blocked", seed=1)
    assert d.sfb[1].nbytes == 1024
    sfb1, _ = past_the_end(d.sfb[1], 512)
    with pytest.raises(fp4gemm.ArgumentError, match=r"sfb\[1\]: the kernel would read bytes \[0x[0-9a-f]+, "
                       r"0x[0-9a-f]+\) \(blocked layout, padded .*\) but the buffer the array lives in is") as info:
        fp4gemm.grouped_gemm(d.a, d.b, d.sfa, [d.sfb[0], sfb1], d.outputs(), scale_layout="blocked")
    assert info.value.argument == "sfb[1]" and info.value.group == 1


@pytest.mark.parametrize("which,verb", [("a", "read"), ("b", "read"), ("sfa", "read"), ("c", "write")])
def test_view_past_its_buffer(which, verb):
    d = random_groups([16, 32], 64, 128, seed=2)
    arrays = {"a": d.a, "b": d.b, "sfa": d.sfa, "c": d.outputs()}
    src = arrays[which][0]
    view, backing = past_the_end(src, src.nbytes // 2)
    before = backing.copy()
    bad = list(arrays[which])
    bad[0] = view
    args = dict(a=d.a, b=d.b, sfa=d.sfa, sfb=d.sfb, c=d.outputs())
    args[which] = bad
    with pytest.raises(fp4gemm.ArgumentError, match=rf"{which}\[0\]: the kernel would {verb} bytes") as info:
        fp4gemm.grouped_gemm(**args)
    assert info.value.argument == f"{which}[0]" and info.value.group == 0
    np.testing.assert_array_equal(backing, before)  # nothing written


def test_views_inside_their_buffer_compute():
    """Views of part of a larger buffer (a row slice of C, A rows with a padded stride) are fine."""
    d = random_groups([16], 64, 128, seed=3)
    big = np.zeros((40, 64), np.float16)
    c = [big[8:24]]
    pad = np.zeros((16, 80), np.uint8)
    pad[:, :64] = d.a[0]
    fp4gemm.grouped_gemm([pad[:, :64]], d.b, d.sfa, d.sfb, c)
    ref = fp4gemm.grouped_gemm(d.a, d.b, d.sfa, d.sfb)
    np.testing.assert_array_equal(c[0], ref[0])
    assert not big[:8].any() and not big[24:].any()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_storage_resized_under_the_view():
    """A CPU torch tensor whose storage was shrunk in place (untyped_storage().resize_()): its
    shape still says 64 x 64 bytes. Used to read past the storage."""
    import torch

    d = random_groups([16, 32], 64, 128, seed=4)
    t = lambda xs: [torch.from_numpy(x.copy()) for x in xs]  # noqa: E731
    a, b, sfa, sfb = t(d.a), t(d.b), t(d.sfa), t(d.sfb)
    b1 = torch.tensor(d.b[1])  # a resizable storage (from_numpy's is not)
    b1.untyped_storage().resize_(b1.numel() // 2)
    c = [torch.zeros(16, 64, dtype=torch.float16), torch.zeros(32, 64, dtype=torch.float16)]
    with pytest.raises(fp4gemm.ArgumentError, match=r"b\[1\]: the kernel would read bytes .* but the tensor's "
                                                     r"storage is") as info:
        fp4gemm.grouped_gemm(a, [b[0], b1], sfa, sfb, c)
    assert info.value.group == 1
