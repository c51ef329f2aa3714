"""Shared helpers of the random call-sequence tier (test_random_sequences.py) and the API surface
test (test_api_surface.py): random MoE weight sets and routings on the host, and references that
do not go through the code under test:

* ``dq`` / ``to_blocked``: the e2m1 / E4M3 / UE8M0 decoders and the blocked scale layout written
  out from SPEC §1-2 in NumPy (not fp4gemm.dequantize / linear_to_blocked);
* ``gemm_reference``: the MoE GEMM in float64 from those decoders (exact on the values drawn here:
  every product has <= 14 significant bits and the exponents span little, so every float64 sum is
  exact in any order and the host reference is bit for bit its rounding);
* ``glu_bound``: the GLU epilogue's FP32 bound against a float64 evaluation;
* ``compose_layer``: the expert layer as a composition of public pieces -- fresh host
  ``moe.MoeGemm`` runs (GEMM1 with the GLU epilogue, GEMM2), ``fp4gemm.quantize`` of the tokens and
  of the intermediate, and ``ep.combine`` -- which the host MoeLayer must equal bit for bit;
* ``assert_layer_float64``: the layer in float64 with NumPy (quantisation steps by
  fp4gemm.quantize; products, activation and combine in float64): a second, independent check,
  element-wise -- the intermediate within the FP32 epilogue's bound, the output within a bf16 ulp
  of each term and of the sum;
* ``Draw``: draws from hypothesis (``st.data()``) or, where hypothesis is not installed, from a
  seeded NumPy generator, so the sequences run either way.

Arrays are NumPy; ml_dtypes provides bfloat16.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

import fp4gemm
from fp4gemm import ep, moe

try:
    import ml_dtypes

    BF16 = ml_dtypes.bfloat16
except ImportError:  # the test modules skip, saying so
    ml_dtypes = None
    BF16 = None

# ---- counters (printed at the end of the tier, for the long runs' reports) ------------------------

COUNTS: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
DRIVER: Dict[str, str] = {}


def count(tier: str, what: str, n: int = 1) -> None:
    COUNTS[tier][what] += n


def summary(tier: str) -> str:
    c = COUNTS[tier]
    parts = [f"{c['sequences']} sequences", f"{c['calls']} library calls", f"{c['checked']} results checked"]
    parts += [f"{k} {v}" for k, v in sorted(c.items()) if k not in ("sequences", "calls", "checked")]
    driver = f" [driver: {DRIVER[tier]}]" if tier in DRIVER else ""
    return f"fp4gemm random sequences ({tier}): " + ", ".join(parts) + driver


# ---- draws -------------------------------------------------------------------------------------------


class RngDraw:
    """Draws from a seeded NumPy generator (the driver where hypothesis is not installed)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def integer(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def choice(self, seq: Sequence[Any]) -> Any:
        seq = list(seq)
        return seq[int(self.rng.integers(0, len(seq)))]

    def boolean(self) -> bool:
        return bool(self.rng.integers(0, 2))


class HypothesisDraw:
    """Draws from hypothesis' ``st.data()`` (so failing sequences shrink and replay)."""

    def __init__(self, data, st):
        self.data, self.st = data, st

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))

    def choice(self, seq: Sequence[Any]) -> Any:
        return self.data.draw(self.st.sampled_from(list(seq)))

    def boolean(self) -> bool:
        return self.data.draw(self.st.booleans())


# ---- formats from SPEC §1-2, written out here ------------------------------------------------------

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)
NIBBLES_GPUMODE = np.array([0x0, 0x1, 0x9, 0x2, 0xA, 0x3, 0xB], np.uint8)  # 0, +-0.5, +-1, +-1.5


def vec_of(fmt: str) -> int:
    return 16 if fmt == "nvfp4" else 32


def decode_scale_codes(codes: np.ndarray, fmt: str) -> np.ndarray:
    c = codes.astype(np.int64)
    if fmt == "nvfp4":  # E4M3 (fn): no infinities, 0x7F / 0xFF NaN
        s = np.where(c & 0x80, -1.0, 1.0)
        e, m = (c >> 3) & 0xF, c & 7
        v = np.where(e == 0, m * 2.0**-9, (8 + m) * np.exp2(e - 10.0))
        return np.where((e == 15) & (m == 7), np.nan, s * v)
    return np.where(c == 255, np.nan, np.exp2(c - 127.0))  # UE8M0


def unpack(packed: np.ndarray) -> np.ndarray:
    p = np.asarray(packed, np.uint8)
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), np.uint8)
    out[..., 0::2] = p & 0xF  # even k in the low nibble
    out[..., 1::2] = p >> 4
    return out


