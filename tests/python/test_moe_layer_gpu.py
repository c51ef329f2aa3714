"""GPU tier for the whole expert layer (torch + CUDA): fp4gemm.moe.MoeLayer / fused_experts against
the host reference composition (the NumPy path: reference::moe_layer) on the same weights; the
torch op in a CUDA graph replayed with a new routing each time and under
torch.compile(fullgraph=True); the GPU quantiser (fp4gemm.quantize on CUDA tensors) against the
host one, bit for bit; determinism; host overhead per call (printed, not asserted)."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tier needs torch and a CUDA device)")
ml_dtypes = pytest.importorskip("ml_dtypes")

import fp4gemm  # noqa: E402
from fp4gemm import moe, ops  # noqa: E402

from test_moe_layer_host import BF16, _blocked, _problem  # noqa: E402


@pytest.fixture(autouse=True)
def _fast_kernel_only(backend):
    if backend != "auto":
        pytest.skip(f"the MoE layer runs only the fast kernel (sm_90); this tier runs backend {backend!r}")


def cuda(x):
    if x.dtype == BF16:
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def host(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(BF16)
    return t.cpu().numpy()


def _rel(got, want):
    got, want = got.astype(np.float64), want.astype(np.float64)
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)


def _layers(p, **kw):
    """The same layer on the host (reference) and on the GPU (blocked scales there)."""
    k = p["ids"].shape[1]
    common = dict(topk=k, act_format=p["act"], gate_up=p["gate_up"], **kw)
    href = moe.MoeLayer(p["w13"], p["s13"], p["w2"], p["s2"], max_tokens=64, scale_layout="linear", **common)
    dev = moe.MoeLayer(cuda(p["w13"]), cuda(_blocked(p["s13"])), cuda(p["w2"]), cuda(_blocked(p["s2"])), max_tokens=64,
                       scale_layout="blocked", **common)
    return href, dev


@pytest.mark.parametrize("fmt,act,activation,gate_up", [("nvfp4", "nvfp4", "silu", "stacked"),
                                                        ("mxfp4", "mxfp4", "swigluoai", "interleaved"),
                                                        ("mxfp4", "bf16", "silu", "stacked")])
def test_layer_matches_the_host_composition(fmt, act, activation, gate_up):
    p = _problem(fmt, act, e=16, h=256, i=128, k=4, t=40, seed=21, gate_up=gate_up)
    kw = dict(activation=activation)
    if act == "nvfp4":
        kw.update(a1_scale=0.5, a2_scale=0.125)
    href, dev = _layers(p, **kw)
    want = href.run(p["x"], p["ids"], p["wts"])
    out = torch.full((40, 256), float("nan"), dtype=torch.bfloat16, device="cuda")
    got = dev.run(cuda(p["x"]), cuda(p["ids"]), cuda(p["wts"]), out=out)
    again = dev.run(cuda(p["x"]), cuda(p["ids"]), cuda(p["wts"]))
    torch.cuda.synchronize()
    dev.check()
    assert not torch.isnan(got).any()
    assert torch.equal(got.view(torch.int16), again.view(torch.int16)), "two runs differ"
    # GEMM1 is exact on these values (the intermediate is the reference's bit for bit); GEMM2's
    # FP32 sums and the bf16 rounding of its output differ from the exact ones by ulps.
    g = host(got).astype(np.float32)
    w = want.astype(np.float32)
    assert _rel(g, w) < 2.0**-7, _rel(g, w)
    assert np.mean(g == w) > 0.5


def test_fused_experts_graph_replayed_with_new_routings():
    p = _problem("nvfp4", "nvfp4", e=32, h=128, i=64, k=4, t=24, seed=23)
    w13, s13, w2, s2 = cuda(p["w13"]), cuda(_blocked(p["s13"])), cuda(p["w2"]), cuda(_blocked(p["s2"]))
    x, ids, wts = cuda(p["x"]), cuda(p["ids"]), cuda(p["wts"])
    href = moe.MoeLayer(p["w13"], p["s13"], p["w2"], p["s2"], max_tokens=24, topk=4, scale_layout="linear",
                        a1_scale=0.5)
    moe.clear_layer_cache()
    ops.fused_experts(x, w13, s13, w2, s2, wts, ids, a1_scale=0.5)  # warm-up: builds the plan
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.fused_experts(x, w13, s13, w2, s2, wts, ids, a1_scale=0.5)
    rng = np.random.default_rng(5)
    for i in range(100):
        new = _problem("nvfp4", "nvfp4", e=32, h=128, i=64, k=4, t=24, seed=1000 + i)
        ids_np = new["ids"].copy()
        if i % 3 == 0:
            ids_np[:, 0] = rng.integers(0, 2)  # a hot expert
        x.copy_(cuda(new["x"]))
        ids.copy_(cuda(ids_np))
        wts.copy_(cuda(new["wts"]))
        graph.replay()
        torch.cuda.synchronize()
        want = href.run(new["x"], ids_np, new["wts"]).astype(np.float32)
        got = host(out).astype(np.float32)
        assert _rel(got, want) < 2.0**-7, (i, _rel(got, want))


def test_fused_experts_under_torch_compile():
    p = _problem("mxfp4", "bf16", e=8, h=128, i=64, k=2, t=16, seed=25)
    w13, s13, w2, s2 = cuda(p["w13"]), cuda(_blocked(p["s13"])), cuda(p["w2"]), cuda(_blocked(p["s2"]))

    def fn(x, ids, wts):
        return ops.fused_experts(x, w13, s13, w2, s2, wts, ids, act_format="bf16").float() * 2.0

    compiled = torch.compile(fn, fullgraph=True)
    for seed in range(4):
        new = _problem("mxfp4", "bf16", e=8, h=128, i=64, k=2, t=16, seed=100 + seed)
        args = (cuda(new["x"]), cuda(new["ids"]), cuda(new["wts"]))
        eager = fn(*args)
        got = compiled(*args)
        torch.cuda.synchronize()
        assert torch.equal(got, eager)


def test_fused_experts_cache_follows_the_weights():
    """fused_experts' C++ cache (weight objects' identities, weak references, addresses): a hit
    runs the same plan; weights re-pointed with set_() to other values, new weight objects, more
    tokens than the plan's workspace, other options and a cleared cache all give the right answer
    (each checked against the host composition of the weights it was called with)."""
    pa = _problem("nvfp4", "nvfp4", e=8, h=128, i=64, k=2, t=16, seed=61)
    pb = _problem("nvfp4", "nvfp4", e=8, h=128, i=64, k=2, t=16, seed=62)  # other weights, same shapes

    def check(p, w, t, a1=0.5, via="moe"):
        x, ids, wts = cuda(p["x"][:t]), cuda(p["ids"][:t]), cuda(p["wts"][:t])
        if via == "moe":
            got = moe.fused_experts(x, *w, wts, ids, a1_scale=a1)
        elif via == "ops":
            got = ops.fused_experts(x, *w, wts, ids, a1_scale=a1)
        else:
            got = torch.ops.fp4gemm.fused_experts(x, *w, wts, ids, None, None, None, "silu", "nvfp4", "", "blocked",
                                                  a1, 1.0)
        torch.cuda.synchronize()
        want = moe.MoeLayer(p["w13"], p["s13"], p["w2"], p["s2"], max_tokens=t, topk=2, scale_layout="linear",
                            a1_scale=a1).run(p["x"][:t], p["ids"][:t], p["wts"][:t]).astype(np.float32)
        assert _rel(host(got).astype(np.float32), want) < 2.0**-7

    def weights(p):
        return [cuda(p["w13"]), cuda(_blocked(p["s13"])), cuda(p["w2"]), cuda(_blocked(p["s2"]))]

    moe.clear_layer_cache()
    assert len(moe._cache) == 0
    w = weights(pa)
    check(pa, w, 4)
    assert len(moe._cache) == 1
    for via in ("moe", "ops", "torch.ops"):  # hits: the same entry
        check(pa, w, 4, via=via)
    assert len(moe._cache) == 1
    check(pa, w, 16)  # more tokens than the plan's workspace: a grown plan, the same entry
    assert len(moe._cache) == 1
    check(pa, w, 16, a1=0.25)  # other options: another entry
    assert len(moe._cache) == 2
    wb = weights(pb)
    for old, new in zip(w, wb):  # the same objects re-pointed at other weights: a miss, a new plan
        old.set_(new)
    check(pb, w, 16)
    del w, wb
    check(pa, weights(pa), 8)  # new objects (perhaps at the dead ones' ids): no stale plan
    moe.clear_layer_cache()
    assert len(moe._cache) == 0
    check(pb, weights(pb), 8)


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("layout", ["linear", "blocked"])
def test_gpu_quantiser_matches_the_host_one(fmt, dtype, layout):
    rng = np.random.default_rng(31)
    x = (rng.standard_normal((300, 512)) * np.exp2(rng.integers(-8, 8, (300, 1)))).astype(np.float32)
    x[3, :16] = 0.0
    x[5, 7] = np.inf
    tx = torch.from_numpy(x).to(getattr(torch, dtype)).cuda()
    xr = tx.float().cpu().numpy()  # the values the GPU sees
    gs = 0.0123 if fmt == "nvfp4" else 1.0
    p, s = fp4gemm.quantize(tx, fmt, scale_layout=layout, global_scale=gs)
    hp, hs = fp4gemm.quantize(xr, fmt, scale_layout=layout, global_scale=gs)
    torch.cuda.synchronize()
    assert np.array_equal(p.cpu().numpy(), hp)
    assert np.array_equal(s.cpu().numpy().reshape(-1), np.asarray(hs).reshape(-1))


def test_host_overhead_per_call_printed():
    p = _problem("nvfp4", "nvfp4", e=16, h=256, i=128, k=4, t=8, seed=41)
    w13, s13, w2, s2 = cuda(p["w13"]), cuda(_blocked(p["s13"])), cuda(p["w2"]), cuda(_blocked(p["s2"]))
    x, ids, wts = cuda(p["x"]), cuda(p["ids"]), cuda(p["wts"])
    out = torch.empty_like(x)
    layer = moe.MoeLayer(w13, s13, w2, s2, max_tokens=8, topk=4)
    for fn, name in [(lambda: layer.run(x, ids, wts, out=out), "MoeLayer.run"),
                     (lambda: ops.fused_experts(x, w13, s13, w2, s2, wts, ids), "ops.fused_experts"),
                     (lambda: torch.ops.fp4gemm.fused_experts(x, w13, s13, w2, s2, wts, ids, None, None, None, "silu",
                                                              "nvfp4", "", "blocked", 1.0, 1.0),
                      "torch.ops.fp4gemm.fused_experts")]:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        n = 200
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        host_us = (time.perf_counter() - t0) / n * 1e6
        torch.cuda.synchronize()
        print(f"\n[host overhead] {name}: {host_us:.1f} us per call (enqueue only)")


def test_torch_op_runs_the_native_kernel():
    """torch.ops.fp4gemm.fused_experts on CUDA tensors runs its C++ kernel (registered through torch's
    stable C ABI, torch >= 2.10): a first call with new weights or options plans through the Python
    kernel, repeated calls take the C++ hot path (each call's path is asserted, so a silent fallback
    fails the test); every output is bitwise fp4gemm.moe.fused_experts' on the same arguments --
    token counts, a1, all three per-expert alphas, a weight re-pointed with set_(), a CUDA graph
    replayed with new routings; bad arguments raise a RuntimeError naming them on either path, the
    Python kernel called directly raises as usual, and the op still works afterwards."""
    status = ops.native_status()["fused_experts"]
    major, minor = (int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    if (major, minor) < (2, 10):
        pytest.skip(f"torch {torch.__version__} has no stable-ABI kernel registration ({status})")
    assert status == "", f"the native kernel is not registered: {status}"
    p = _problem("nvfp4", "nvfp4", e=8, h=128, i=64, k=2, t=40, seed=71)
    w = [cuda(p["w13"]), cuda(_blocked(p["s13"])), cuda(p["w2"]), cuda(_blocked(p["s2"]))]
    alphas = [torch.rand(8, device="cuda") + 0.5 for _ in range(3)]
    x, ids, wts = cuda(p["x"]), cuda(p["ids"]), cuda(p["wts"])
    moe.clear_layer_cache()

    def op(t, a1=1.0, al=(None, None, None), xx=None, ii=None, path=None):
        hot0, py0 = ops._C._torch_native_counts()
        got = torch.ops.fp4gemm.fused_experts(x[:t] if xx is None else xx, *w, wts[:t],
                                              ids[:t] if ii is None else ii, *al, "silu", "nvfp4", "", "blocked",
                                              a1, 1.0)
        hot1, py1 = ops._C._torch_native_counts()
        ran = {(1, 0): "hot", (0, 1): "python"}[(hot1 - hot0, py1 - py0)]
        assert path is None or ran == path, (t, a1, ran)
        return got

    def check(t, a1=1.0, al=(None, None, None), path=None):
        got = op(t, a1, al, path=path)
        ref = moe.fused_experts(x[:t], *w, wts[:t], ids[:t], a1_scale=a1, w13_alpha=al[0], w13_alpha_up=al[1],
                                w2_alpha=al[2])
        torch.cuda.synchronize()
        assert got.dtype == torch.bfloat16 and got.shape == (t, 128) and got.is_contiguous()
        assert torch.equal(got.view(torch.int16), ref.view(torch.int16)), (t, a1, al[0] is not None)

    check(4, path="python")  # plans
    check(4, path="hot")
    check(1, path="hot")
    check(40)  # may grow the plan (Python) or fit it
    check(40, path="hot")
    check(7, 0.5, path="python")  # other options: another entry
    check(7, 0.5, path="hot")
    check(7, 0.5, tuple(alphas), path="python")
    check(7, 0.5, tuple(alphas), path="hot")
    # a weight re-pointed in place: its entry no longer matches; the Python path plans again
    other = cuda(_problem("nvfp4", "nvfp4", e=8, h=128, i=64, k=2, t=4, seed=72)["w13"])
    w[0].set_(other)
    check(7, 0.5, path="python")
    check(7, 0.5, path="hot")
    # another tensor object over the same memory (a view): a new entry, as the Python path keys on
    # the objects; then hot
    w[0] = w[0][:]
    check(7, 0.5, path="python")
    check(7, 0.5, path="hot")
    # a CUDA graph of the op, replayed with new routings (the hot path, captured)
    xs, ids_s, wts_s = x[:16].clone(), ids[:16].clone(), wts[:16].clone()
    op(16, xx=xs, ii=ids_s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.ops.fp4gemm.fused_experts(xs, *w, wts_s, ids_s, None, None, None, "silu", "nvfp4", "",
                                              "blocked", 1.0, 1.0)
    rng = np.random.default_rng(73)
    for _ in range(5):
        ids_s.copy_(torch.from_numpy(np.stack([rng.choice(8, 2, replace=False) for _ in range(16)]).astype(
            np.int32 if ids.dtype == torch.int32 else np.int64)))
        graph.replay()
        ref = moe.fused_experts(xs, *w, wts_s, ids_s)
        torch.cuda.synchronize()
        assert torch.equal(out.view(torch.int16), ref.view(torch.int16))
    # errors: rejected before the hot path (dtype) and by the hot path's checks (a planned layer)
    with pytest.raises(RuntimeError, match="ArgumentError: .*hidden_states"):
        op(4, xx=x[:4].float(), path="python")
    with pytest.raises(RuntimeError, match="ArgumentError: .*topk_ids"):
        op(4, ii=ids[:4].float(), path="python")
    with pytest.raises(RuntimeError, match="ArgumentError: .*topk_ids"):
        op(4, ii=ids[:3], path="python")
    with pytest.raises(fp4gemm.ArgumentError, match="hidden_states"):  # the private op called directly
        torch.ops.fp4gemm._fused_experts_python(x[:4].float(), *w, wts[:4], ids[:4], None, None, None, "silu",
                                                "nvfp4", "", "blocked", 1.0, 1.0)
    check(7, 0.5, path="hot")
    # routing ids outside [0, E) (device data) contribute nothing, on the C++ path as on the Python one
    ids_odd = ids[:7].clone()
    ids_odd[1, 0], ids_odd[4, 1] = -1, 8
    got = op(7, 0.5, ii=ids_odd, path="hot")
    ref = moe.fused_experts(x[:7], *w, wts[:7], ids_odd, a1_scale=0.5)
    torch.cuda.synchronize()
    assert torch.equal(got.view(torch.int16), ref.view(torch.int16))


def test_modelopt_checkpoint_runs_the_layer():
    """A synthetic ModelOpt NVFP4 checkpoint (w1 / w3 / w2 per expert, E4M3 scale codes over the
    normal range, distinct weight_scale_2 for gate and up), loaded by ExpertWeights.from_modelopt
    and run through fused_experts with the loaded arrays (blocked scales, per-expert alphas from
    w13_global / w2_global): the same output bytes as the layer fed the checkpoint's own arrays
    (gate and up stacked here, linear scales converted by the plan), so the loader's byte moves
    and scale conversion are what the layer expects."""
    rng = np.random.default_rng(31)
    e, h, i, t, k = 8, 256, 128, 24, 2
    prefix = "model.layers.3.mlp."
    sd, raw = {}, []
    for x in range(e):
        parts = {}
        for name, (n, kk) in (("w1", (i, h)), ("w3", (i, h)), ("w2", (h, i))):
            w = rng.integers(0, 256, size=(n, kk // 2), dtype=np.uint8)
            s = rng.integers(0x20, 0x48, size=(n, kk // 16), dtype=np.uint8)  # E4M3 0.125..3
            g = np.float32(rng.uniform(0.5, 2.0))
            base = f"{prefix}experts.{x}.{name}."
            sd[base + "weight"], sd[base + "weight_scale"] = w, s
            sd[base + "weight_scale_2"] = np.array([g], np.float32)
            sd[base + "input_scale"] = np.array([1.0], np.float32)
            parts[name] = (w, s, g)
        raw.append(parts)
    ew = moe.ExpertWeights.from_modelopt(sd, prefix)
    xs = (rng.standard_normal((t, h)) * 0.5).astype(np.float32)
    x_bf16 = torch.from_numpy(xs).to(torch.bfloat16).cuda()
    ids = torch.from_numpy(np.stack([rng.choice(e, k, replace=False) for _ in range(t)]).astype(np.int32)).cuda()
    wts = torch.from_numpy(rng.uniform(0.1, 1.0, (t, k)).astype(np.float32)).cuda()
    kw = dict(activation="silu", act_format="nvfp4", gate_up="stacked", a1_scale=0.5, a2_scale=0.25)
    loaded = moe.fused_experts(x_bf16, cuda(ew.w13), cuda(ew.w13_scales), cuda(ew.w2), cuda(ew.w2_scales), wts, ids,
                               scale_layout="blocked", w13_alpha=cuda(np.ascontiguousarray(ew.w13_global[:, 0])),
                               w13_alpha_up=cuda(np.ascontiguousarray(ew.w13_global[:, 1])),
                               w2_alpha=cuda(np.ascontiguousarray(ew.w2_global)), **kw)
    w13 = np.stack([np.concatenate([p["w1"][0], p["w3"][0]]) for p in raw])
    s13 = np.stack([np.concatenate([p["w1"][1], p["w3"][1]]) for p in raw])
    own = moe.fused_experts(x_bf16, cuda(w13), cuda(s13), cuda(np.stack([p["w2"][0] for p in raw])),
                            cuda(np.stack([p["w2"][1] for p in raw])), wts, ids, scale_layout="linear",
                            w13_alpha=cuda(np.array([p["w1"][2] for p in raw], np.float32)),
                            w13_alpha_up=cuda(np.array([p["w3"][2] for p in raw], np.float32)),
                            w2_alpha=cuda(np.array([p["w2"][2] for p in raw], np.float32)), **kw)
    torch.cuda.synchronize()
    moe.check()
    assert loaded.shape == (t, h) and torch.isfinite(loaded.float()).all()
    assert loaded.abs().max().item() > 0
    assert torch.equal(loaded.view(torch.int16), own.view(torch.int16))


def test_fused_experts_opcheck():
    """torch.library.opcheck on torch.ops.fp4gemm.fused_experts: schema, fake (meta) kernel,
    autograd registration and AOT dispatch agree with the real kernel."""
    p = _problem("nvfp4", "nvfp4", e=8, h=128, i=64, k=2, t=12, seed=73)
    args = (cuda(p["x"]), cuda(p["w13"]), cuda(_blocked(p["s13"])), cuda(p["w2"]), cuda(_blocked(p["s2"])),
            cuda(p["wts"]), cuda(p["ids"]), None, None, None, "silu", "nvfp4", "", "blocked", 1.0, 1.0)
    torch.library.opcheck(torch.ops.fp4gemm.fused_experts.default, args)


@pytest.mark.parametrize("ids_dtype,w_dtype", [(torch.int32, torch.float32), (torch.int64, torch.bfloat16)])
def test_device_combine_is_the_host_combine_bit_for_bit(ids_dtype, w_dtype):
    """fp4gemm.ep.combine on CUDA tensors (fp4gemm::moe_combine, one kernel) against the host
    combine (reference::moe_combine, the layer's rule) on the same values: equal bits, ids outside
    [0, E) skipped, every output written (NaN-poisoned out)."""
    from fp4gemm import ep

    rng = np.random.default_rng(77)
    t, k, h, e = 37, 6, 264, 16
    y = (rng.standard_normal((t * k, h)) * 4).astype(np.float32).astype(BF16)
    ids = rng.integers(-2, e + 2, (t, k))
    w = rng.uniform(-1, 1, (t, k)).astype(np.float32)
    if w_dtype == torch.bfloat16:
        w = w.astype(BF16).astype(np.float32)  # the values the bf16 weights hold
    want = ep.combine(y, w, ids.astype(np.int64), e)
    out = torch.full((t, h), float("nan"), dtype=torch.bfloat16, device="cuda")
    ep.combine(cuda(y), cuda(w).to(w_dtype), torch.from_numpy(ids).to(ids_dtype).cuda(), e, out=out)
    torch.cuda.synchronize()
    assert np.array_equal(host(out).view(np.uint16), want.view(np.uint16))
    # graph-capturable: the same call captured and replayed with new values in the same buffers
    yd, wd = cuda(y), cuda(w).to(w_dtype)
    idd = torch.from_numpy(ids).to(ids_dtype).cuda()
    ep.combine(yd, wd, idd, e, out=out)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ep.combine(yd, wd, idd, e, out=out)
    y2 = (rng.standard_normal((t * k, h))).astype(np.float32).astype(BF16)
    yd.copy_(cuda(y2))
    g.replay()
    torch.cuda.synchronize()
    assert np.array_equal(host(out).view(np.uint16), ep.combine(y2, w, ids.astype(np.int64), e).view(np.uint16))


@pytest.mark.parametrize("act", ["bf16", "nvfp4"])
def test_batch_invariant_layer_rows_do_not_depend_on_the_batch(act):
    """MoeLayer(batch_invariant=True): a token's output row is the same bits alone (T = 1) and inside
    batches of other random tokens (T 37, 200; the probe at a random place) -- shapes where the
    default schedule splits tiles' K by stream-K at some of these sizes (E 64, H 4096, top-8)."""
    e, h, i, k = 64, 4096, 1024, 8
    fmt = "nvfp4" if act == "nvfp4" else "mxfp4"
    vec = 16 if fmt == "nvfp4" else 32
    g = torch.Generator(device="cuda").manual_seed(int(np.random.default_rng().integers(1 << 30)))

    def weights(rows, cols):
        w = torch.randint(0, 256, (e, rows, cols // 2), generator=g, dtype=torch.uint8, device="cuda")
        lo, hi = (0x28, 0x39) if fmt == "nvfp4" else (120, 128)  # normal-range scales
        return w, torch.randint(lo, hi, (e, rows, cols // vec), generator=g, device="cuda").to(torch.uint8)

    w13, s13 = weights(2 * i, h)
    w2, s2 = weights(h, i)
    kw = dict(a1_scale=0.05, a2_scale=0.05) if act == "nvfp4" else {}
    layer = moe.MoeLayer(w13, s13, w2, s2, max_tokens=256, topk=k, act_format=act, scale_layout="linear",
                         batch_invariant=True, **kw)
    default = moe.MoeLayer(w13, s13, w2, s2, max_tokens=256, topk=k, act_format=act, scale_layout="linear", **kw)
    rng = np.random.default_rng()
    differ_default = 0
    for _ in range(3):
        x = torch.randn((1, h), generator=g, device="cuda").to(torch.bfloat16)
        ids = torch.tensor(rng.permutation(e)[:k][None], dtype=torch.int32, device="cuda")
        w = torch.rand((1, k), generator=g, device="cuda")
        alone = layer.run(x, ids, w).clone()
        alone_default = default.run(x, ids, w).clone()
        assert not torch.isnan(alone.float()).any()
        for t in (37, 200):
            xs = torch.randn((t, h), generator=g, device="cuda").to(torch.bfloat16)
            all_ids = torch.tensor(np.stack([rng.permutation(e)[:k] for _ in range(t)]), dtype=torch.int32,
                                   device="cuda")
            ws = torch.rand((t, k), generator=g, device="cuda")
            at = int(rng.integers(0, t))
            xs[at], all_ids[at], ws[at] = x[0], ids[0], w[0]
            out = torch.full((t, h), float("nan"), dtype=torch.bfloat16, device="cuda")
            layer.run(xs, all_ids, ws, out=out)
            assert torch.equal(out[at].view(torch.int16), alone[0].view(torch.int16)), (
                f"{act}: the probe's row changed inside a batch of {t} with batch_invariant=True")
            # the invariant layer's rows are the default layer's up to the FP32 summation order: a
            # different order can flip a bf16 rounding of y or of the intermediate, which a row's
            # cancellation can blow up in one element (seen: 288 in 7650), so the bound is on each
            # row's error relative to the row, not per element
            got_default = default.run(xs, all_ids, ws).float()
            row_err = (out.float() - got_default).norm(dim=1) / got_default.norm(dim=1).clamp_min(1e-30)
            assert float(row_err.max()) < 1e-2, f"{act}: rows differ by up to {float(row_err.max()):.3g} (relative L2)"
            assert float((out.float() - got_default).abs().max()) <= 0.05 * float(got_default.abs().max())
            differ_default += int(not torch.equal(got_default[at].view(torch.int16), alone_default[0].view(torch.int16)))
    print(f"\n{act}: the default layer's probe row differed from the probe alone in {differ_default} of 6 batches")


def test_decode_layers_of_different_sizes_run_in_any_order():
    """Two decode-path layers, the second planned for far fewer staged tokens (decode_tokens x H):
    the first still runs, and right (a kernel attribute set per plan once lowered the first
    layer's shared memory under its launches: cudaErrorInvalidValue, found by the random tier)."""
    outs = []
    layers = []
    for e, h, i, dec in ((4, 2048, 256, 8), (3, 128, 128, 1)):
        g = torch.Generator(device="cuda").manual_seed(int(np.random.default_rng().integers(1 << 30)))
        w13 = torch.randint(0, 256, (e, 2 * i, h // 2), generator=g, dtype=torch.uint8, device="cuda")
        s13 = torch.randint(118, 128, (e, 2 * i, h // 32), generator=g, device="cuda").to(torch.uint8)
        w2 = torch.randint(0, 256, (e, h, i // 2), generator=g, dtype=torch.uint8, device="cuda")
        s2 = torch.randint(118, 128, (e, h, i // 32), generator=g, device="cuda").to(torch.uint8)
        kw = dict(act_format="bf16", scale_layout="linear", activation="silu", max_tokens=8, topk=2)
        fast = moe.MoeLayer(w13, s13, w2, s2, decode_tokens=dec, **kw)
        general = moe.MoeLayer(w13, s13, w2, s2, decode_tokens=0, **kw)
        layers.append((fast, general, h, e))
    for fast, general, h, e in layers + layers[::-1]:
        for t in range(1, 4):
            x = torch.randn((t, h), device="cuda").to(torch.bfloat16)
            ids = torch.stack([torch.randperm(e, device="cuda")[:2] for _ in range(t)]).to(torch.int32)
            w = torch.rand((t, 2), device="cuda")
            got, want = fast.run(x, ids, w).float(), general.run(x, ids, w).float()
            assert torch.isfinite(got).all()
            assert ((got - want).norm() / want.norm()).item() < 2.0**-8
            outs.append(t)
    assert len(outs) == 12


@pytest.mark.parametrize("activation", ["swigluoai", "silu"])
def test_decode_path_matches_the_general_path(activation):
    """W4A16 runs of T <= 8 take the decode path (two kernels, MoeLayerOptions::decode_tokens): for
    every T of 1..8, with random routings (a token listing one expert twice included), its output
    against the general path's (decode_tokens=0) within the FP32 summation-order difference, every
    element finite, and a graph replay with new routing values giving what a direct run gives. Real
    layer sizes (gpt-oss-120b H 2880 I 2880 top-4, Qwen3-30B-A3B H 2048 I 768 top-8), E 32."""
    e, (h, i, k) = 32, ((2880, 2880, 4) if activation == "swigluoai" else (2048, 768, 8))
    g = torch.Generator(device="cuda").manual_seed(int(np.random.default_rng().integers(1 << 30)))
    w13 = torch.randint(0, 256, (e, 2 * i, h // 2), generator=g, dtype=torch.uint8, device="cuda")
    s13 = torch.randint(118, 128, (e, 2 * i, h // 32), generator=g, device="cuda").to(torch.uint8)
    w2 = torch.randint(0, 256, (e, h, i // 2), generator=g, dtype=torch.uint8, device="cuda")
    s2 = torch.randint(118, 128, (e, h, i // 32), generator=g, device="cuda").to(torch.uint8)
    kw = dict(act_format="bf16", scale_layout="linear", activation=activation, max_tokens=16, topk=k)
    fast = moe.MoeLayer(w13, s13, w2, s2, decode_tokens=8, **kw)
    general = moe.MoeLayer(w13, s13, w2, s2, decode_tokens=0, **kw)
    assert "decode path for T <= 8" in fast.describe() and "no decode path" in general.describe()
    rng = np.random.default_rng()
    for t in range(1, 9):
        x = torch.randn((t, h), generator=g, device="cuda").to(torch.bfloat16)
        ids = np.stack([rng.permutation(e)[:k] for _ in range(t)])
        ids[0, 1] = ids[0, 0]  # a repeated expert: two slots of it
        ids = torch.tensor(ids, dtype=torch.int32, device="cuda")
        w = torch.rand((t, k), generator=g, device="cuda")
        got = fast.run(x, ids, w).float()
        want = general.run(x, ids, w).float()
        assert torch.isfinite(got).all(), f"T {t}: non-finite output"
        err = ((got - want).norm() / want.norm()).item()
        assert err < 2.0**-8, f"T {t}: decode vs general relative error {err}"
    # graph capture and replay with new routing values in the same buffers
    t = 5
    x = torch.randn((t, h), generator=g, device="cuda").to(torch.bfloat16)
    ids = torch.tensor(np.stack([rng.permutation(e)[:k] for _ in range(t)]), dtype=torch.int32, device="cuda")
    w = torch.rand((t, k), generator=g, device="cuda")
    out = torch.empty((t, h), dtype=torch.bfloat16, device="cuda")
    fast.run(x, ids, w, out=out)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
        fast.run(x, ids, w, out=out)
    torch.cuda.current_stream().wait_stream(s)
    for _ in range(3):
        ids.copy_(torch.tensor(np.stack([rng.permutation(e)[:k] for _ in range(t)]), dtype=torch.int32))
        x.copy_(torch.randn((t, h), generator=g, device="cuda").to(torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        direct = fast.run(x, ids, w)
        assert torch.equal(out.view(torch.int16), direct.view(torch.int16)), "graph replay differs from a direct run"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_biases_on_both_paths_match_the_host_layer(dtype):
    """gpt-oss's expert biases on CUDA (w13_bias before the activation, w2_bias before the combine):
    the decode path (T 1, 3) and the general path (T 24) against the host layer (the reference
    composition) on the same arrays, then both bias arrays rewritten in place and the next runs
    checked against the host layer on the new values. gpt-oss layout (swigluoai, interleaved), W4A16."""
    e, h, i, k = 16, 512, 256, 4
    rng = np.random.default_rng()
    g = torch.Generator(device="cuda").manual_seed(int(rng.integers(1 << 30)))
    w13 = torch.randint(0, 256, (e, 2 * i, h // 2), generator=g, dtype=torch.uint8, device="cuda")
    s13 = torch.randint(118, 128, (e, 2 * i, h // 32), generator=g, device="cuda").to(torch.uint8)
    w2 = torch.randint(0, 256, (e, h, i // 2), generator=g, dtype=torch.uint8, device="cuda")
    s2 = torch.randint(118, 128, (e, h, i // 32), generator=g, device="cuda").to(torch.uint8)
    b13 = (torch.rand((e, 2 * i), generator=g, device="cuda") * 4 - 2).to(dtype)
    b2 = (torch.rand((e, h), generator=g, device="cuda") * 4 - 2).to(dtype)
    kw = dict(act_format="bf16", scale_layout="linear", activation="swigluoai", gate_up="interleaved",
              max_tokens=32, topk=k, decode_tokens=8)
    layer = moe.MoeLayer(w13, s13, w2, s2, w13_bias=b13, w2_bias=b2, **kw)
    assert "decode path for T <= 8" in layer.describe()
    np_bias = (lambda t: t.float().cpu().numpy().astype(BF16 if dtype == torch.bfloat16 else np.float32))
    for round_ in range(2):
        if round_ == 1:
            b13.copy_((torch.rand((e, 2 * i), generator=g, device="cuda") * 6 - 3).to(dtype))
            b2.copy_((torch.rand((e, h), generator=g, device="cuda") * 6 - 3).to(dtype))
        host = moe.MoeLayer(w13.cpu().numpy(), s13.cpu().numpy(), w2.cpu().numpy(), s2.cpu().numpy(),
                            w13_bias=np_bias(b13), w2_bias=np_bias(b2), **kw)
        for t in (1, 3, 24):
            x = torch.randn((t, h), generator=g, device="cuda").to(torch.bfloat16)
            ids = torch.tensor(np.stack([rng.permutation(e)[:k] for _ in range(t)]), dtype=torch.int32, device="cuda")
            w = torch.rand((t, k), generator=g, device="cuda")
            out = torch.full((t, h), float("nan"), dtype=torch.bfloat16, device="cuda")
            layer.run(x, ids, w, out=out)
            want = host.run(x.cpu().float().numpy().astype(BF16), ids.cpu().numpy(), w.cpu().numpy())
            got = out.float().cpu().numpy()
            assert np.isfinite(got).all()
            want = want.astype(np.float64)
            rel = np.linalg.norm(got - want) / np.linalg.norm(want)
            assert rel < 5e-3, (round_, t, rel)


def test_fused_experts_takes_the_biases_on_every_entry_point():
    """fused_experts with gpt-oss's biases (moe.fused_experts, ops.fused_experts, the torch op with
    the biases as its last two arguments): bit for bit the MoeLayer given the same biases, the bias
    arrays read at every call (rewritten in place, then replaced by new arrays), and the biases'
    absence a different cache entry (no stale plan)."""
    e, h, i, k, t = 16, 512, 256, 4, 5
    g = torch.Generator(device="cuda").manual_seed(int(np.random.default_rng().integers(1 << 30)))
    w13 = torch.randint(0, 256, (e, 2 * i, h // 2), generator=g, dtype=torch.uint8, device="cuda")
    s13 = torch.randint(118, 128, (e, 2 * i, h // 32), generator=g, device="cuda").to(torch.uint8)
    w2 = torch.randint(0, 256, (e, h, i // 2), generator=g, dtype=torch.uint8, device="cuda")
    s2 = torch.randint(118, 128, (e, h, i // 32), generator=g, device="cuda").to(torch.uint8)
    kw = dict(act_format="bf16", scale_layout="linear", activation="swigluoai", gate_up="interleaved")
    x = torch.randn((t, h), generator=g, device="cuda").to(torch.bfloat16)
    ids = torch.stack([torch.randperm(e, generator=g, device="cuda")[:k] for _ in range(t)]).to(torch.int32)
    w = torch.rand((t, k), generator=g, device="cuda")

    def biases():
        return ((torch.rand((e, 2 * i), generator=g, device="cuda") * 4 - 2).to(torch.bfloat16),
                (torch.rand((e, h), generator=g, device="cuda") * 4 - 2).to(torch.bfloat16))

    def want(b13, b2):
        layer = moe.MoeLayer(w13, s13, w2, s2, max_tokens=t, topk=k, w13_bias=b13, w2_bias=b2, **kw)
        return layer.run(x, ids, w)

    b13, b2 = biases()
    calls = [("moe.fused_experts", lambda: moe.fused_experts(x, w13, s13, w2, s2, w, ids, w13_bias=b13, w2_bias=b2, **kw)),
             ("ops.fused_experts", lambda: ops.fused_experts(x, w13, s13, w2, s2, w, ids, w13_bias=b13, w2_bias=b2, **kw)),
             ("torch.ops.fp4gemm.fused_experts",
              lambda: torch.ops.fp4gemm.fused_experts(x, w13, s13, w2, s2, w, ids, None, None, None, "swigluoai", "bf16",
                                                      "interleaved", "linear", 1.0, 1.0, b13, b2))]
    no_bias = moe.fused_experts(x, w13, s13, w2, s2, w, ids, **kw)
    for round_ in range(3):
        if round_ == 1:  # rewritten in place
            n13, n2 = biases()
            b13.copy_(n13), b2.copy_(n2)
        elif round_ == 2:  # new arrays
            b13, b2 = biases()
        ref = want(b13, b2)
        assert not torch.equal(ref, no_bias)
        for name, call in calls:
            got = call()
            assert torch.equal(got.view(torch.int16), ref.view(torch.int16)), (round_, name)
    assert torch.equal(moe.fused_experts(x, w13, s13, w2, s2, w, ids, **kw).view(torch.int16), no_bias.view(torch.int16))
