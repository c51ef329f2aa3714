"""GPU tier: object lifetimes and in-place updates (issue: silent all-NaN layers once earlier layers
are gone, a segfaulting describe()).

Root cause reproduced here: a plan's set-up reads the caller's weights on the device (w13's paired
scale copy, linear scale conversions, the MXFP4 scale scan, alphas folded with a1/a2_scale), and
it used to do so on a private stream that did not wait for the caller's stream. Weights quantised
on the GPU just before (``fp4gemm.quantize`` enqueues and returns) were read before the quantiser
had written them: the plan copied whatever the caching allocator's recycled memory held -- often
the bytes of freed tensors, NaN scale codes among them. These tests make that window wide and the
stale bytes NaN on purpose (a long ``torch.cuda._sleep`` ahead of the quantiser, memory filled
with 0xFF and freed first), so the old behaviour fails every time, not by luck.

Also: every CUDA layer's describe() / repr() (a subprocess: it used to segfault), in-place weight
and scale updates seen by the next call (torch's version counter), a re-pointed weight refused, and
the MoE plan cache served for new scales at a recycled address."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tier needs torch and a CUDA device)")
ml_dtypes = pytest.importorskip("ml_dtypes")

import fp4gemm  # noqa: E402
from fp4gemm import moe  # noqa: E402

BF16 = ml_dtypes.bfloat16


@pytest.fixture(autouse=True)
def _fast_kernel_only(backend):
    if backend != "auto":
        pytest.skip(f"the MoE layer runs only the fast kernel (sm_90); this tier runs backend {backend!r}")


def _host(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(BF16)
    return t.cpu().numpy()


def _poison_allocator(mib=256):
    """Fills memory the caching allocator will hand out again with 0xFF bytes (NaN as E4M3 and as
    E8M0 scale codes) and frees it."""
    junk = [torch.full((mib << 20,), 0xFF, dtype=torch.uint8, device="cuda")]
    # (the small pool too: allocations under 1 MiB come from 2 MiB segments of their own)
    junk += [torch.full((n,), 0xFF, dtype=torch.uint8, device="cuda") for n in [1 << 16, 1 << 18, 1 << 19] * 24]
    del junk


def _stall(ms=30):
    """Holds the current stream busy for about `ms` (work enqueued after it waits)."""
    torch.cuda._sleep(int(ms * 2_000_000))  # ~2 GHz: cycles


def _gpu_weights(e, i, h, fmt, layout, seed):
    """w13 [E, 2I, H/2], its scales, w2 [E, H, I/2], its scales, quantised ON THE GPU from fresh
    random bf16 values (nothing synchronises: the quantiser may still be running on return)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    vec = 16 if fmt == "nvfp4" else 32

    def q(rows, k):
        w = torch.randn((e * rows, k), generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16) * 0.05
        p, s = fp4gemm.quantize(w, fmt, "linear")
        p = p.view(e, rows, k // 2)
        s = s.view(e, rows, k // vec)
        if layout == "blocked":
            s = torch.stack([_blocked_gpu(s[x]) for x in range(e)])
        return p, s

    w13, s13 = q(2 * i, h)
    w2, s2 = q(h, i)
    return w13, s13, w2, s2


def _blocked_gpu(s):
    return torch.from_numpy(fp4gemm.linear_to_blocked(s.cpu().numpy())).cuda()


def _routing(t, e, k, seed):
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.permutation(e)[:k] for _ in range(t)]).astype(np.int32)
    wts = rng.uniform(0.1, 1.0, (t, k)).astype(np.float32)
    x = rng.standard_normal((t, 0)).astype(np.float32)  # (shape only)
    del x
    return torch.from_numpy(ids).cuda(), torch.from_numpy(wts).cuda()


def _reference(w13, s13, w2, s2, x, ids, wts, *, act_format, activation, layout):
    """The host layer (reference::moe_layer) on copies of the same arrays (synchronises)."""
    k = ids.shape[1]
    fmt = "nvfp4" if act_format == "nvfp4" else "mxfp4"
    del fmt
    href = moe.MoeLayer(_host(w13), _host(s13), _host(w2), _host(s2), max_tokens=x.shape[0], topk=k,
                        act_format=act_format, activation=activation, scale_layout=layout)
    return href.run(_host(x), _host(ids), _host(wts)).astype(np.float32)


