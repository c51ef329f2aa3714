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


# ---- nvfp4_dual_gemm: C = silu(A B1^T) * (A B2^T) -------------------------------------------------
# Input: the 10-tuple (a, b1, b2, sfa, sfb1, sfb2, sfa_permuted, sfb1_permuted, sfb2_permuted, c):
# a [m, k/2, l], b1 / b2 [n, k/2, l] (float4_e2m1fn_x2), sfa [m, k/16, l] / sfb* [n, k/16, l]
# (float8_e4m3fn, linear; GPU MODE keeps them on the host), the same scales "permuted" (the blocked
# layout as a (32, 4, rest_m, 4, rest_k, l) view, on the GPU), c [m, n, l] float16. One call of
# fp4gemm.dual_gemm (the pointer-array dual GEMM on the stream-K kernel: A read and dequantised
# once, both products in FP32 with split-K where the tiles are few, SiLU and the product in FP32,
# rounded once), every batch index a group (the binding makes the views along l when it plans the
# call), reading the permuted scales; the library's call memo (the same tensors in the same state)
# and plan cache make a repeated call one enqueue. Every run reads the scales as they are then: a
# harness that refills the same tensors gets fresh results.


def _dual_lists(data):
    a, b1, b2, _sfa, _sfb1, _sfb2, pa, pb1, pb2, c = data
    m, half_k, l = a.shape
    n, k = b1.shape[0], 2 * half_k
    if tuple(b2.shape) != tuple(b1.shape) or tuple(c.shape) != (m, n, l):
        raise _argument_error("data", f"shapes a {tuple(a.shape)}, b1 {tuple(b1.shape)}, b2 {tuple(b2.shape)}, "
                                      f"c {tuple(c.shape)} do not form a dual GEMM (m, n, k = {m}, {n}, {k})")
    return [a], [b1], [b2], [pa], [pb1], [pb2], [c]


def dual_gemm_custom_kernel(data):
    """GPU MODE ``nvfp4_dual_gemm`` drop-in: writes ``c = silu(a @ b1.T) * (a @ b2.T)`` (float16)
    per batch index and returns c. Bit for bit fp4gemm's reference with the FP32 epilogue
    (``reference::moe_gemm`` glu_fp32: SiLU from the exact FP32 sums) on GPU MODE's values."""
    a, b1, b2, pa, pb1, pb2, c = _dual_lists(data)
    _C.dual_gemm(a, b1, b2, pa, pb1, pb2, c, "nvfp4", "blocked", "float16", "silu", _C.SWIGLU_ALPHA, _C.SWIGLU_LIMIT,
                 None, 0, True)
    return data[9]


def dual_generate_input(m, n, k, l=1, seed=1111, device="cuda"):
    """A GPU MODE-shaped dual-GEMM input with GPU MODE's values (e2m1 {0, +-0.5, +-1, +-1.5}, scales
    {1, 2}; our own generator, the task's layouts): every FP32 sum is exact."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    nib = torch.tensor([0x0, 0x1, 0x9, 0x2, 0xA, 0x3, 0xB], dtype=torch.uint8)

    def packed(rows):
        lo = nib[torch.randint(0, 7, (l, rows, k // 2), generator=g)]
        hi = nib[torch.randint(0, 7, (l, rows, k // 2), generator=g)]
        return (lo | (hi << 4)).permute(1, 2, 0).to(device)

    def scales(rows):
        lin = torch.tensor([0x38, 0x40], dtype=torch.uint8)[torch.randint(0, 2, (l, rows, k // 16), generator=g)]
        rm, rk = (rows + 127) // 128, (k // 16 + 3) // 4
        pad = torch.zeros((l, rm * 128, rk * 4), dtype=torch.uint8)
        pad[:, :rows, :k // 16] = lin
        # blocked: [l, rm, rk, 32, 4, 4] with (r % 32, (r % 128) // 32, c % 4) inside an atom
        blk = pad.view(l, rm, 4, 32, rk, 4).permute(0, 1, 4, 3, 2, 5).contiguous()
        permuted = blk.permute(3, 4, 1, 5, 2, 0).to(device)  # (32, 4, rm, 4, rk, l)
        return lin.permute(1, 2, 0), permuted  # [rows, k/16, l], each batch contiguous

    a, b1, b2 = packed(m), packed(n), packed(n)
    (sfa, sfa_p), (sfb1, sfb1_p), (sfb2, sfb2_p) = scales(m), scales(n), scales(n)
    c = torch.empty((l, m, n), dtype=torch.float16, device=device).permute(1, 2, 0)
    return a, b1, b2, sfa, sfb1, sfb2, sfa_p, sfb1_p, sfb2_p, c


def dual_ref_kernel(data):
    """float64 reference: dequantise exactly, silu(a b1^T) * (a b2^T), rounded once to float16."""
    import numpy as np
    import torch

    from .formats import dequantize

    a, b1, b2, sfa, sfb1, sfb2, _, _, _, c = data
    out = torch.empty(c.shape, dtype=torch.float16)
    for i in range(a.shape[2]):
        def dq(p, s):
            return dequantize(p[:, :, i].view(torch.uint8).cpu().numpy(), s[:, :, i].view(torch.uint8).cpu().numpy(),
                              "nvfp4").astype(np.float64)

        x, w1, w2 = dq(a, sfa), dq(b1, sfb1), dq(b2, sfb2)
        g, u = x @ w1.T, x @ w2.T
        out[:, :, i] = torch.from_numpy(g / (1.0 + np.exp(-g)) * u).to(torch.float16)
    return out
