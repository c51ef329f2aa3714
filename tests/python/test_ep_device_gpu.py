"""GPU tier, one GPU: the expert-parallel device path (fp4gemm::EpExchange kernels: counts, rows
written into the destination ranks' buffers, FP4 quantisation inside the dispatch, rows back, the
combine) with W = 1, 2, 4 ranks sharing one device (fp4gemm.ep.LocalGroup). Every rank's output
must equal the single-GPU layer over all experts bit for bit -- W4A4 NVFP4 and MXFP4 (rows travel
quantised) and W4A16 (bf16 rows) -- for eager steps and for 100 replays of one CUDA graph of the
whole step, each with a new routing and new tokens written into the captured buffers. The same path
across real GPUs (PyTorch SymmetricMemory, NCCL) is tested in test_ep_torch.py."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tier needs torch and a CUDA device)")
ml_dtypes = pytest.importorskip("ml_dtypes")

import fp4gemm  # noqa: E402
from fp4gemm import ep, moe  # noqa: E402

from test_ep_host import EpCase  # noqa: E402


@pytest.fixture(autouse=True)
def _needs_cuda(backend):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if backend != "auto":
        pytest.skip(f"the MoE layer runs only the fast kernel (sm_90); this tier runs backend {backend!r}")


def _cuda(a):
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def _bits(t):
    return t.view(torch.int16).cpu().numpy()


class Ranks:
    """W ranks of one EpCase on this GPU, and the single-GPU layer they must match."""

    def __init__(self, world, act, max_tokens=16):
        self.case = c = EpCase(world, act)
        self.world, self.max_tokens = world, max_tokens
        self.group = ep.LocalGroup(world)
        self.parts = []
        for r in range(world):
            weights, alphas = c.rank_weights(r, _cuda)
            self.parts.append(ep.ExpertParallel(*weights, experts=c.e, comm=self.group.comm(r), max_tokens=max_tokens,
                                                topk=c.k, **alphas, **c.kw))
        self.single = moe.MoeLayer(*(_cuda(a) for a in (c.w13, c.s13, c.w2, c.s2)), max_tokens=world * max_tokens,
                                   topk=c.k, batch_invariant=True, w13_alpha=_cuda(c.a13), w13_alpha_up=_cuda(c.a13u), w2_alpha=_cuda(c.a2),
                                   **c.kw)

    def draw(self, rng, wide=False):
        """Fresh tokens for every rank: (x, ids, weights) as CUDA tensors; ids include -1 and E
        (skipped), and some rank may bring no token."""
        c, out = self.case, []
        for r in range(self.world):
            t = int(rng.integers(0, self.max_tokens + 1))
            x = rng.standard_normal((t, c.h)).astype(np.float32) * 0.5
            if wide:  # magnitudes over many binades, some exact zeros
                x *= np.exp2(rng.integers(-20, 20, (t, c.h)))
                x[rng.random((t, c.h)) < 0.05] = 0.0
            ids = np.array([rng.permutation(c.e)[:c.k] for _ in range(t)], np.int32).reshape(t, c.k)
            if t:
                ids[rng.random((t, c.k)) < 0.1] = -1
                ids[rng.random((t, c.k)) < 0.05] = c.e
            w = rng.uniform(0.05, 1, (t, c.k)).astype(np.float32)
            out.append((_cuda(x.astype(ml_dtypes.bfloat16)), _cuda(ids), _cuda(w)))
        return out

    def expected(self, inputs):
        """Each rank's tokens through the single-GPU layer over all experts."""
        return [self.single.run(x, ids, w) if x.shape[0] else x.clone() for x, ids, w in inputs]


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("act", ["nvfp4", "mxfp4", "bf16"])
def test_device_path_equals_the_single_gpu_layer(world, act):
    rs = Ranks(world, act)
    rng = np.random.default_rng(100 + world)
    for step in range(6):
        inputs = rs.draw(rng, wide=step % 2 == 1)
        got = rs.group.step(rs.parts, inputs)
        want = rs.expected(inputs)
        for r in range(world):
            assert got[r].shape == want[r].shape
            assert np.array_equal(_bits(got[r]), _bits(want[r])), f"step {step} rank {r} differs from the single-GPU layer"