def dq(packed: np.ndarray, scales: np.ndarray, fmt: str) -> np.ndarray:
    """float64 [..., K] of packed e2m1 [..., K/2] with linear scales [..., K/vec] (exact)."""
    v = E2M1[unpack(packed)]
    s = decode_scale_codes(np.asarray(scales, np.uint8), fmt)
    return v * np.repeat(s, vec_of(fmt), axis=-1)


def to_blocked(lin: np.ndarray) -> np.ndarray:
    """Linear [rows, cols] scale codes -> the blocked layout (SPEC §2), flat, padding 0."""
    rows, cols = lin.shape
    prow, pcol = -(-rows // 128) * 128, -(-cols // 4) * 4
    out = np.zeros(prow * pcol, np.uint8)
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    off = ((r // 128) * (pcol // 4) + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + (c % 4)
    out[off] = lin
    return out


def blocked_experts(lin: np.ndarray) -> np.ndarray:
    """[E, rows, cols] -> [E, blocked bytes]."""
    return np.stack([to_blocked(lin[e]) for e in range(lin.shape[0])])


def bf16_bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint16)


# ---- random data ------------------------------------------------------------------------------------


def rand_fp4(rng: np.random.Generator, shape, values: str) -> np.ndarray:
    if values == "gpumode":
        return (NIBBLES_GPUMODE[rng.integers(0, 7, shape)] | (NIBBLES_GPUMODE[rng.integers(0, 7, shape)] << 4)).astype(
            np.uint8)
    return rng.integers(0, 256, shape, dtype=np.uint8)  # all 16 nibbles


def rand_scales(rng: np.random.Generator, shape, fmt: str, values: str) -> np.ndarray:
    if values == "gpumode":  # scales {1, 2}
        codes = np.array([0x38, 0x40] if fmt == "nvfp4" else [127, 128], np.uint8)
        return codes[rng.integers(0, 2, shape)]
    if fmt == "nvfp4":  # E4M3 0.25 .. 4 (every code between: 3-bit mantissas)
        return rng.integers(0x28, 0x49, shape, dtype=np.uint8)
    return rng.integers(124, 131, shape, dtype=np.uint8)  # UE8M0 2^-3 .. 2^3


def rand_bf16(rng: np.random.Generator, shape, values: str) -> np.ndarray:
    if values == "gpumode":
        x = rng.integers(-3, 4, shape).astype(np.float32) * 0.5  # {0, +-0.5, +-1, +-1.5}
    else:
        x = (rng.standard_normal(shape) * np.exp2(rng.integers(-3, 2, shape))).astype(np.float32)
    return x.astype(BF16)


@dataclasses.dataclass
class Config:
    fmt: str
    act: str  # act_format: nvfp4 / mxfp4 / bf16
    activation: str  # silu / swigluoai
    gate_up: str  # stacked / interleaved
    scale_layout: str  # linear / blocked (the live arrays'; the truth is always linear)
    e: int
    h: int
    i: int
    values: str  # gpumode / wide
    a1: float = 1.0
    a2: float = 1.0
    bias: str = "none"  # expert biases (gpt-oss's): none / bf16 / f32

    @property
    def gemm_activation(self) -> str:
        return "bf16" if self.act == "bf16" else "fp4"

    def layer_kwargs(self) -> dict:
        return dict(act_format=self.act, activation=self.activation, gate_up=self.gate_up,
                    scale_layout=self.scale_layout, a1_scale=self.a1, a2_scale=self.a2)

    def text(self) -> str:
        return (f"{self.fmt}/{self.act} {self.activation} {self.gate_up} {self.scale_layout} E{self.e} H{self.h} "
                f"I{self.i} {self.values} a1={self.a1} a2={self.a2} bias={self.bias}")


def draw_config(d, gpu: bool) -> Config:
    """A layer configuration within the library's rules (H, I multiples of 32; bf16 activations and
    MXFP4 activations on MXFP4 weights; global scales only for NVFP4 W4A4)."""
    act = d.choice(["nvfp4", "mxfp4", "bf16"])
    fmt = "nvfp4" if act == "nvfp4" else "mxfp4"
    activation = d.choice(["silu", "swigluoai"])
    gate_up = d.choice(["stacked", "interleaved"])
    # GPU: blocked scales (read at every run; linear ones are converted at plan time, documented)
    layout = "blocked" if gpu else d.choice(["linear", "blocked"])
    e = d.integer(1, 8)
    h = d.choice([64, 128, 256])
    i = d.choice([64, 128])
    values = "gpumode" if gpu else d.choice(["gpumode", "wide"])
    a1 = a2 = 1.0
    if act == "nvfp4":
        a1 = d.choice([1.0, 0.5] if gpu else [1.0, 0.5, 0.25])
        a2 = d.choice([1.0, 0.25, 0.125] if gpu else [1.0, 0.5, 0.125])
    bias = d.choice(["none", "none", "bf16", "f32"])
    return Config(fmt, act, activation, gate_up, layout, e, h, i, values, a1, a2, bias)


@dataclasses.dataclass
class Truth:
    """The values a weight set holds (host copies, linear scales), updated in step with the live
    arrays the library reads."""

    w13: np.ndarray  # uint8 [E, 2I, H/2]
    s13: np.ndarray  # linear codes [E, 2I, H/vec]
    w2: np.ndarray  # uint8 [E, H, I/2]
    s2: np.ndarray  # linear codes [E, H, I/vec]
    w13_alpha: Optional[np.ndarray] = None  # float32 [E]
    w13_alpha_up: Optional[np.ndarray] = None
    w2_alpha: Optional[np.ndarray] = None
    w13_bias: Optional[np.ndarray] = None  # float32 [E, 2I] (bf16 values), in w13's row order
    w2_bias: Optional[np.ndarray] = None  # float32 [E, H]

    def copy(self) -> "Truth":
        return Truth(*[None if a is None else a.copy() for a in dataclasses.astuple(self)])


ALPHAS_HOST = np.array([0.5, 0.75, 1.0, 1.25, 2.0], np.float32)
ALPHAS_GPU = np.array([0.5, 1.0, 2.0, 4.0], np.float32)  # powers of two: every product exact


def random_truth(rng: np.random.Generator, c: Config, alphas: str, gpu: bool) -> Truth:
    """alphas: 'none', 'gate' (w13_alpha, w2_alpha) or 'all' (w13_alpha_up too)."""
    vec = vec_of(c.fmt)
    t = Truth(rand_fp4(rng, (c.e, 2 * c.i, c.h // 2), c.values),
              rand_scales(rng, (c.e, 2 * c.i, c.h // vec), c.fmt, c.values),
              rand_fp4(rng, (c.e, c.h, c.i // 2), c.values),
              rand_scales(rng, (c.e, c.h, c.i // vec), c.fmt, c.values))
    pool = ALPHAS_GPU if gpu else ALPHAS_HOST
    if alphas != "none":
        t.w13_alpha = pool[rng.integers(0, len(pool), c.e)]
        t.w2_alpha = pool[rng.integers(0, len(pool), c.e)]
        if alphas == "all":
            t.w13_alpha_up = pool[rng.integers(0, len(pool), c.e)]
    if c.bias != "none":
        t.w13_bias, t.w2_bias = random_bias(rng, (c.e, 2 * c.i)), random_bias(rng, (c.e, c.h))
    return t


def random_bias(rng: np.random.Generator, shape) -> np.ndarray:
    """Bias values of either sign and magnitudes 2^-4 .. 2^6 (some of them outweigh the products they
    are added to, so that a bias lost or misplaced shows), bf16 values (the bf16 and float32 arrays
    hold the same), float32."""
    mag = np.exp2(rng.uniform(-4.0, 6.0, shape)) * rng.choice([-1.0, 1.0], shape)
    return mag.astype(np.float32).astype(BF16).astype(np.float32)


BIASES = ("w13_bias", "w2_bias")


def bias_arrays(c: Config, t: Truth):
    """The truth's biases as the library gets them (bf16 or float32 copies), or (None, None)."""
    if c.bias == "none" or t.w13_bias is None:
        return None, None
    dt = BF16 if c.bias == "bf16" else np.float32
    return np.ascontiguousarray(t.w13_bias.astype(dt)), np.ascontiguousarray(t.w2_bias.astype(dt))


def live_scales(lin: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(lin) if layout == "linear" else blocked_experts(lin)


def random_tokens(rng: np.random.Generator, t: int, h: int, values: str) -> np.ndarray:
    x = rand_bf16(rng, (t, h), values)
    if t and rng.integers(0, 4) == 0:
        x[rng.integers(0, t)] = 0  # a zero token
    return x


ROUTINGS = ("uniform", "hot", "few", "duplicates", "dropped", "all-dropped")


def random_routing(rng: np.random.Generator, t: int, e: int, k: int, kind: str, ids_dtype, weights_bf16: bool):
    """topk_ids [t, k] of ids_dtype and topk_weights [t, k] (float32, or bf16). kind: uniform
    (distinct experts per token), hot (slot 0 always one expert), few (ids from 1 or 2 experts: the
    others empty), duplicates (a token may pick an expert twice), dropped (some ids outside [0, E):
    -1, E, huge), all-dropped."""
    if kind == "hot":
        hot = int(rng.integers(0, e))
        others = np.array([x for x in range(e) if x != hot], np.int64)
        ids = np.array([[hot] + list(rng.permutation(others)[: k - 1]) for _ in range(t)], np.int64).reshape(t, k)
    elif kind == "uniform" or kind == "dropped":
        ids = np.array([rng.permutation(e)[:k] for _ in range(t)], np.int64).reshape(t, k)
        if kind == "dropped" and t:
            big = np.iinfo(ids_dtype).max
            bad = np.array([-1, e, e + 5, big, -big - 1 if ids_dtype == np.int32 else -(1 << 40)], np.int64)
            mask = rng.integers(0, 3, (t, k)) == 0
            ids[mask] = bad[rng.integers(0, len(bad), int(mask.sum()))]
    elif kind == "few":
        pool = rng.permutation(e)[: int(rng.integers(1, min(e, 2) + 1))]
        ids = pool[rng.integers(0, len(pool), (t, k))].astype(np.int64)
    elif kind == "duplicates":
        ids = rng.integers(0, e, (t, k)).astype(np.int64)
    else:  # all-dropped
        ids = np.where(rng.integers(0, 2, (t, k)) == 0, -1, e).astype(np.int64)
    wts = rng.uniform(-1.0, 1.0, (t, k)).astype(np.float32)
    if t and rng.integers(0, 4) == 0:
        wts[rng.integers(0, t)] = 0.0
    if weights_bf16:
        wts = wts.astype(BF16)
    return np.ascontiguousarray(ids.astype(ids_dtype)), np.ascontiguousarray(wts)


# ---- references ----------------------------------------------------------------------------------------


def folded_alphas(c: Config, t: Truth):
    """The per-expert float32 alphas of the layer's two GEMMs (the global activation scales folded
    in, as fp4gemm::MoeLayer documents: fl32(w13_alpha * a1_scale), ...)."""
    a1 = np.float32(c.a1 if c.act == "nvfp4" else 1.0)
    a2 = np.float32(c.a2 if c.act == "nvfp4" else 1.0)
    one = np.ones(c.e, np.float32)
    g = t.w13_alpha if t.w13_alpha is not None else one
    up = t.w13_alpha_up if t.w13_alpha_up is not None else g
    down = t.w2_alpha if t.w2_alpha is not None else one
    return (g * a1).astype(np.float32), (up * a1).astype(np.float32), (down * a2).astype(np.float32)


def compose_layer(c: Config, t: Truth, x, ids: np.ndarray, wts: np.ndarray, hidden_fp4=None, with_inter=False):
    """The expert layer as the composition of public host pieces on the truth arrays: the routing
    sorted here (stable, by expert then (token, slot)), the tokens quantised by fp4gemm.quantize
    (global scale a1), GEMM1 + GLU by a fresh moe.MoeGemm, the intermediate quantised (a2), GEMM2 by
    a fresh moe.MoeGemm, the rows put back in (token, slot) order and ep.combine. bf16 [T, H]; with
    with_inter also GEMM1's bf16 intermediate per (token, slot), float64 [T * k, I] (NaN: no row)."""
    tt, k = ids.shape
    out = np.full((tt, c.h), np.nan, BF16)
    inter_pairs = np.full((tt * k, c.i), np.nan)
    if tt == 0:
        return (out, inter_pairs) if with_inter else out
    flat = ids.reshape(-1).astype(np.int64)
    valid = (flat >= 0) & (flat < c.e)
    order = np.argsort(np.where(valid, flat, c.e), kind="stable")[: int(valid.sum())]
    rows = len(order)
    y_pairs = np.zeros((tt * k, c.h), BF16)
    if rows:
        counts = np.bincount(flat[order], minlength=c.e)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        gather = (order // k).astype(np.int32)
        al1, al1u, al2 = folded_alphas(c, t)
        a1 = c.a1 if c.act == "nvfp4" else 1.0
        a2 = c.a2 if c.act == "nvfp4" else 1.0
        if c.act == "bf16":
            a, sa = np.ascontiguousarray(x), None
        elif hidden_fp4 is not None:
            a, sa = hidden_fp4
        else:
            a, sa = fp4gemm.quantize(np.asarray(x).astype(np.float32), c.fmt, global_scale=a1)
        g1 = moe.MoeGemm(t.w13, t.s13, format=c.fmt, scale_layout="linear", out_dtype="bfloat16",
                         activation=c.gemm_activation, capacity=rows, alpha=al1, epilogue=c.activation,
                         gate_up=c.gate_up, alpha_up=al1u)
        inter = g1.run(a, sa, offsets, gather_index=gather, out=np.full((rows, c.i), np.nan, BF16))
        if c.act == "bf16":
            b, sb = inter, None
        else:
            b, sb = fp4gemm.quantize(inter.astype(np.float32), c.fmt, global_scale=a2)
        g2 = moe.MoeGemm(t.w2, t.s2, format=c.fmt, scale_layout="linear", out_dtype="bfloat16",
                         activation=c.gemm_activation, capacity=rows, alpha=al2)
        y = g2.run(b, sb, offsets, out=np.full((rows, c.h), np.nan, BF16))
        y_pairs[order] = y
        inter_pairs[order] = inter.astype(np.float64)
    out = ep.combine(y_pairs, wts, ids, c.e, out=out)
    return (out, inter_pairs) if with_inter else out


def _act64(activation: str, g: np.ndarray, u: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        if activation == "silu":
            return g / (1 + np.exp(-g)) * u
        g, u = np.minimum(g, 7.0), np.clip(u, -7.0, 7.0)
        return g / (1 + np.exp(-1.702 * g)) * (u + 1)


U32 = 2.0**-24


def glu_tolerance(g, u, sg, su, k, want, mant):
    """|got - want| allowed for a GLU output rounded to a type of `mant` mantissa bits: one ulp of
    it, plus the FP32 sums' error bound (k terms; sg, su: the sums of |terms|, alpha included)
    carried through the activation (|d act/d g| <= 1.5 (|u| + 1), |d act/d u| <= |g| + 1), plus 8
    FP32 ulps of the activation's own evaluation."""
    eg, eu = 2 * (k + 4) * U32 * sg, 2 * (k + 4) * U32 * su
    err = 1.5 * (np.abs(u) + 1) * eg + (np.abs(g) + 1) * eu
    return 2.0**-mant * (np.abs(want) + err) + err + 8 * U32 * np.abs(want) + 1e-37


def _float64_inputs(c: Config, t: Truth, x, wts: np.ndarray, hidden_fp4=None):
    """The float64 layers' inputs: a2, the tokens as GEMM1 reads them (W4A4: quantised by
    fp4gemm.quantize's rule, global scale a1), the per-expert alphas (gate, up, down) and the
    routing weights."""
    a1 = c.a1 if c.act == "nvfp4" else 1.0
    a2 = c.a2 if c.act == "nvfp4" else 1.0
    if c.act == "bf16":
        xq = np.asarray(x).astype(np.float64)
    else:
        q, s = hidden_fp4 if hidden_fp4 is not None else fp4gemm.quantize(np.asarray(x).astype(np.float32), c.fmt,
                                                                          global_scale=a1)
        xq = dq(q, s, c.fmt) * a1
    one = np.ones(c.e)
    ga = t.w13_alpha.astype(np.float64) if t.w13_alpha is not None else one
    ua = t.w13_alpha_up.astype(np.float64) if t.w13_alpha_up is not None else ga
    da = t.w2_alpha.astype(np.float64) if t.w2_alpha is not None else one
    return a2, xq, ga, ua, da, np.asarray(wts).astype(np.float64)


def assert_layer_float64(c: Config, t: Truth, x, ids: np.ndarray, wts: np.ndarray, got: np.ndarray, inter_pairs,
                         what: str, hidden_fp4=None) -> None:
    """The layer in float64 with NumPy, an independent check (decoders from SPEC; float64 products,
    activation and combine; the quantisation steps are fp4gemm.quantize's rule, checked elsewhere
    against the encoders), ELEMENT-WISE:

    1. each (token, slot)'s bf16 intermediate (``inter_pairs``: GEMM1 + GLU as the composition
       computed it, which the layer matched bit for bit) within the FP32 epilogue's bound of the
       float64 activation (glu_tolerance);
    2. from that intermediate on (so that a legitimate one-ulp difference of the FP32 activation
       cannot move a quantisation scale of the next step), GEMM2 in float64, each expert row rounded
       to bf16, the combine in float64: the output within one bf16 ulp of each term and of the sum,
       plus the FP32 combine's error."""
    tt, k = ids.shape
    g_out = np.asarray(got).astype(np.float64)
    if tt == 0:
        return
    a2, xq, ga, ua, da, wf = _float64_inputs(c, t, x, wts, hidden_fp4)
    want = np.zeros((tt, c.h))
    slack = np.zeros((tt, c.h))  # sum_j |w_j| * one ulp of y_j
    mag = np.zeros((tt, c.h))  # sum_j |w_j y_j|
    for e in range(c.e):
        tok, slot = np.nonzero(ids == e)
        if len(tok) == 0:
            continue
        w13 = dq(t.w13[e], t.s13[e], c.fmt)
        gw, uw = (w13[0::2], w13[1::2]) if c.gate_up == "interleaved" else (w13[: c.i], w13[c.i:])
        xs = xq[tok]
        g, u = ga[e] * (xs @ gw.T), ua[e] * (xs @ uw.T)
        sg, su = abs(ga[e]) * (np.abs(xs) @ np.abs(gw).T), abs(ua[e]) * (np.abs(xs) @ np.abs(uw).T)
        mid64 = _act64(c.activation, g, u)
        ref = inter_pairs[tok * k + slot]
        bad = ~(np.abs(ref - mid64) <= glu_tolerance(g, u, sg, su, c.h, mid64, 7))
        assert not bad.any(), (f"{what}: expert {e}: {int(bad.sum())} elements of the intermediate (GEMM1 + "
                               f"{c.activation}) outside the FP32 bound of the float64 one; first "
                               f"{np.argwhere(bad)[:2].tolist()}: {ref[bad][:2]} vs {mid64[bad][:2]}")
        if c.act != "bf16":
            q, s = fp4gemm.quantize(ref.astype(np.float32), c.fmt, global_scale=a2)
            mid = dq(q, s, c.fmt) * a2
        else:
            mid = ref
        y = (mid @ dq(t.w2[e], t.s2[e], c.fmt).T) * da[e]
        y = y.astype(np.float32).astype(BF16).astype(np.float64)
        w = wf[tok, slot][:, None]
        np.add.at(want, tok, w * y)
        np.add.at(slack, tok, np.abs(w) * 2.0**-7 * np.abs(y))
        np.add.at(mag, tok, np.abs(w * y))
    tol = slack + 2.0**-7 * np.abs(want) + (k + 2) * U32 * mag + 1e-37
    bad = ~(np.abs(g_out - want) <= tol)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} output elements outside the bound of the float64 "
                           f"layer; first {np.argwhere(bad)[:2].tolist()}: {g_out[bad][:2]} vs {want[bad][:2]}")


def assert_biased_layer_float64(c: Config, t: Truth, x, ids: np.ndarray, wts: np.ndarray, got: np.ndarray, what: str,
                                hidden_fp4=None) -> None:
    """A layer with expert biases against the float64 layer (biases added before the activation
    and to each pair's y before the combine; the intermediate rounded to bf16 and, W4A4, quantised
    by fp4gemm.quantize's rule as the layer does), in relative L2 over the output -- the
    composition of host pieces has no bias to be compared with bit for bit. The GPU tier compares
    the device layer with the host layer on the same biases."""
    tt, k = ids.shape
    if tt == 0:
        return
    a2, xq, ga, ua, da, wf = _float64_inputs(c, t, x, wts, hidden_fp4)
    want = np.zeros((tt, c.h))
    for e in range(c.e):
        tok, slot = np.nonzero(ids == e)
        if len(tok) == 0:
            continue
        w13 = dq(t.w13[e], t.s13[e], c.fmt)
        b = t.w13_bias[e].astype(np.float64)
        if c.gate_up == "interleaved":
            gw, uw, bg, bu = w13[0::2], w13[1::2], b[0::2], b[1::2]
        else:
            gw, uw, bg, bu = w13[: c.i], w13[c.i:], b[: c.i], b[c.i:]
        xs = xq[tok]
        mid = _act64(c.activation, ga[e] * (xs @ gw.T) + bg, ua[e] * (xs @ uw.T) + bu)
        mid = mid.astype(np.float32).astype(BF16).astype(np.float64)
        if c.act != "bf16":
            q, s = fp4gemm.quantize(mid.astype(np.float32), c.fmt, global_scale=a2)
            mid = dq(q, s, c.fmt) * a2
        y = ((mid @ dq(t.w2[e], t.s2[e], c.fmt).T) * da[e]).astype(np.float32).astype(BF16).astype(np.float64)
        np.add.at(want, tok, wf[tok, slot][:, None] * (y + t.w2_bias[e].astype(np.float64)))
    g = np.asarray(got).astype(np.float64)
    assert np.isfinite(g).all(), f"{what}: non-finite output"
    r = rel_error(g, want)
    bound = 2.0**-6 if c.act == "bf16" else 2.0**-3  # (W4A4: a one-ulp intermediate may move a block's scale)
    assert r < bound, f"{what}: relative error {r:.3g} against the float64 layer with biases (bound {bound:.3g})"


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


# ---- the MoE GEMM: random runs and references ---------------------------------------------------------


@dataclasses.dataclass
class GemmRun:
    """One run's arrays (host) and which output row belongs to whom."""

    a: np.ndarray
    a_scales: Optional[np.ndarray]
    offsets: Optional[np.ndarray]
    counts: Optional[np.ndarray]
    gather: Optional[np.ndarray]
    owner: np.ndarray  # [out rows] expert or -1
    src: np.ndarray  # [out rows] row of a (flattened) it reads
    out_shape: tuple


def random_gemm_run(rng: np.random.Generator, e: int, n: int, k: int, fmt: str, activation: str, layout: str,
                    capacity: int, values: str, kind: str, use_gather: bool, extra_rows: bool = True) -> GemmRun:
    """kind: spread (random counts), hot (every row to one expert), empty (no rows), partial
    (offsets[0] > 0 and offsets[E] < capacity). extra_rows: a and the gather index may hold more
    rows than the capacity (MoeGemm.run; not moe.grouped_gemm, whose capacity is their length)."""
    vec = vec_of(fmt)
    if layout == "masked":
        if kind == "empty":
            counts = np.zeros(e, np.int32)
        elif kind == "hot":
            counts = np.zeros(e, np.int32)
            counts[rng.integers(0, e)] = capacity
        else:
            counts = rng.integers(0, capacity + 1, e).astype(np.int32)
        a_rows = e * capacity
        owner = np.full(a_rows, -1)
        for x in range(e):
            owner[x * capacity: x * capacity + counts[x]] = x
        src = np.arange(a_rows)
        offsets = gather = None
        out_shape = (e, capacity, n)
    else:
        if kind == "empty":
            cnt = np.zeros(e, np.int64)
        elif kind == "hot":
            cnt = np.zeros(e, np.int64)
            cnt[rng.integers(0, e)] = capacity
        else:
            total = int(rng.integers(0, capacity + 1))
            cuts = np.sort(rng.integers(0, total + 1, e - 1))
            cnt = np.diff(np.concatenate([[0], cuts, [total]]))
        start = int(rng.integers(0, capacity - cnt.sum() + 1)) if kind == "partial" else 0
        offsets = (start + np.concatenate([[0], np.cumsum(cnt)])).astype(np.int32)
        owner = np.full(capacity, -1)
        for x in range(e):
            owner[offsets[x]: offsets[x + 1]] = x
        if use_gather:
            tokens = int(rng.integers(1, 9))
            gather = rng.integers(0, tokens, capacity + int(rng.integers(0, 3) if extra_rows else 0)).astype(np.int32)
            a_rows, src = tokens, gather[:capacity].astype(np.int64)
        else:
            gather = None
            a_rows, src = capacity + int(rng.integers(0, 3) if extra_rows else 0), np.arange(capacity)
        counts = None
        out_shape = (capacity, n)
    if activation == "fp4":
        a = rand_fp4(rng, (a_rows, k // 2), values)
        sa = rand_scales(rng, (a_rows, k // vec), fmt, values)
    else:
        a, sa = rand_bf16(rng, (a_rows, k), values), None
    if layout == "masked":
        a = a.reshape(e, capacity, -1)
        sa = None if sa is None else sa.reshape(e, capacity, -1)
    return GemmRun(a, sa, offsets, counts, gather, owner, src, out_shape)


def activations64(run: GemmRun, fmt: str) -> np.ndarray:
    a = run.a.reshape(-1, run.a.shape[-1])
    if run.a_scales is None:
        return a.astype(np.float64)
    return dq(a, run.a_scales.reshape(a.shape[0], -1), fmt)


def alpha_vector(alpha, e: int) -> np.ndarray:
    if alpha is None:
        return np.ones(e)
    if np.ndim(alpha) == 0:
        return np.full(e, float(np.float32(alpha)))
    return np.asarray(alpha, np.float32).astype(np.float64)


def gemm_reference(w: np.ndarray, w_lin: np.ndarray, fmt: str, run: GemmRun, alpha) -> np.ndarray:
    """float64 [out rows, N] of the plain MoE GEMM, NaN in rows no expert owns."""
    a = activations64(run, fmt)
    al = alpha_vector(alpha, w.shape[0])
    out = np.full((len(run.owner), w.shape[1]), np.nan)
    for e in range(w.shape[0]):
        rows = np.nonzero(run.owner == e)[0]
        if len(rows):
            out[rows] = (a[run.src[rows]] @ dq(w[e], w_lin[e], fmt).T) * al[e]
    return out


MANT = {"float16": 10, "bfloat16": 7, "float32": 23}


def round_to(x: np.ndarray, out_dtype: str) -> np.ndarray:
    from fp4gemm.testing import round_to as rt

    return rt(x, out_dtype)


def as_f64(out: np.ndarray) -> np.ndarray:
    return np.asarray(out).astype(np.float64)


def assert_gemm_exact(got: np.ndarray, ref: np.ndarray, out_dtype: str, what: str) -> None:
    """Owned rows: bitwise the float64 reference rounded once; the other rows: still NaN."""
    g = as_f64(got).reshape(ref.shape)
    owned = ~np.isnan(ref[:, 0]) if ref.shape[1] else np.zeros(ref.shape[0], bool)
    assert np.isnan(g[~owned]).all(), f"{what}: a row no expert owns was written"
    want = round_to(ref[owned], out_dtype)
    same = (g[owned] == want) | (np.isinf(want) & (g[owned] == want))
    assert same.all(), (f"{what}: {int((~same).sum())} of {same.size} owned elements differ from the float64 "
                        f"reference rounded to {out_dtype}; first at {np.argwhere(~same)[:3].tolist()}")


def glu_bound(w: np.ndarray, w_lin: np.ndarray, fmt: str, run: GemmRun, alpha, alpha_up, activation: str,
              gate_up: str, got: np.ndarray, out_dtype: str, what: str) -> None:
    """The GLU epilogue (FP32 sums, alpha in FP32, the activation in FP32, one rounding) against the
    float64 evaluation: |got - want| <= ulp_out(want) + the FP32 sums' error bound carried through
    the activation (|d act/d g| <= 1.5 (|u| + 1), |d act/d u| <= |g| + 1) + 8 FP32 ulps of want."""
    a = activations64(run, fmt)
    e_count, two_i = w.shape[0], w.shape[1]
    i = two_i // 2
    k = 2 * w.shape[2]
    al = alpha_vector(alpha, e_count)
    au = al if alpha_up is None else alpha_vector(alpha_up, e_count)
    g_all = as_f64(got).reshape(len(run.owner), i)
    owned = run.owner >= 0
    assert np.isnan(g_all[~owned]).all(), f"{what}: a row no expert owns was written"
    for e in range(e_count):
        rows = np.nonzero(run.owner == e)[0]
        if not len(rows):
            continue
        wd = dq(w[e], w_lin[e], fmt)
        gw, uw = (wd[0::2], wd[1::2]) if gate_up == "interleaved" else (wd[:i], wd[i:])
        x = a[run.src[rows]]
        g, u = al[e] * (x @ gw.T), au[e] * (x @ uw.T)
        sg, su = abs(al[e]) * (np.abs(x) @ np.abs(gw).T), abs(au[e]) * (np.abs(x) @ np.abs(uw).T)
        want = _act64(activation, g, u)
        tol = glu_tolerance(g, u, sg, su, k, want, MANT[out_dtype])
        got_e = g_all[rows]
        bad = ~(np.abs(got_e - want) <= tol)
        assert not bad.any(), (f"{what}: expert {e}: {int(bad.sum())} GLU elements outside the FP32 bound; first "
                               f"{np.argwhere(bad)[:2].tolist()}: got {got_e[bad][:2]}, want {want[bad][:2]}")


def host_layer(c: Config, t: Truth, max_tokens: int, topk: int) -> "moe.MoeLayer":
    """The host (NumPy) MoeLayer on copies of the truth (linear scales): the GPU tier's reference."""
    t = t.copy()
    kw = c.layer_kwargs()
    kw["scale_layout"] = "linear"
    b13, b2 = bias_arrays(c, t)
    return moe.MoeLayer(t.w13, t.s13, t.w2, t.s2, max_tokens=max(max_tokens, 1), topk=topk, w13_alpha=t.w13_alpha,
                        w13_alpha_up=t.w13_alpha_up, w2_alpha=t.w2_alpha, w13_bias=b13, w2_bias=b2, **kw)


def host_gemm(t_w: np.ndarray, t_lin: np.ndarray, fmt: str, **kw) -> "moe.MoeGemm":
    return moe.MoeGemm(t_w.copy(), t_lin.copy(), format=fmt, scale_layout="linear", **kw)


def trace_text(trace: List[str]) -> str:
    return "\n".join(f"  {n:3d}. {s}" for n, s in enumerate(trace))


def from_blocked(blocked: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Blocked-layout scale codes (flat, one matrix) -> linear [rows, cols] (the inverse of to_blocked)."""
    prow, pcol = -(-rows // 128) * 128, -(-cols // 4) * 4
    flat = np.asarray(blocked, np.uint8).reshape(-1)
    assert flat.size == prow * pcol, (flat.size, rows, cols)
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    off = ((r // 128) * (pcol // 4) + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + (c % 4)
    return flat[off]
