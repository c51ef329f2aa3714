"""Weights in pieces (fp4gemm.moe.pack_pieces): the layout and each format's bit order, from their definitions.

Host tier: each format's stored bit positions (pieces_layout.piece_bit) are a permutation of a word's 32 bits.
GPU tier: pack_pieces of random rows, read back and undone with pieces_layout.rows_of_pieces (NumPy, from the
documented layout), gives the rows again -- every byte, both formats, plain and both GLU row orders, k with and
without the padded last k-block -- and a poisoned ``out`` is overwritten everywhere (the padding too, with zeros)."""

from __future__ import annotations

import numpy as np
import pytest

from pieces_layout import piece_bit, rows_of_pieces, unpermute_words


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
def test_piece_bits_are_a_permutation(fmt):
    seen = sorted(piece_bit(fmt, j, b) for j in range(8) for b in range(4))
    assert seen == list(range(32)), f"{fmt}: positions {seen}"


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4"])
@pytest.mark.parametrize("gate_up", [None, "stacked", "interleaved"])
@pytest.mark.parametrize("k", [256, 288, 320])
def test_pack_pieces_round_trips(fmt, gate_up, k):
    import torch

    from fp4gemm import moe

    rng = np.random.default_rng()
    e, rows = 3, 48 if gate_up is None else 64
    w = rng.integers(0, 256, size=(e, rows, k // 2), dtype=np.uint8)
    wt = torch.from_numpy(w).cuda()
    out = torch.full((e, rows // 16, (k + 127) // 128, 1024), 0xA5, dtype=torch.uint8, device="cuda")
    got = moe.pack_pieces(wt, gate_up, format=fmt, out=out)
    assert got is out and got._fp4gemm_pieces_format == fmt
    torch.cuda.synchronize()
    p = out.cpu().numpy()
    back = rows_of_pieces(p, rows, k, gate_up, fmt)
    assert np.array_equal(back, w), f"{fmt} {gate_up} k {k}: {np.count_nonzero(back != w)} bytes differ"
    # past k (the last chunk's padded k-blocks and lane slots): zeros, whatever out held
    kb2 = p.shape[2] * 2
    x = unpermute_words(p, fmt).reshape(e, rows // 16, kb2, 8, 4, 2, 8)  # [e, b, kb, g, c, half, j]
    byte = 32 * np.arange(kb2)[:, None, None, None, None] + 8 * np.arange(4)[None, None, :, None, None] \
        + np.arange(8)[None, None, None, None, :]
    past = np.broadcast_to(byte >= k // 2, x.shape[2:])
    assert past.any() == (k % 128 != 0)
    assert not x[:, :, past].any(), f"{fmt} {gate_up} k {k}: bytes past k are not zero"
    # the same rows packed for the other format differ (each format's own bit order), and undo to the same rows
    other = "nvfp4" if fmt == "mxfp4" else "mxfp4"
    q = moe.pack_pieces(wt, gate_up, format=other).cpu().numpy()
    assert not np.array_equal(q, p)
    assert np.array_equal(rows_of_pieces(q, rows, k, gate_up, other), w)