def _close(got, want):
    g = _host(got).astype(np.float32)
    assert not np.isnan(g).any(), f"{np.isnan(g).sum()} of {g.size} output elements are NaN"
    rel = np.linalg.norm(g.astype(np.float64) - want) / max(np.linalg.norm(want.astype(np.float64)), 1e-30)
    assert rel < 2.0**-7, rel
    assert np.mean(g == want) > 0.5


# Shapes of the report's models, scaled down (E, I, H, T): a layer, then the next one built on
# freshly quantised weights after the previous ones were dropped.
_SHAPES = [(16, 192, 512, 8), (8, 320, 768, 16), (32, 128, 512, 12)]


@pytest.mark.parametrize("act_format,layout", [("bf16", "linear"), ("bf16", "blocked"), ("nvfp4", "linear"),
                                               ("mxfp4", "linear")])
def test_layer_built_right_after_the_gpu_quantiser(act_format, layout):
    fmt = "nvfp4" if act_format == "nvfp4" else "mxfp4"
    for n, (e, i, h, t) in enumerate(_SHAPES):
        _poison_allocator()
        _stall()  # the quantiser below runs ~30 ms after the layer's set-up is enqueued
        w13, s13, w2, s2 = _gpu_weights(e, i, h, fmt, layout, seed=100 + n)
        layer = moe.MoeLayer(w13, s13, w2, s2, max_tokens=t, topk=2, act_format=act_format, scale_layout=layout)
        x = (torch.randn((t, h), device="cuda") * 0.5).to(torch.bfloat16)
        ids, wts = _routing(t, e, 2, seed=n)
        out = torch.full((t, h), float("nan"), dtype=torch.bfloat16, device="cuda")
        layer.run(x, ids, wts, out=out)
        torch.cuda.synchronize()
        layer.check()
        _close(out, _reference(w13, s13, w2, s2, x, ids, wts, act_format=act_format, activation="silu",
                               layout=layout))
        del layer, w13, s13, w2, s2
        torch.cuda.empty_cache()


def test_fused_experts_loop_over_fresh_weights():
    """The report's first reproduction: fused_experts over model shapes, fresh GPU-quantised
    weights each iteration, the previous ones dropped."""
    for n, (e, i, h, t) in enumerate(_SHAPES * 2):
        # (the run's inputs first: copying host arrays to the device synchronises)
        x = (torch.randn((t, h), device="cuda") * 0.5).to(torch.bfloat16)
        ids, wts = _routing(t, e, 2, seed=n)
        _poison_allocator()
        _stall()
        w13, s13, w2, s2 = _gpu_weights(e, i, h, "mxfp4", "linear", seed=200 + n)
        out = moe.fused_experts(x, w13, s13, w2, s2, wts, ids, act_format="bf16", scale_layout="linear")
        torch.cuda.synchronize()
        _close(out, _reference(w13, s13, w2, s2, x, ids, wts, act_format="bf16", activation="silu",
                               layout="linear"))
        del w13, s13, w2, s2, out


