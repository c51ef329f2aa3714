"""Host tier: expert parallelism (fp4gemm.ep) with W ranks as threads of this process (NumPy arrays,
the layer's host reference path for the local experts): every rank's output equals the
single-process layer's on the same tokens, bit for bit, for world sizes 1, 2 and 4, W4A4 (NVFP4,
global scales, per-expert alphas) and W4A16; ids outside the experts included; the dispatch is
deterministic. The torch.distributed (gloo) version of the same check is in test_ep_torch.py."""

from __future__ import annotations

import numpy as np
import pytest

import fp4gemm
from fp4gemm import ep, moe

from test_moe_layer_host import BF16, _weights


def _global(fmt, e=8, h=64, i=32, seed=0):
    rng = np.random.default_rng(seed)
    w13, s13 = _weights(rng, e, 2 * i, h, fmt)
    w2, s2 = _weights(rng, e, h, i, fmt)
    alphas = (np.linspace(0.5, 2, e).astype(np.float32), np.linspace(2, 0.5, e).astype(np.float32),
              np.full(e, 0.75, np.float32))
    return w13, s13, w2, s2, alphas


def _tokens(rng, t, h, e, k):
    x = (rng.standard_normal((t, h)) * 0.5).astype(BF16)
    ids = np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32)
    if t > 2:
        ids[1, 0] = -1
        ids[2, k - 1] = e  # outside the experts: contributes nothing
    wts = rng.uniform(0.05, 1, (t, k)).astype(np.float32)
    return x, ids, wts


