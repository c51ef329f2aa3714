"""Test data on the host (NumPy): random grouped problems and an independent float64 check.

`random_groups` draws GPU MODE-style data (values {0, +-0.5, +-1, +-1.5}, scales {1, 2}) or the
full range (all 16 nibbles; E4M3 scales 2^-9..448, UE8M0 scales 2^-10..2^10). `numpy_reference`
dequantises with `fp4gemm.dequantize` and multiplies in float64 with NumPy, independently of
the C++ reference's GEMM loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence

import numpy as np

from . import formats
from .api import _numpy_dtype, out_dtype_name

E4M3_ONE, E4M3_TWO = 0x38, 0x40
UE8M0_ONE, UE8M0_TWO = 127, 128


@dataclass
class GroupData:
    """Host arrays of one grouped problem, in the layouts grouped_gemm takes."""

    a: List[np.ndarray] = field(default_factory=list)    # uint8 [M, K/2]
    b: List[np.ndarray] = field(default_factory=list)    # uint8 [N, K/2]
    sfa: List[np.ndarray] = field(default_factory=list)  # scales of A in `scale_layout`
    sfb: List[np.ndarray] = field(default_factory=list)
    sfa_linear: List[np.ndarray] = field(default_factory=list)  # [M, K/vec]
    sfb_linear: List[np.ndarray] = field(default_factory=list)
    format: str = "nvfp4"
    scale_layout: str = "linear"

    def outputs(self, out_dtype: str = "float16") -> List[np.ndarray]:
        """Output arrays prefilled with NaN, so unwritten elements show."""
        dtype = _numpy_dtype(out_dtype_name(out_dtype))
        fill = 0xFFFF if dtype == np.uint16 else np.nan
        return [np.full((a.shape[0], b.shape[0]), fill, dtype=dtype) for a, b in zip(self.a, self.b)]


def _random_packed(rng: np.random.Generator, rows: int, k: int, values: str) -> np.ndarray:
    packed = rng.integers(0, 256, size=(rows, k // 2), dtype=np.uint8)
    if values == "gpumode":
        packed &= 0b1011_1011  # sign and the two low bits of each nibble: {0, +-0.5, +-1, +-1.5}
    return packed


def _random_scales(rng: np.random.Generator, rows: int, cols: int, format: str, values: str) -> np.ndarray:
    if values == "gpumode":
        one, two = (E4M3_ONE, E4M3_TWO) if format == "nvfp4" else (UE8M0_ONE, UE8M0_TWO)
        return np.where(rng.integers(0, 2, size=(rows, cols)) == 0, one, two).astype(np.uint8)
    if format == "nvfp4":
        return rng.integers(0x01, 0x7F, size=(rows, cols), dtype=np.uint8)  # 2^-9 .. 448, no NaN
    return rng.integers(127 - 10, 127 + 11, size=(rows, cols), dtype=np.uint8)


def random_groups(
    ms: Sequence[int],
    n: int | Sequence[int],
    k: int | Sequence[int],
    format: str = "nvfp4",
    scale_layout: str = "linear",
    values: str = "gpumode",
    seed: int = 0,
) -> GroupData:
    """Random packed operands and scales for groups of M = ms[g], N = n[g], K = k[g]."""
    if values not in ("gpumode", "full"):
        raise ValueError("values must be 'gpumode' or 'full'")
    rng = np.random.default_rng(seed)
    g = len(ms)
    ns = [n] * g if isinstance(n, int) else list(n)
    ks = [k] * g if isinstance(k, int) else list(k)
    vec = formats.scale_block_size(format)
    d = GroupData(format=format, scale_layout=scale_layout)
    for m_i, n_i, k_i in zip(ms, ns, ks):
        d.a.append(_random_packed(rng, m_i, k_i, values))
        d.b.append(_random_packed(rng, n_i, k_i, values))
        sa = _random_scales(rng, m_i, k_i // vec, format, values)
        sb = _random_scales(rng, n_i, k_i // vec, format, values)
        d.sfa_linear.append(sa)
        d.sfb_linear.append(sb)
        if scale_layout == "linear":
            d.sfa.append(sa)
            d.sfb.append(sb)
        else:
            d.sfa.append(formats.linear_to_blocked(sa))
            d.sfb.append(formats.linear_to_blocked(sb))
    return d


def numpy_reference(d: GroupData, alpha: Optional[Sequence[float]] = None) -> List[np.ndarray]:
    """float64 results alpha_g * dq(A_g) @ dq(B_g).T, dequantised exactly, multiplied by NumPy."""
    out = []
    for g, (a, b, sa, sb) in enumerate(zip(d.a, d.b, d.sfa_linear, d.sfb_linear)):
        da = formats.dequantize(a, sa, d.format, "linear").astype(np.float64)
        db = formats.dequantize(b, sb, d.format, "linear").astype(np.float64)
        r = da @ db.T
        if alpha is not None:
            r = r * float(np.float32(alpha[g]))
        out.append(r)
    return out


def as_float64(c: np.ndarray, out_dtype: str = "float16") -> np.ndarray:
    """Output array -> float64 (bf16 held as raw uint16 bits is decoded)."""
    if c.dtype == np.uint16 and out_dtype_name(out_dtype) == "bfloat16":
        return (c.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return c.astype(np.float64)


def round_to(x: np.ndarray, out_dtype: str = "float16") -> np.ndarray:
    """float64 -> the nearest out_dtype value (ties to even, one rounding), returned as float64."""
    name = out_dtype_name(out_dtype)
    x = np.asarray(x, dtype=np.float64)
    if name in ("float16", "float32"):
        with np.errstate(over="ignore"):  # overflow to inf is the rounding
            return x.astype(name).astype(np.float64)  # NumPy rounds double -> half / float directly
    # bfloat16: 8 significant bits; subnormal quantum 2^-133; overflow to inf. (Casting through
    # float32 would round twice.)
    with np.errstate(over="ignore", invalid="ignore"):
        _, e = np.frexp(x)
        e = np.maximum(e, -125)
        q = np.ldexp(np.rint(np.ldexp(x, 8 - e)), e - 8)
        bf16_max = float.fromhex("0x1.fep127")
        return np.where(np.isfinite(x) & (np.abs(q) > bf16_max), np.copysign(np.inf, x), q)
