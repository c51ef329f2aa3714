"""Host (NumPy) format helpers: codecs, FP4 packing, scale layouts, quantise / dequantise.

All conversions are the library's own C++ functions (exact, SPEC §1-2); these wrappers only
normalise NumPy inputs (contiguity, float32, ml_dtypes float8 viewed as uint8).
"""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from . import _fp4gemm as _C


def _u8(x: Any) -> np.ndarray:
    """A C-contiguous uint8 array of the same bytes (uint8, int8, float8_* from ml_dtypes, torch CPU)."""
    if type(x).__module__.split(".")[0] == "torch":
        import torch

        if x.dtype != torch.uint8:
            x = x.view(torch.uint8)
        x = x.cpu().numpy()
    x = np.asarray(x)
    if x.dtype != np.uint8:
        if x.dtype.itemsize != 1:
            raise _C.ArgumentError(f"fp4gemm: expected 8-bit codes (uint8 / int8 / float8), got dtype {x.dtype}")
        x = x.view(np.uint8)
    return np.ascontiguousarray(x)


def _f32(x: Any) -> np.ndarray:
    if type(x).__module__.split(".")[0] == "torch":  # (a CPU tensor; bf16 has no NumPy twin: exact in float32)
        x = x.detach().cpu().float().numpy()
    return np.ascontiguousarray(np.asarray(x, dtype=np.float32))


def scale_block_size(format: str = "nvfp4") -> int:
    """K-elements per scale: 16 for nvfp4, 32 for mxfp4."""
    return _C.scale_block_size(format)


def scale_bytes(scale_layout: str, rows: int, cols: int) -> int:
    """Bytes of a [rows, cols] scale matrix: rows*cols (linear) or pad128(rows)*pad4(cols) (blocked)."""
    return _C.scale_bytes(scale_layout, rows, cols)


def decode_e2m1(codes: Any) -> np.ndarray:
    """e2m1 nibbles (low 4 bits of each byte) -> float32, same shape."""
    codes = _u8(codes)
    return _C.decode_e2m1(codes.reshape(-1)).reshape(codes.shape)


def encode_e2m1(x: Any) -> np.ndarray:
    """float32 -> e2m1 nibbles (round to nearest even, saturating to +-6), same shape."""
    x = _f32(x)
    return _C.encode_e2m1(x.reshape(-1)).reshape(x.shape)


def decode_scales(codes: Any, format: str = "nvfp4") -> np.ndarray:
    """Scale codes -> float32: E4M3 (nvfp4; 0x7F/0xFF are NaN) or UE8M0 (mxfp4; 0xFF is NaN)."""
    codes = _u8(codes)
    return _C.decode_scales(codes.reshape(-1), format).reshape(codes.shape)


def encode_scales(x: Any, format: str = "nvfp4") -> np.ndarray:
    """float32 -> scale codes: E4M3 round-to-nearest-even (nvfp4) or UE8M0 next power of two (mxfp4)."""
    x = _f32(x)
    return _C.encode_scales(x.reshape(-1), format).reshape(x.shape)


def pack_fp4(nibbles: Any) -> np.ndarray:
    """[..., K] e2m1 nibbles -> [..., K/2] bytes, element k in byte k/2, even k in the low nibble."""
    n = _u8(nibbles)
    if n.shape[-1] % 2:
        raise _C.ArgumentError(f"fp4gemm: nibbles: the last dimension ({n.shape[-1]}) must be even")
    return ((n[..., 0::2] & 0xF) | ((n[..., 1::2] & 0xF) << 4)).astype(np.uint8)


def unpack_fp4(packed: Any) -> np.ndarray:
    """[..., K/2] bytes -> [..., K] e2m1 nibbles (inverse of pack_fp4)."""
    p = _u8(packed)
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), dtype=np.uint8)
    out[..., 0::2] = p & 0xF
    out[..., 1::2] = p >> 4
    return out


