"""Host tier: fp4gemm.gpumode.custom_kernel on GPU MODE-shaped NumPy data (it runs the CPU
reference there). Mismatched list lengths and a bad batch count `l` are ArgumentErrors naming the
list; nothing is dropped or skipped silently."""

from __future__ import annotations

import numpy as np
import pytest

import fp4gemm
from fp4gemm import formats, gpumode
from fp4gemm.testing import numpy_reference, random_groups, round_to


def gpumode_data(ms, n=64, k=128, seed=0):
    """(abc, sfasfb, sfasfb_reordered, problem_sizes) as GPU MODE lays them out (l = 1), NumPy."""
    d = random_groups(ms, n, k, seed=seed)
    abc, sf, re, sizes = [], [], [], []
    for a, b, sa, sb in zip(d.a, d.b, d.sfa_linear, d.sfb_linear):
        c = np.full((a.shape[0], b.shape[0], 1), np.nan, np.float16)
        abc.append((a[:, :, None], b[:, :, None], c))
        sf.append((sa[:, :, None], sb[:, :, None]))
        re.append((formats.blocked_view(fp4gemm.linear_to_blocked(sa), *sa.shape),
                   formats.blocked_view(fp4gemm.linear_to_blocked(sb), *sb.shape)))
        sizes.append((a.shape[0], b.shape[0], 2 * a.shape[1], 1))
    return (abc, sf, re, sizes), d


def check(outs, d):
    for g, (o, r) in enumerate(zip(outs, numpy_reference(d))):
        np.testing.assert_array_equal(o[:, :, 0].astype(np.float64), round_to(r), err_msg=f"group {g}")


def test_custom_kernel_on_host_arrays():
    data, d = gpumode_data([16, 32])
    check(gpumode.custom_kernel(data), d)


@pytest.mark.parametrize("which,index", [("sfasfb_reordered_tensors", 2), ("problem_sizes", 3)])
def test_shorter_list_is_an_error(which, index):
    """A shorter list used to be zipped away: the last group was dropped and its C left as it was."""
    data, _ = gpumode_data([16, 32])
    bad = list(data)
    bad[index] = bad[index][:1]
    with pytest.raises(fp4gemm.ArgumentError, match=rf"{which}: has 1 entries but abc_tensors has 2") as info:
        gpumode.custom_kernel(tuple(bad))
    assert info.value.argument == which and info.value.group == -1


def test_longer_list_is_an_error():
    data, _ = gpumode_data([16, 32])
    abc, sf, re, sizes = data
    with pytest.raises(fp4gemm.ArgumentError, match=r"problem_sizes: has 3 entries but abc_tensors has 2"):
        gpumode.custom_kernel((abc, sf, re, sizes + [(16, 64, 128, 1)]))


@pytest.mark.parametrize("l", [0, -1])
def test_l_below_one_is_an_error(l):
    """l = 0 used to skip the group silently (its C untouched)."""
    data, _ = gpumode_data([16, 32])
    sizes = list(data[3])
    sizes[1] = (32, 64, 128, l)
    with pytest.raises(fp4gemm.ArgumentError, match=rf"problem_sizes\[1\]: l = {l}; the batch count must be >= 1") \
            as info:
        gpumode.custom_kernel((data[0], data[1], data[2], sizes))
    assert info.value.argument == "problem_sizes[1]" and info.value.group == 1


def test_l_larger_than_the_tensors_is_an_error():
    """l = 2 on tensors with one batch used to raise IndexError from the slicing."""
    data, _ = gpumode_data([16, 32])
    sizes = list(data[3])
    sizes[0] = (16, 64, 128, 2)
    with pytest.raises(fp4gemm.ArgumentError, match=r"problem_sizes\[0\]: l = 2 but abc_tensors\[0\]\[0\] \(a\) "
                                                     r"has 1 batch") as info:
        gpumode.custom_kernel((data[0], data[1], data[2], sizes))
    assert info.value.group == 0


def batched(data, l):
    """Group 0 of `data` repeated as l batches, laid out as GPU MODE lays out l (outermost in memory)."""
    (a, b, c), = data[0][:1]
    sa, sb = data[2][0]
    rows = lambda x: np.moveaxis(np.stack([x[:, :, 0]] * l), 0, -1)  # noqa: E731  [rows, cols, l]

    def scales(view):  # (32, 4, rm, 4, rk, l) over (l, rm, rk, 32, 4, 4)
        rm, rk = view.shape[2], view.shape[4]
        flat = np.stack([formats.blocked_flat(view)] * l)
        return flat.reshape(l, rm, rk, 32, 4, 4).transpose(3, 4, 1, 5, 2, 0)

    c = np.full((l,) + c.shape[:2], np.nan, np.float16).transpose(1, 2, 0)
    return [(rows(a), rows(b), c)], [(scales(sa), scales(sb))]


def test_l_smaller_than_the_tensors_is_an_error():
    """l = 2 on tensors with three batches would leave the third batch of C unwritten."""
    data, _ = gpumode_data([16])
    abc, re = batched(data, 3)
    with pytest.raises(fp4gemm.ArgumentError, match=r"problem_sizes\[0\]: l = 2 but abc_tensors\[0\]\[0\] \(a\) "
                                                     r"has 3 batches"):
        gpumode.custom_kernel((abc, data[1], re, [(16, 64, 128, 2)]))


def test_l_greater_than_one_computes_every_batch():
    data, d = gpumode_data([16], seed=3)
    abc, re = batched(data, 2)
    c = abc[0][2]
    (out,) = gpumode.custom_kernel((abc, data[1], re, [(16, 64, 128, 2)]))
    assert out is c
    for i in range(2):
        check([out[:, :, i:i + 1]], d)