def test_moe_gemm_linear_scales_right_after_the_gpu_quantiser():
    e, n_, k, rows = 8, 256, 512, 64
    for it in range(3):
        a = torch.randn((rows, k), device="cuda").to(torch.bfloat16)
        ap, as_ = fp4gemm.quantize(a, "nvfp4", "linear")
        offsets = torch.tensor(np.linspace(0, rows, e + 1).astype(np.int32), device="cuda")  # (synchronises)
        _poison_allocator()
        _stall()
        g = torch.Generator(device="cuda").manual_seed(it)
        w = torch.randn((e * n_, k), generator=g, device="cuda").to(torch.bfloat16) * 0.05
        wp, ws = fp4gemm.quantize(w, "nvfp4", "linear")
        wp, ws = wp.view(e, n_, k // 2), ws.view(e, n_, k // 16)
        plan = moe.MoeGemm(wp, ws, scale_layout="linear", capacity=rows)
        got = plan.run(ap, as_, expert_offsets=offsets)
        torch.cuda.synchronize()
        plan.check()
        href = moe.MoeGemm(_host(wp), _host(ws), scale_layout="linear", capacity=rows)
        want = href.run(_host(ap), _host(as_), expert_offsets=_host(offsets))
        assert not torch.isnan(got.float()).any()
        assert np.array_equal(_host(got).view(np.uint16), want.view(np.uint16))


_DESCRIBE = textwrap.dedent("""
    import itertools, torch, fp4gemm
    from fp4gemm import moe
    e, h, i = 8, 512, 256
    for act, activation, gate_up in itertools.product(["nvfp4", "mxfp4", "bf16"], ["silu", "swigluoai"],
                                                      ["stacked", "interleaved"]):
        fmt = "nvfp4" if act == "nvfp4" else "mxfp4"
        vec = 16 if fmt == "nvfp4" else 32
        w13 = torch.randint(0, 256, (e, 2 * i, h // 2), dtype=torch.uint8, device="cuda")
        s13 = torch.full((e, 2 * i, h // vec), 0x38 if fmt == "nvfp4" else 127, dtype=torch.uint8, device="cuda")
        w2 = torch.randint(0, 256, (e, h, i // 2), dtype=torch.uint8, device="cuda")
        s2 = torch.full((e, h, i // vec), 0x38 if fmt == "nvfp4" else 127, dtype=torch.uint8, device="cuda")
        layer = moe.MoeLayer(w13, s13, w2, s2, max_tokens=4, topk=2, act_format=act, activation=activation,
                             gate_up=gate_up, scale_layout="linear")
        # as the report built them: GPU-quantised, reshaped views
        q13 = fp4gemm.quantize(torch.randn((e * 2 * i, h), device="cuda").to(torch.bfloat16), fmt, "linear")
        q2 = fp4gemm.quantize(torch.randn((e * h, i), device="cuda").to(torch.bfloat16), fmt, "linear")
        other = moe.MoeLayer(q13[0].view(e, 2 * i, h // 2), q13[1].view(e, 2 * i, h // vec), q2[0].view(e, h, i // 2),
                             q2[1].view(e, h, i // vec), max_tokens=64, topk=2, act_format=act, activation=activation,
                             gate_up=gate_up, scale_layout="linear")
        assert "MoE layer" in other.describe() and repr(other).startswith("fp4gemm.moe.MoeLayer(")
        d = layer.describe()
        r = repr(layer)
        assert "MoE layer" in d and "GEMM1" in d and r.startswith("fp4gemm.moe.MoeLayer("), (d, r)
        print("ok", act, activation, gate_up)
""")


def test_describe_and_repr_of_every_cuda_layer():
    """In a subprocess: a segfault fails this test instead of ending the session."""
    r = subprocess.run([sys.executable, "-c", _DESCRIBE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"rc {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr[-3000:]}"
    assert r.stdout.count("ok ") == 12, r.stdout


@pytest.mark.parametrize("act_format,layout", [("bf16", "linear"), ("nvfp4", "blocked"), ("mxfp4", "linear")])
def test_in_place_weight_updates_are_seen(act_format, layout):
    """RL weight sync: w.copy_(new) on every weight and scale array; the next eager call, the
    fused_experts cache and a graph replayed after reload_weights() all see the new weights."""
    fmt = "nvfp4" if act_format == "nvfp4" else "mxfp4"
    e, i, h, t = 8, 128, 256, 8
    w13, s13, w2, s2 = _gpu_weights(e, i, h, fmt, layout, seed=1)
    layer = moe.MoeLayer(w13, s13, w2, s2, max_tokens=t, topk=2, act_format=act_format, scale_layout=layout)
    x = (torch.randn((t, h), device="cuda") * 0.5).to(torch.bfloat16)
    ids, wts = _routing(t, e, 2, seed=3)
    before = layer.run(x, ids, wts)
    moe.fused_experts(x, w13, s13, w2, s2, wts, ids, act_format=act_format, scale_layout=layout)
    # a graph captured before the update
    static_out = torch.empty_like(before)
    layer.run(x, ids, wts, out=static_out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layer.run(x, ids, wts, out=static_out)
    n13, n_s13, n2, n_s2 = _gpu_weights(e, i, h, fmt, layout, seed=2)
    for dst, src in ((w13, n13), (s13, n_s13), (w2, n2), (s2, n_s2)):
        dst.copy_(src)
    want = _reference(n13, n_s13, n2, n_s2, x, ids, wts, act_format=act_format, activation="silu", layout=layout)
    after = layer.run(x, ids, wts)
    torch.cuda.synchronize()
    _close(after, want)
    assert not torch.equal(before, after)
    fused = moe.fused_experts(x, w13, s13, w2, s2, wts, ids, act_format=act_format, scale_layout=layout)
    torch.cuda.synchronize()
    assert torch.equal(fused.view(torch.int16), after.view(torch.int16))
    # the graph captured before the update replays the layer's copies, reloaded by the eager run
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out.view(torch.int16), after.view(torch.int16))
    if layout != "linear":
        return
    # a write torch's version counter does not see (a kernel writing through the pointers):
    # reload_weights() makes the copies again, and replays see them
    v13 = s13._version
    g = torch.Generator(device="cuda").manual_seed(9)
    src = torch.randn((e * 2 * i, h), generator=g, device="cuda").to(torch.bfloat16) * 0.05
    vec = 16 if fmt == "nvfp4" else 32
    fp4gemm._fp4gemm.quantize_activations(src, w13.view(e * 2 * i, h // 2), s13.view(e * 2 * i, h // vec), fmt,
                                          "linear", 1.0, torch.cuda.current_stream().cuda_stream)
    assert s13._version == v13, "the write was seen by torch: this check needs another writer"
    layer.reload_weights()
    want = _reference(w13, s13, w2, s2, x, ids, wts, act_format=act_format, activation="silu", layout=layout)
    _close(layer.run(x, ids, wts), want)
    graph.replay()
    torch.cuda.synchronize()
    _close(static_out, want)


def test_repointed_weight_is_refused():
    e, i, h, t = 4, 64, 128, 4
    w13, s13, w2, s2 = _gpu_weights(e, i, h, "nvfp4", "blocked", seed=5)
    layer = moe.MoeLayer(w13, s13, w2, s2, max_tokens=t, topk=1)
    x = torch.randn((t, h), device="cuda").to(torch.bfloat16)
    ids, wts = _routing(t, e, 1, seed=1)
    layer.run(x, ids, wts)
    w2.set_(w2.clone())  # the layer's memory is kept alive, but the tensor now points elsewhere
    with pytest.raises(fp4gemm.ArgumentError, match="w2"):
        layer.run(x, ids, wts)


def test_cached_moe_plan_serves_new_scales_at_a_recycled_address():
    """moe.grouped_gemm caches plans on the weights' addresses; linear scales are copied into the
    plan. New scales landing at a freed tensor's address must not be served the old copy."""
    e, n_, k, rows = 4, 128, 256, 32
    a = torch.randn((rows, k), device="cuda").to(torch.bfloat16)
    ap, as_ = fp4gemm.quantize(a, "nvfp4", "linear")
    offsets = torch.tensor(np.linspace(0, rows, e + 1).astype(np.int32), device="cuda")
    wp = fp4gemm.quantize(torch.randn((e * n_, k), device="cuda").to(torch.bfloat16), "nvfp4", "linear")[0]
    wp = wp.view(e, n_, k // 2)
    addresses = []
    for seed in range(4):
        g = torch.Generator(device="cuda").manual_seed(seed)
        w = torch.randn((e * n_, k), generator=g, device="cuda").to(torch.bfloat16) * (seed + 1)
        ws = fp4gemm.quantize(w, "nvfp4", "linear")[1].view(e, n_, k // 16)
        addresses.append(ws.data_ptr())
        got = moe.grouped_gemm(ap, as_, wp, ws, offsets, scale_layout="linear")
        want = moe.MoeGemm(_host(wp), _host(ws), scale_layout="linear", capacity=rows).run(
            _host(ap), _host(as_), expert_offsets=_host(offsets))
        torch.cuda.synchronize()
        assert np.array_equal(_host(got).view(np.uint16), want.view(np.uint16)), seed
        del ws, w, got
    print("scale addresses:", [hex(x) for x in addresses])