def quantize(x: Any, format: str = "nvfp4", scale_layout: str = "linear", global_scale: float = 1.0,
             stream: Any = None) -> Tuple[Any, Any]:
    """Quantise [rows, K] values to (packed uint8 [rows, K/2], scales).

    Per block of 16 (nvfp4) / 32 (mxfp4): nvfp4 S = E4M3(fl(fl(amax/6) / global_scale)) and
    elements x / fl(S * global_scale) rounded to nearest even e2m1, saturating (NVIDIA's recipe:
    the values are e2m1 * S * global_scale, the global scale folds into the GEMM's alpha);
    mxfp4 S = 2^(floor(log2 amax) - 2) (OCP; global_scale must be 1). Special values: formats.hpp.
    Scales are [rows, K/vec] (linear) or flat in the blocked layout.

    A torch CUDA tensor (bfloat16, float16 or float32) is quantised on its device by one kernel
    (fp4gemm::quantize_activations, bit for bit this rule), on ``stream`` (default: the current
    one), without synchronising; the results are torch uint8 tensors. Anything else: NumPy, here.
    """
    if type(x).__module__.split(".")[0] == "torch" and x.is_cuda:
        import torch

        if x.dim() != 2:
            from .api import _argument_error

            raise _argument_error("x", f"must be 2-D [rows, K], got shape {tuple(x.shape)}")
        vec = 16 if format == "nvfp4" else 32
        rows, k = x.shape
        packed = torch.empty((rows, k // 2), dtype=torch.uint8, device=x.device)
        if scale_layout == "linear":
            scales = torch.empty((rows, k // vec), dtype=torch.uint8, device=x.device)
        else:
            scales = torch.empty(((rows + 127) // 128 * 128) * ((k // vec + 3) // 4 * 4), dtype=torch.uint8,
                                 device=x.device)
        s = stream if stream is not None else torch.cuda.current_stream(x.device).cuda_stream
        _C.quantize_activations(x, packed, scales, format, "linear" if scale_layout == "linear" else "blocked",
                                float(global_scale), int(s))
        return packed, scales
    x = _f32(x)
    packed, scales = _C.quantize(x, format, float(global_scale))
    if scale_layout != "linear":
        if scale_layout not in ("blocked", "swizzled", "reordered"):
            raise _C.ArgumentError(f"fp4gemm: scale_layout: must be 'linear' or 'blocked', got {scale_layout!r}")
        scales = _C.linear_to_blocked(scales)
    return packed, scales


def dequantize(packed: Any, scales: Any, format: str = "nvfp4", scale_layout: str = "linear", k: int = -1) -> np.ndarray:
    """Exact float32 values [rows, K] of packed FP4 [rows, K/2] with scales in `scale_layout`.

    `k` defaults to 2 * packed.shape[1]; `scales` may have any shape holding the right bytes
    (GPU MODE's permuted blocked view is read in its logical order, so pass it flattened with
    `blocked_flat`).
    """
    packed = _u8(packed)
    if packed.ndim == 3 and packed.shape[2] == 1:
        packed = packed[:, :, 0]
    return _C.dequantize(packed, _u8(scales).reshape(-1), format, scale_layout, k)


def linear_to_blocked(scales: Any) -> np.ndarray:
    """Linear [rows, cols] scales -> the blocked layout, flat uint8 (padding written as 0)."""
    s = _u8(scales)
    if s.ndim == 3 and s.shape[2] == 1:
        s = s[:, :, 0]
    return _C.linear_to_blocked(np.ascontiguousarray(s))


def blocked_to_linear(blocked: Any, rows: int, cols: int) -> np.ndarray:
    """Blocked-layout scales (any shape of the right size, in memory order) -> linear [rows, cols]."""
    return _C.blocked_to_linear(_u8(blocked).reshape(-1), rows, cols)


def blocked_view(blocked: Any, rows: int, cols: int):
    """GPU MODE's "reordered" 6-D view (32, 4, rest_rows, 4, rest_cols, 1) of flat blocked scales.

    Works on NumPy arrays and torch tensors (the result shares memory with `blocked`).
    """
    rest_r = (rows + 127) // 128
    rest_c = (cols + 3) // 4
    v = blocked.reshape(1, rest_r, rest_c, 32, 4, 4)
    order = (3, 4, 1, 5, 2, 0)
    return v.permute(*order) if hasattr(v, "permute") else v.transpose(order)


def blocked_flat(view: Any):
    """Inverse of blocked_view: the flat bytes in memory order (no copy for a blocked_view)."""
    order = (5, 2, 4, 0, 1, 3)
    v = view.permute(*order) if hasattr(view, "permute") else view.transpose(order)
    return v.reshape(-1)