@pytest.mark.parametrize("world,act", [(2, "nvfp4"), (4, "mxfp4"), (4, "bf16")])
def test_one_graph_replayed_with_new_routings(world, act):
    rs = Ranks(world, act)
    rng = np.random.default_rng(7)
    c, t = rs.case, rs.max_tokens
    # Fixed buffers the graph reads: every rank brings max_tokens tokens; the routing and the tokens
    # change in place before each replay.
    xs = [torch.empty((t, c.h), dtype=torch.bfloat16, device="cuda") for _ in range(world)]
    ids = [torch.empty((t, c.k), dtype=torch.int32, device="cuda") for _ in range(world)]
    ws = [torch.empty((t, c.k), dtype=torch.float32, device="cuda") for _ in range(world)]
    outs = [torch.full((t, c.h), float("nan"), dtype=torch.bfloat16, device="cuda") for _ in range(world)]

    def fill():
        for r in range(world):
            while True:
                x, i, w = rs.draw(rng, wide=bool(rng.integers(0, 2)))[r]
                if x.shape[0] == t:
                    break
            xs[r].copy_(x), ids[r].copy_(i), ws[r].copy_(w)

    inputs = list(zip(xs, ids, ws))
    fill()
    rs.group.step(rs.parts, inputs, outs)  # warm-up outside the capture (plans, graph caches)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        rs.group.step(rs.parts, inputs, outs)
    torch.cuda.current_stream().wait_stream(stream)
    for replay in range(100):
        fill()
        for o in outs:
            o.fill_(float("nan"))
        graph.replay()
        want = rs.expected(inputs)
        for r in range(world):
            assert np.array_equal(_bits(outs[r]), _bits(want[r])), f"replay {replay} rank {r}"


