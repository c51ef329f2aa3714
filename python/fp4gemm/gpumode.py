"""Drop-in for GPU MODE's nvfp4_group_gemm task: ``from fp4gemm.gpumode import custom_kernel``.

The input is GPU MODE's tuple ``(abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors,
problem_sizes)``: per group a [m, k/2, l] / b [n, k/2, l] (float4_e2m1fn_x2), c [m, n, l]
(float16), sfa / sfb [rows, k/16, l] (float8_e4m3fn, on the CPU there), the same scales
"reordered" — the blocked layout as a permuted (32, 4, rest, 4, rest_k, l) view on the GPU — and
(m, n, k, l). The GPU kernel reads the reordered scales; every batch index of l becomes a group.
C is written in place and the list of C tensors returned. The lists must have one entry per
group and every l must match its tensors' batch dimension (ArgumentError naming the list
otherwise: nothing is dropped or skipped silently).

The backend is fp4gemm's default (``fp4gemm.set_default_backend`` or FP4GEMM_BACKEND), 'auto'
unless set.
"""

from __future__ import annotations

import operator

from . import _fp4gemm as _C
from .api import _argument_error

# The names of the input tuple's four lists, as GPU MODE calls them.
_LISTS = ("abc_tensors", "sfasfb_tensors", "sfasfb_reordered_tensors", "problem_sizes")


def _check_lengths(abc, reordered, sizes):
    """Every list GPU MODE's tuple holds per group must have one entry per group: a shorter one
    would otherwise drop groups silently (their C left as it was)."""
    for name, lst in ((_LISTS[2], reordered), (_LISTS[3], sizes)):
        if len(lst) != len(abc):
            raise _argument_error(name, f"has {len(lst)} entries but {_LISTS[0]} has {len(abc)}; every list "
                                        "needs one entry per group")


def _batch_count(g, size, tensors):
    """l of group g, checked: >= 1 and equal to the trailing (batch) dimension of every tensor, so
    that no batch is skipped and none read past the tensor."""
    arg = f"{_LISTS[3]}[{g}]"
    try:
        l = operator.index(size[3])
    except TypeError:
        raise _argument_error(arg, f"l = {size[3]!r} is not an integer", g) from None
    if l < 1:
        raise _argument_error(arg, f"l = {l}; the batch count must be >= 1", g)
    names = (f"{_LISTS[0]}[{g}][0] (a)", f"{_LISTS[0]}[{g}][1] (b)", f"{_LISTS[0]}[{g}][2] (c)",
             f"{_LISTS[2]}[{g}][0] (sfa)", f"{_LISTS[2]}[{g}][1] (sfb)")
    for name, t, ndim in zip(names, tensors, (3, 3, 3, 6, 6)):
        have = t.shape[-1] if len(t.shape) == ndim else 1  # no trailing l dimension: one batch
        if have != l:
            raise _argument_error(arg, f"l = {l} but {name} has {have} batch{'es' if have != 1 else ''} "
                                       f"(shape {tuple(t.shape)})", g)
    return l


def custom_kernel(data):
    abc, _, reordered, sizes = data
    if len(reordered) != len(abc) or len(sizes) != len(abc):
        _check_lengths(abc, reordered, sizes)
    a, b, sfa, sfb, c = [], [], [], [], []
    for g, ((ag, bg, cg), (sag, sbg), size) in enumerate(zip(abc, reordered, sizes)):
        if size[3] == 1:  # the common case: the tensors go in whole (the binding checks l = 1 there)
            a.append(ag)
            b.append(bg)
            c.append(cg)
            sfa.append(sag)
            sfb.append(sbg)
        else:  # l > 1: each batch is one more group (5-D views of the reordered scales)
            for i in range(_batch_count(g, size, (ag, bg, cg, sag, sbg))):
                a.append(ag[:, :, i])
                b.append(bg[:, :, i])
                c.append(cg[:, :, i])
                sfa.append(sag[..., i])
                sfb.append(sbg[..., i])
    _C.grouped_gemm(a, b, sfa, sfb, c, None, "nvfp4", "blocked", "float16", None, None, 0)
    return [g[2] for g in abc]


def generate_input(m, n, k, g, seed, device="cuda"):
    """GPU MODE-shaped input (same signature as the task's generate_input; our own generator)."""
    from .torch_utils import gpumode_input

    return gpumode_input(list(m)[:g], list(n)[:g], list(k)[:g], seed=seed, device=device)


def ref_kernel(data):
    """Dequantise-then-matmul in float64, rounded once to float16; writes and returns the C tensors."""
    from .torch_utils import gpumode_reference

    out = []
    for (_, _, c), r in zip(data[0], gpumode_reference(data)):
        c.copy_(r)
        out.append(c)
    return out


# GPU MODE's seed benchmarks (task.yml; FLOPs = sum 2*M*N*K).
SEED_CASES = [
    dict(m=[80, 176, 128, 72, 64, 248, 96, 160], n=[4096] * 8, k=[7168] * 8, g=8, seed=1111),
    dict(m=[40, 76, 168, 72, 164, 148, 196, 160], n=[7168] * 8, k=[2048] * 8, g=8, seed=1111),
    dict(m=[192, 320], n=[3072] * 2, k=[4096] * 2, g=2, seed=1111),
    dict(m=[128, 384], n=[4096] * 2, k=[1536] * 2, g=2, seed=1111),
]
