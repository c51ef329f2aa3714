"""fp4gemm.moe.pack_pieces' layout undone from its definition (NumPy only; shared by the tests that read pieces)."""

from __future__ import annotations

import numpy as np


# Pieces store each 32-bit word's bits permuted (src/device/dequant.cuh, pieces_bit_position / _nv): MXFP4 nibble j's
# bit b (mantissa, E0, E1, sign) sits at _MX_POS[j % 4][b] + 16 (j // 4); NVFP4 nibble j's at
# _NV_POS[(j & 1) + 2 (j >> 2)][b] + 16 ((j >> 1) & 1).
_MX_POS = ((6, 7, 8, 15), (3, 4, 5, 12), (0, 1, 2, 9), (14, 10, 11, 13))
_NV_POS = ((9, 10, 11, 15), (6, 7, 8, 12), (3, 4, 5, 13), (0, 1, 2, 14))


def piece_bit(format, j, b):
    if format == "mxfp4":
        return _MX_POS[j % 4][b] + 16 * (j // 4)
    return _NV_POS[(j & 1) + 2 * (j >> 2)][b] + 16 * ((j >> 1) & 1)


def unpermute_words(p, format):
    """Pieces' words back to the rows' bit order (NumPy, from the definitions above)."""
    s = np.ascontiguousarray(p).view("<u4")
    w = np.zeros_like(s)
    for j in range(8):
        for b in range(4):
            w |= ((s >> np.uint32(piece_bit(format, j, b))) & np.uint32(1)) << np.uint32(4 * j + b)
    return w.view(np.uint8).reshape(p.shape)


def rows_of_pieces(p, rows, k, gate_up, format):
    """fp4gemm.moe.pack_pieces' layout undone, from its definition (NumPy): pieces [E, rows/16, ceil(k/128), 1024]
    -> packed rows [E, rows, k/2]. A piece is [32 lanes][16 B]; lane 4g + c holds bytes 8c..8c+7 of its 64-wide
    k-block of block row g (its first 8 bytes) and g + 8; a GLU's w13 block b holds gate rows 8b..8b+7, then their up
    rows (stacked: I + 8b + g; interleaved: 2(8b + g) + 1). Each word's bits are permuted for its format."""
    p = unpermute_words(p, format)
    e, blocks, chunks = p.shape[:3]
    x = p.reshape(e, blocks, 2 * chunks, 8, 4, 2, 8)  # [e, b, kb, g, c, half, j]
    y = x.transpose(0, 1, 5, 3, 2, 4, 6).reshape(e, blocks, 16, 2 * chunks * 32)[..., : k // 2]  # [e, b, 8 half + g, .]
    if gate_up is None:
        return np.ascontiguousarray(y.reshape(e, rows, k // 2))
    inter = rows // 2
    gate, up = y[:, :, :8].reshape(e, inter, k // 2), y[:, :, 8:].reshape(e, inter, k // 2)
    out = np.empty((e, rows, k // 2), np.uint8)
    if gate_up == "stacked":
        out[:, :inter], out[:, inter:] = gate, up
    else:
        out[:, 0::2], out[:, 1::2] = gate, up
    return out