def test_bad_steps_are_refused():
    rs = Ranks(2, "nvfp4")
    c = rs.case
    x, ids, w = rs.draw(np.random.default_rng(1))[0]
    p = rs.parts[0]
    too_many = torch.zeros((rs.max_tokens + 1, c.k), dtype=torch.int32, device="cuda")
    with pytest.raises(fp4gemm.ArgumentError, match="hidden_states"):
        p._check_device_step(torch.zeros((rs.max_tokens + 1, c.h), dtype=torch.bfloat16, device="cuda"), too_many,
                             torch.zeros((rs.max_tokens + 1, c.k), device="cuda"))
    with pytest.raises(fp4gemm.ArgumentError, match="topk_ids"):
        p._check_device_step(x, ids[:, :1].contiguous(), w)
    with pytest.raises(fp4gemm.ArgumentError, match="topk_weights"):
        p._check_device_step(x, ids, w.double())
    with pytest.raises(fp4gemm.ArgumentError, match="hidden_states"):
        p._check_device_step(x.float(), ids, w)
    with pytest.raises(fp4gemm.ArgumentError, match="comm"):
        p(x, ids, w)  # a LocalGroup rank alone: the step needs every rank
    with pytest.raises(fp4gemm.ArgumentError, match="world"):
        ep.LocalGroup(9)
    with pytest.raises(fp4gemm.ArgumentError, match="config.hidden"):
        fp4gemm._fp4gemm.ep_buffer_bytes(2, 0, 8, 2, 96, 4, "nvfp4")
    with pytest.raises(fp4gemm.ArgumentError, match="config.experts"):
        fp4gemm._fp4gemm.ep_buffer_bytes(3, 0, 8, 2, 64, 4, "nvfp4")
    with pytest.raises(fp4gemm.ArgumentError, match="rows"):
        fp4gemm._fp4gemm.ep_buffer_bytes(2, 0, 8, 2, 64, 4, "fp8")
    with pytest.raises(fp4gemm.ArgumentError, match="buffers"):
        fp4gemm._fp4gemm.EpExchange(2, 0, 8, 2, 64, 4, "nvfp4", 1.0, 0, [p._buf.data_ptr()])
    with pytest.raises(fp4gemm.ArgumentError, match="buffers"):  # host memory is not this rank's buffer
        host = np.zeros(1 << 20, np.uint8)
        fp4gemm._fp4gemm.EpExchange(1, 0, 8, 2, 64, 4, "nvfp4", 1.0, 0, [host.ctypes.data // 256 * 256 + 256])
    assert "EpExchange rank 0 of 2" in p.exchange.describe()


def test_shapes_with_odd_scale_rows():
    """H = 2880 (gpt-oss: H/16 = 180 and H/32 = 90 scale bytes per row, not 16-byte multiples),
    W4A4 MXFP4 and NVFP4, two ranks."""
    for act in ("mxfp4", "nvfp4"):
        c = EpCase(2, act, e=4, h=2880, i=64, k=2)
        group = ep.LocalGroup(2)
        parts = []
        for r in range(2):
            weights, alphas = c.rank_weights(r, _cuda)
            parts.append(ep.ExpertParallel(*weights, experts=c.e, comm=group.comm(r), max_tokens=16, topk=c.k, **alphas,
                                           **c.kw))
        single = moe.MoeLayer(*(_cuda(a) for a in (c.w13, c.s13, c.w2, c.s2)), max_tokens=16, topk=c.k, batch_invariant=True,
                              w13_alpha=_cuda(c.a13), w13_alpha_up=_cuda(c.a13u), w2_alpha=_cuda(c.a2), **c.kw)
        inputs = [tuple(_cuda(a) for a in tok) for tok in c.tokens[:2]]
        got = group.step(parts, inputs)
        for r in range(2):
            want = single.run(*inputs[r])
            assert np.array_equal(_bits(got[r]), _bits(want)), f"{act} rank {r}"


@pytest.mark.parametrize("act", ["nvfp4", "bf16"])
def test_layer_token_count_on_the_device(act):
    """MoeLayer.run(token_count=c): tokens at or past c are absent -- the rows before are the bits of
    a run of c tokens, the rows after keep what they held; c past T means all T, c <= 0 none."""
    c = EpCase(1, act)
    layer = moe.MoeLayer(*(_cuda(a) for a in (c.w13, c.s13, c.w2, c.s2)), max_tokens=16, topk=c.k,
                         w13_alpha=_cuda(c.a13), w13_alpha_up=_cuda(c.a13u), w2_alpha=_cuda(c.a2), **c.kw)
    x, ids, w = (_cuda(a) for a in c.tokens[0])  # 5 tokens
    t = x.shape[0]
    count = torch.empty(1, dtype=torch.int32, device="cuda")
    out = torch.empty_like(x)
    for n in (0, 1, 3, t, t + 7, -2):
        count.fill_(n)
        out.fill_(float("nan"))
        layer.run(x, ids, w, out=out, token_count=count)
        m = max(0, min(n, t))
        if m:
            want = layer.run(x[:m].contiguous(), ids[:m].contiguous(), w[:m].contiguous())
            assert np.array_equal(_bits(out[:m]), _bits(want)), n
        assert torch.isnan(out[m:].float()).all(), f"count {n}: rows past it were written"
    with pytest.raises(fp4gemm.ArgumentError, match="token_count"):
        layer.run(x, ids, w, token_count=torch.zeros(1, dtype=torch.int64, device="cuda"))
    with pytest.raises(fp4gemm.ArgumentError, match="token_count"):
        layer.run(x, ids, w, token_count=torch.zeros(1, dtype=torch.int32))


@pytest.mark.parametrize("act", ["nvfp4", "bf16"])
def test_layer_expert_rows_sum_to_the_combined_run(act):
    """MoeLayer.run(expert_rows=, row_of=): the run stops before its combine; each valid pair's row
    is expert_rows[row_of[i]], and fp4gemm.ep.combine over those rows gives the combined run's
    bits. Rows that belong to no pair keep their poison."""
    c = EpCase(4, act)  # (4 batches: 5, 9, 1 and 16 tokens; the layer holds all E experts)
    args = [_cuda(a) for a in (c.w13, c.s13, c.w2, c.s2)]
    kw = dict(max_tokens=16, topk=c.k, w13_alpha=_cuda(c.a13), w13_alpha_up=_cuda(c.a13u), w2_alpha=_cuda(c.a2), **c.kw)
    layer = moe.MoeLayer(*args, **kw)
    bare = moe.MoeLayer(*args, combine=False, **kw)  # planned without its combine: no output workspace
    assert "stops before its combine" in bare.describe()
    for x, ids, w in ((_cuda(a) for a in batch) for batch in c.tokens):
        t, k = ids.shape
        want = layer.run(x, ids, w)
        rows = torch.full((t * k, x.shape[1]), float("nan"), dtype=torch.bfloat16, device="cuda")
        row_of = torch.full((t * k,), -1, dtype=torch.int32, device="cuda")
        assert layer.run(x, ids, w, expert_rows=rows, row_of=row_of) is rows
        flat = ids.reshape(-1).long()
        valid = (flat >= 0) & (flat < c.e)
        at = row_of.long()[valid]
        assert at.unique().numel() == at.numel() and bool((at >= 0).all()) and bool((at < t * k).all())
        pairs = torch.zeros_like(rows)
        pairs[valid] = rows[at]
        assert not torch.isnan(pairs[valid].float()).any(), "a valid pair's row was not written"
        unused = torch.ones(t * k, dtype=torch.bool, device="cuda")
        unused[at] = False
        assert torch.isnan(rows[unused].float()).all(), "a row of no pair was written"
        got = ep.combine(pairs, w, ids, c.e)
        assert np.array_equal(_bits(got), _bits(want))
        again = torch.full_like(rows, float("nan"))
        bare.run(x, ids, w, expert_rows=again, row_of=row_of)
        assert np.array_equal(_bits(again), _bits(rows)), "combine=False gave other expert rows"
    x, ids, w = (_cuda(a) for a in c.tokens[0])
    rows = torch.empty((ids.numel(), x.shape[1]), dtype=torch.bfloat16, device="cuda")
    row_of = torch.empty(ids.numel(), dtype=torch.int32, device="cuda")
    with pytest.raises(fp4gemm.ArgumentError, match="out"):
        layer.run(x, ids, w, out=torch.empty_like(x), expert_rows=rows, row_of=row_of)
    with pytest.raises(fp4gemm.ArgumentError, match="row_of"):
        layer.run(x, ids, w, expert_rows=rows)
    with pytest.raises(fp4gemm.ArgumentError, match="expert_rows"):
        layer.run(x, ids, w, expert_rows=rows[:-1], row_of=row_of)
    with pytest.raises(fp4gemm.ArgumentError, match="row_of"):
        layer.run(x, ids, w, expert_rows=rows, row_of=row_of.long())
    with pytest.raises(fp4gemm.ArgumentError, match="expert_rows"):
        bare.run(x, ids, w)  # a combined run of a layer planned without its combine


def test_lifetimes_two_layers_and_in_place_weights():
    """Two layers of different shapes on one LocalGroup (each rank's n-th layer shares the n-th
    buffers), steps alternating between them, inputs reallocated every step, and the weights
    changed in place between steps (torch's version counter: the local layers copy their scales
    again), each step bit for bit the single-GPU layer on the same weights."""
    group = ep.LocalGroup(2)
    cases = [EpCase(2, "nvfp4"), EpCase(2, "nvfp4", e=4, h=128, i=64, k=2)]
    ranks, singles, full = [], [], []  # per layer
    for c in cases:
        weights = [tuple(_cuda(a[r * c.local:(r + 1) * c.local]) for a in (c.w13, c.s13, c.w2, c.s2)) for r in range(2)]
        alphas = [c.rank_weights(r, _cuda)[1] for r in range(2)]
        ranks.append([ep.ExpertParallel(*weights[r], experts=c.e, comm=group.comm(r), max_tokens=16, topk=c.k,
                                        **alphas[r], **c.kw) for r in range(2)])
        fw = [_cuda(a) for a in (c.w13, c.s13, c.w2, c.s2)]
        full.append((fw, weights))
        singles.append(moe.MoeLayer(*fw, max_tokens=16, topk=c.k, batch_invariant=True, w13_alpha=_cuda(c.a13), w13_alpha_up=_cuda(c.a13u),
                                    w2_alpha=_cuda(c.a2), **c.kw))
    rng = np.random.default_rng(3)
    for step in range(8):
        n = step % 2
        c = cases[n]
        if step >= 4:  # new w13 scales, in place, on the ranks' slices and the full copy alike
            fw, weights = full[n]
            codes = np.array([0x30, 0x38, 0x40], np.uint8)[rng.integers(0, 3, c.s13.shape)]
            fw[1].copy_(_cuda(codes))
            for r in range(2):
                weights[r][1].copy_(_cuda(codes[r * c.local:(r + 1) * c.local]))
        inputs = [tuple(_cuda(a) for a in tok) for tok in (c.tokens[0], c.tokens[1])]
        got = group.step(ranks[n], inputs)
        for r in range(2):
            want = singles[n].run(*inputs[r])
            assert np.array_equal(_bits(got[r]), _bits(want)), f"step {step} layer {n} rank {r}"
    # A rank's next layer must match the other ranks' next layer in shape.
    c = cases[0]
    weights, alphas = c.rank_weights(0, _cuda)
    ep.ExpertParallel(*weights, experts=c.e, comm=group.comm(0), max_tokens=16, topk=c.k, **alphas, **c.kw)
    c2 = cases[1]
    w2_, a2_ = c2.rank_weights(1, _cuda)
    with pytest.raises(fp4gemm.ArgumentError, match="nbytes"):
        ep.ExpertParallel(*w2_, experts=c2.e, comm=group.comm(1), max_tokens=16, topk=c2.k, **a2_, **c2.kw)


def test_device_path_refuses_host_weights():
    c = EpCase(2, "nvfp4")
    weights, alphas = c.rank_weights(0)  # NumPy arrays
    with pytest.raises(fp4gemm.ArgumentError, match="w13"):
        ep.ExpertParallel(*weights, experts=c.e, comm=ep.LocalGroup(2).comm(0), max_tokens=16, topk=c.k, **alphas,
                          **c.kw)


def test_w4a4_layer_with_bf16_rows():
    """dispatch='bf16' on a W4A4 layer: bf16 rows travel, the receiving layer quantises them (its own
    step 2): still the single-GPU layer's bits."""
    c = EpCase(2, "nvfp4")
    group = ep.LocalGroup(2)
    parts = []
    for r in range(2):
        weights, alphas = c.rank_weights(r, _cuda)
        parts.append(ep.ExpertParallel(*weights, experts=c.e, comm=group.comm(r), max_tokens=16, topk=c.k,
                                       dispatch="bf16", **alphas, **c.kw))
        assert not parts[-1].fp4 and parts[-1].row_bytes == 2 * c.h
    single = moe.MoeLayer(*(_cuda(a) for a in (c.w13, c.s13, c.w2, c.s2)), max_tokens=16, topk=c.k, batch_invariant=True,
                          w13_alpha=_cuda(c.a13), w13_alpha_up=_cuda(c.a13u), w2_alpha=_cuda(c.a2), **c.kw)
    inputs = [tuple(_cuda(a) for a in tok) for tok in c.tokens[:2]]
    got = group.step(parts, inputs)
    for r in range(2):
        assert np.array_equal(_bits(got[r]), _bits(single.run(*inputs[r]))), r