class EpCase:
    """One expert-parallel check: global weights, the layer options, each rank's tokens, and the
    single-process layer the ranks must match (shared with test_ep_torch.py)."""

    def __init__(self, world, act, e=8, h=64, i=32, k=3):
        fmt = "nvfp4" if act == "nvfp4" else "mxfp4"
        self.e, self.h, self.k, self.local = e, h, k, e // world
        self.w13, self.s13, self.w2, self.s2, (self.a13, self.a13u, self.a2) = _global(fmt, e, h, i, seed=world)
        self.kw = dict(act_format=act, scale_layout="linear")
        if act == "nvfp4":
            self.kw.update(a1_scale=0.05, a2_scale=0.02)
        rng = np.random.default_rng(7 + world)
        self.tokens = [_tokens(rng, t, h, e, k) for t in (5, 9, 1, 16)[:world]]

    def rank_weights(self, rank, convert=lambda a: a):
        """Rank `rank`'s experts: (w13, s13, w2, s2) and the alpha keyword arguments."""
        sl = slice(rank * self.local, (rank + 1) * self.local)
        w = tuple(convert(a[sl]) for a in (self.w13, self.s13, self.w2, self.s2))
        return w, dict(w13_alpha=convert(self.a13[sl]), w13_alpha_up=convert(self.a13u[sl]), w2_alpha=convert(self.a2[sl]))

    def single(self):
        return moe.MoeLayer(self.w13, self.s13, self.w2, self.s2, max_tokens=16, topk=self.k, w13_alpha=self.a13,
                            w13_alpha_up=self.a13u, w2_alpha=self.a2, **self.kw)


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("act,dispatch", [("nvfp4", "auto"), ("nvfp4", "bf16"), ("mxfp4", "auto"), ("bf16", "auto")])
def test_equals_the_single_process_layer_bit_for_bit(world, act, dispatch):
    c = EpCase(world, act)
    e, h, k, tokens = c.e, c.h, c.k, c.tokens
    single = c.single()
    group = ep.ThreadGroup(world)

    def step(comm, rank_tokens):
        weights, alphas = c.rank_weights(comm.rank)
        layer = ep.ExpertParallel(*weights, experts=e, comm=comm, max_tokens=16, topk=k, dispatch=dispatch, **alphas,
                                  **c.kw)
        outs = [layer(*rank_tokens) for _ in range(2)]  # twice: deterministic
        return outs, layer.last_bytes

    results = group.run(step, tokens)
    for r, ((first, second), sent) in enumerate(results):
        want = single.run(*tokens[r])
        assert np.array_equal(first.view(np.uint16), want.view(np.uint16)), r
        assert np.array_equal(second.view(np.uint16), first.view(np.uint16)), r
        assert np.any(want.astype(np.float32))
        x, ids, _ = tokens[r]
        pairs = int(((ids >= 0) & (ids < e)).sum())  # one row per valid (token, slot) pair
        vec = 16 if act == "nvfp4" else 32
        fp4 = act != "bf16" and dispatch != "bf16"
        assert sent == pairs * (h // 2 + h // vec if fp4 else 2 * h), (sent, pairs)


def test_combine_matches_the_layer_and_skips_foreign_ids():
    rng = np.random.default_rng(3)
    t, k, h, e = 4, 2, 16, 4
    y = rng.standard_normal((t * k, h)).astype(BF16)
    ids = np.array([[0, 1], [2, -1], [4, 3], [1, 1]], np.int32)
    w = rng.uniform(0, 1, (t, k)).astype(np.float32)
    got = ep.combine(y, w, ids, e)
    yf = y.astype(np.float32).reshape(t, k, h)
    for tt in range(t):
        acc = np.zeros(h, np.float64)
        for j in range(k):
            if 0 <= ids[tt, j] < e:
                acc += np.float64(w[tt, j]) * yf[tt, j]
        # one or two fp32 fmas from 0: exact in float64 then rounded to fp32 for k = 2 (the first is a
        # product, exact in fp32 only up to rounding: compare within one fp32 + one bf16 rounding)
        assert np.allclose(got[tt].astype(np.float64), acc, rtol=2.0**-7, atol=1e-30)
    assert not np.any(got[1].astype(np.float32) != (np.float32(w[1, 0]) * yf[1, 0]).astype(BF16).astype(np.float32))


def test_bad_arguments_named():
    w13, s13, w2, s2, _ = _global("mxfp4")
    group = ep.ThreadGroup(3)
    with pytest.raises(fp4gemm.ArgumentError) as err:
        ep.ExpertParallel(w13[:2], s13[:2], w2[:2], s2[:2], experts=8, comm=group.comm(0), max_tokens=4, topk=2,
                          act_format="bf16", scale_layout="linear")
    assert err.value.argument == "experts"
    group = ep.ThreadGroup(2)
    with pytest.raises(fp4gemm.ArgumentError) as err:
        ep.ExpertParallel(w13[:3], s13[:3], w2[:3], s2[:3], experts=8, comm=group.comm(0), max_tokens=4, topk=2,
                          act_format="bf16", scale_layout="linear")
    assert err.value.argument == "w13"
    with pytest.raises(fp4gemm.ArgumentError) as err:
        ep.ExpertParallel(w13[:4], s13[:4], w2[:4], s2[:4], experts=8, comm=group.comm(0), max_tokens=4, topk=2,
                          act_format="bf16", scale_layout="linear", dispatch="fp4")
    assert err.value.argument == "dispatch"
    with pytest.raises(fp4gemm.ArgumentError) as err:  # (not yet: the exchange's combine would add them per rank)
        ep.ExpertParallel(w13[:4], s13[:4], w2[:4], s2[:4], experts=8, comm=group.comm(0), max_tokens=4, topk=2,
                          act_format="bf16", scale_layout="linear", w2_bias=np.zeros((4, 2 * w13.shape[2]), BF16))
    assert err.value.argument == "w2_bias"
    with pytest.raises(fp4gemm.ArgumentError):
        ep.ThreadGroup(0)


def test_combine_bad_arguments_named():
    rng = np.random.default_rng(5)
    y = rng.standard_normal((8, 16)).astype(BF16)
    ids = np.zeros((4, 2), np.int32)
    w = np.ones((4, 2), np.float32)
    for args, argument in [((y[:7], w, ids, 4), "y"), ((y, w[:, :1], ids, 4), "topk_weights"),
                           ((y, w, ids.astype(np.float32), 4), "topk_ids"), ((y.astype(np.float32), w, ids, 4), "y")]:
        with pytest.raises(fp4gemm.ArgumentError) as err:
            ep.combine(*args)
        assert err.value.argument == argument, str(err.value)
    with pytest.raises(fp4gemm.ArgumentError) as err:
        ep.combine(y, w, ids, 4, out=np.empty((4, 8), BF16))
    assert err.value.argument == "out"
