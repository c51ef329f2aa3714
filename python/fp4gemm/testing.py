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


# ---- MoE (fp4gemm.moe) ---------------------------------------------------------------------------

ROUTINGS = ("uniform", "skewed", "balanced", "one-hot", "most-empty")


def random_topk(rng: np.random.Generator, tokens: int, experts: int, topk: int, routing: str = "uniform") -> np.ndarray:
    """[tokens, topk] distinct expert ids per token. uniform: random experts; skewed: Zipf-like
    popularity (a few experts get most rows); balanced: round robin (equal counts); one-hot: every
    token picks experts 0..topk-1 (all rows to one expert when topk = 1); most-empty: ids drawn
    from the first max(topk, E/16) experts only."""
    if not 1 <= topk <= experts:
        raise ValueError(f"topk must be in [1, experts], got {topk} for {experts} experts")
    if routing == "balanced":
        return ((np.arange(tokens)[:, None] * topk + np.arange(topk)[None, :]) % experts).astype(np.int64)
    if routing == "one-hot":
        return np.tile(np.arange(topk, dtype=np.int64), (tokens, 1))
    pool = experts
    p = None
    if routing == "skewed":
        w = 1.0 / np.arange(1, experts + 1) ** 1.2
        p = rng.permutation(w / w.sum())
    elif routing == "most-empty":
        pool = max(topk, experts // 16)
    elif routing != "uniform":
        raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
    return np.stack([rng.choice(pool, topk, replace=False, p=p) for _ in range(tokens)]).astype(np.int64)


@dataclass
class MoeData:
    """Host arrays of one MoE problem in the layouts fp4gemm.moe takes.

    contiguous: a holds the `tokens` unsorted token rows, gather[r] the token of sorted row r and
    offsets the expert boundaries (routed rows = tokens * topk = capacity). masked: a is
    [E, capacity, ...] and counts [E] the rows each expert slot holds (gather / offsets None)."""

    w: np.ndarray                  # uint8 [E, N, K/2]
    w_scales: np.ndarray           # [E, N, K/vec] (linear) or [E, blocked bytes] (blocked)
    w_scales_linear: np.ndarray    # [E, N, K/vec]
    a: np.ndarray                  # FP4 uint8 [T, K/2] / bf16 [T, K] (ml_dtypes); masked: [E, cap, ...]
    a_scales: Optional[np.ndarray]  # linear, rows like a; None for bf16 activations
    format: str = "nvfp4"
    scale_layout: str = "blocked"
    activation: str = "fp4"
    layout: str = "contiguous"
    capacity: int = 0
    offsets: Optional[np.ndarray] = None  # int32 [E+1]
    gather: Optional[np.ndarray] = None   # int32 [rows]
    counts: Optional[np.ndarray] = None   # int32 [E]

    @property
    def experts(self) -> int:
        return self.w.shape[0]

    def output(self, out_dtype: str = "bfloat16") -> np.ndarray:
        """An output prefilled with NaN (raw 0xFFFF for raw bf16), so unwritten rows show."""
        dtype = _numpy_dtype(out_dtype_name(out_dtype))
        fill = 0xFFFF if dtype == np.uint16 else np.nan
        n = self.w.shape[1]
        shape = (self.experts, self.capacity, n) if self.layout == "masked" else (self.capacity, n)
        return np.full(shape, fill, dtype=dtype)

    def reference(self, alpha=None) -> np.ndarray:
        """float64 [rows, N] (masked: [E * capacity, N]), NaN in rows no expert owns:
        alpha[e] * dq(A[src(r)]) @ dq(W[e]).T, dequantised with fp4gemm.dequantize and multiplied by
        NumPy, independently of the C++ reference's loop."""
        e_count, n = self.experts, self.w.shape[1]
        if self.activation == "fp4":
            a2 = self.a.reshape(-1, self.a.shape[-1])
            da = formats.dequantize(a2, self.a_scales.reshape(a2.shape[0], -1), self.format).astype(np.float64)
        else:
            da = self.a.reshape(-1, self.a.shape[-1]).astype(np.float64)
        rows = e_count * self.capacity if self.layout == "masked" else self.capacity
        out = np.full((rows, n), np.nan)
        for e in range(e_count):
            if self.layout == "masked":
                lo, hi = e * self.capacity, e * self.capacity + int(self.counts[e])
            else:
                lo, hi = int(self.offsets[e]), int(self.offsets[e + 1])
            if hi == lo:
                continue
            src = self.gather[lo:hi] if self.gather is not None else np.arange(lo, hi)
            dw = formats.dequantize(self.w[e], self.w_scales_linear[e], self.format).astype(np.float64)
            scale = 1.0 if alpha is None else float(np.float32(alpha[e] if np.ndim(alpha) else alpha))
            out[lo:hi] = (da[src] @ dw.T) * scale
        return out


def _random_bf16(rng: np.random.Generator, shape, values: str) -> np.ndarray:
    import ml_dtypes

    if values == "gpumode":  # {0, +-0.5, +-1, +-1.5}: every partial sum exact
        x = rng.integers(-3, 4, size=shape).astype(np.float32) * 0.5
    else:
        x = (rng.standard_normal(shape) * np.exp2(rng.integers(-8, 8, size=shape))).astype(np.float32)
    return x.astype(ml_dtypes.bfloat16)


def random_moe(experts: int, n: int, k: int, tokens: int, topk: int, format: str = "nvfp4",
               scale_layout: str = "blocked", activation: str = "fp4", layout: str = "contiguous",
               routing: str = "uniform", values: str = "gpumode", seed: int = 0,
               counts: Optional[Sequence[int]] = None, capacity: Optional[int] = None) -> MoeData:
    """A random MoE problem: weights, activations and a top-k routing of `tokens` tokens.

    contiguous: the routing is aligned (fp4gemm.moe.align_routing) into offsets and a gather index;
    capacity = tokens * topk. masked: `counts` rows per expert (random in [0, capacity] when None;
    capacity defaults to tokens), `tokens` and `topk` unused. values: 'gpumode' (exact sums) or
    'full' (all nibbles, wide scale ranges). bf16 activations need ml_dtypes.
    """
    from .moe import align_routing

    rng = np.random.default_rng(seed)
    vec = formats.scale_block_size(format)
    w = np.stack([_random_packed(rng, n, k, values) for _ in range(experts)])
    ws_lin = np.stack([_random_scales(rng, n, k // vec, format, values) for _ in range(experts)])
    if scale_layout == "linear":
        ws = ws_lin
    else:
        ws = np.stack([formats.linear_to_blocked(s) for s in ws_lin])
    if layout == "masked":
        cap = capacity if capacity is not None else tokens
        cnt = (np.asarray(counts, dtype=np.int32) if counts is not None
               else rng.integers(0, cap + 1, size=experts).astype(np.int32))
        a_rows, extra = experts * cap, dict(counts=cnt, capacity=cap)
    else:
        ids = random_topk(rng, tokens, experts, topk, routing)
        offsets, gather, _ = align_routing(ids, experts)
        a_rows, extra = tokens, dict(offsets=offsets, gather=gather, capacity=tokens * topk)
    if activation == "fp4":
        a = _random_packed(rng, a_rows, k, values)
        a_scales = _random_scales(rng, a_rows, k // vec, format, values)
    else:
        a, a_scales = _random_bf16(rng, (a_rows, k), values), None
    if layout == "masked":
        a = a.reshape(experts, extra["capacity"], -1)
        a_scales = None if a_scales is None else a_scales.reshape(experts, extra["capacity"], -1)
    return MoeData(w=w, w_scales=ws, w_scales_linear=ws_lin, a=a, a_scales=a_scales, format=format,
                   scale_layout=scale_layout, activation=activation, layout=layout, **extra)
