"""Random call sequences over fp4gemm's MoE Python API (property-based: hypothesis, derandomised;
a seeded NumPy driver where hypothesis is not installed), checking every result.

HOST tier (no marker: NumPy arrays, the exact CPU reference; no torch needed). A sequence draws
actions on a small world of weight sets (nvfp4 / mxfp4 weights, linear / blocked scales, nvfp4 /
mxfp4 / bf16 activations, silu / swigluoai, stacked / interleaved gate-up, E 1..8, H 64..256,
I 64..128, per-expert alphas or none, global scales) and objects built on them:

* new weight sets; ``moe.MoeLayer`` and ``moe.MoeGemm`` (GLU epilogue or plain, contiguous or
  masked, alpha none / number / array) built on them; objects dropped (del + gc) in any order;
* weights, scales and per-expert alphas updated IN PLACE (``arr[lo:hi] = new``): the next run must
  see them (host runs read the arrays at every run); a MoeGemm's alpha array likewise;
* weight sets detached (our references dropped, junk allocated over the freed memory): objects
  built on them keep their arrays alive and stay right;
* runs with random T (0 included), routings (uniform, one hot expert, most experts empty,
  duplicates, ids outside [0, E) -- -1, E, the dtype's extremes -- and all dropped), int32 /
  int64 ids, float32 / bf16 weights, NaN-poisoned ``out`` or none, pre-quantised tokens
  (``hidden_fp4``), a device-side ``token_count`` and runs stopped before the combine
  (``expert_rows`` / ``row_of``, GPU); ``moe.fused_experts``, ``moe.grouped_gemm`` and
  ``fp4gemm.dual_gemm`` one-call paths (the dual GEMM on arrays of its own: new, again through the
  call memo, refilled in place, up weights of the wrong size refused); cache clears;
  a refused call (too many tokens, wrong top-k) followed by a good one; describe() / repr() /
  every property.

Every layer output must be bit for bit the composition of public host pieces (fresh MoeGemm runs
for GEMM1 + GLU and GEMM2, fp4gemm.quantize, ep.combine: _sequences.compose_layer) on the values
the test knows the weights hold, and, element-wise, a float64 NumPy layer (decoders written from
SPEC): the intermediate within the FP32 epilogue's bound, the output within a bf16 ulp of each
term and of the sum; every plain MoE GEMM output bit for bit the float64 product rounded once, rows
no expert owns untouched (NaN); every GLU output within the FP32 epilogue's bound; no NaN anywhere
(no input holds NaN); inputs and weights unchanged by the runs. After in-place updates objects are
sometimes asked to reload_weights() (a no-op on the host, which reads the arrays at every run).

GPU tier (``gpu`` marker, torch + CUDA): the same machine on CUDA tensors (blocked scales; GPU MODE
values, power-of-two alphas, so the device's FP32 sums are exact), each result checked against the
host (NumPy) layer / MoeGemm on copies of the same data (layer: relative error < 2^-7, more than
half the elements bit-equal, no NaN; MoeGemm: bit for bit), plus: weights quantised ON THE GPU with
``fp4gemm.quantize`` behind a sleeping kernel and used at once by a new layer / fused_experts /
ops.fused_experts (plan-time reads must be ordered after the quantiser; MXFP4 weights with scale
codes > 128 make a stale read visible); weights dropped (+ torch.cuda.empty_cache()) and new ones
of the same shapes allocated at the freed addresses; in-place ``copy_`` of weights and scales seen
by the next eager call and by graph replays; CUDA graphs replayed with new routings written into
the captured inputs; two threads running two layers on their own streams; check() after
synchronising; describe() / repr() of CUDA objects; writes torch does not count (through a DLPack
alias) followed by reload_weights() (and moe.clear_layer_cache() for fused_experts' plans), as
docs/PYTHON.md "Lifetimes and in-place updates" prescribes; before a replay of a captured
MoeLayer.run, weights, scales and alphas rewritten and reload_weights() called.

LONG mode: FP4GEMM_RANDOM_LONG=N runs N sequences per tier (FP4GEMM_RANDOM_SEED=S draws other
sequences than the default derandomised ones). The number of sequences, library calls and checked
results is printed at the end of the module (and in the terminal summary)."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
import threading

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import fp4gemm  # noqa: E402

pytestmark = pytest.mark.usefixtures("release_pinned_plans")  # (conftest.py)
from fp4gemm import ep, moe  # noqa: E402

import _sequences as S  # noqa: E402
from _sequences import BF16  # noqa: E402

try:
    import hypothesis
    from hypothesis import HealthCheck, Phase, given, note, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st
except ImportError:  # the NumPy driver runs the same sequences' machinery
    hypothesis = None

LONG = int(os.environ.get("FP4GEMM_RANDOM_LONG", "0") or 0)
SEED = os.environ.get("FP4GEMM_RANDOM_SEED")
HOST_SEQUENCES = LONG or 120
ALPHAS = ("w13_alpha", "w13_alpha_up", "w2_alpha")
GPU_SEQUENCES = LONG or 12


class _Summary:
    """A plugin registered by the module's fixture: the counts in pytest's terminal summary (so
    they show without -s)."""

    def pytest_terminal_summary(self, terminalreporter):
        for tier in ("host", "gpu"):
            if S.COUNTS[tier]["calls"]:
                terminalreporter.write_sep("=", S.summary(tier), bold=True)


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    pm = request.config.pluginmanager
    if not pm.has_plugin("fp4gemm-random-sequences"):
        pm.register(_Summary(), "fp4gemm-random-sequences")
    yield
    for tier in ("host", "gpu"):
        if S.COUNTS[tier]["calls"]:
            print("\n" + S.summary(tier))  # (with -s, at once)


def _drive(tier: str, n: int, body, shrink: bool) -> None:
    """body(draw) for n sequences: hypothesis over st.data() (derandomised unless
    FP4GEMM_RANDOM_SEED is set), or the NumPy driver."""
    S.DRIVER[tier] = "hypothesis" if hypothesis is not None else "a seeded NumPy driver (hypothesis is not installed)"
    if hypothesis is None:
        base = int(SEED or 0)
        for i in range(n):
            body(S.RngDraw(base * 1_000_003 + i))
        return
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    kw = dict(max_examples=n, deadline=None, database=None, derandomize=SEED is None, phases=phases,
              suppress_health_check=list(HealthCheck), report_multiple_bugs=False)

    @settings(**kw)
    @given(st.data())
    def run(data):
        body(S.HypothesisDraw(data, st))

    if SEED is not None:
        run = hypothesis_seed(int(SEED))(run)
    run()


# ---- the sequence machine: host -------------------------------------------------------------------------


class WeightSet:
    def __init__(self, name, cfg, truth, live, base=None):
        self.name, self.cfg, self.truth = name, cfg, truth
        self.updates = 0  # in-place updates so far
        self.live = live  # the arrays the library was given (None once detached)
        self.base = base if base is not None else live  # what in-place writes go through (GPU: uint8 views)
        self.pieces = None  # GPU: w13 / w2 packed by moe.pack_pieces for layers on pieces (repacked after updates)

    @property
    def attached(self):
        return self.live is not None

    def drop_arrays(self):
        """The sequence forgets this set's arrays (rows, their write views and pieces); objects keep their own."""
        self.live = self.base = self.pieces = None

    def __repr__(self):
        return f"<weights {self.name}>"


class Rec:
    """An object under test: kind 'layer' or 'gemm', built on a weight set."""

    def __init__(self, name, kind, obj, ws, **meta):
        self.name, self.kind, self.obj, self.ws = name, kind, obj, ws
        self.built_at = ws.updates
        self.__dict__.update(meta)

    def __repr__(self):
        return f"<{self.kind} {self.name}>"


class HostSequence:
    tier = "host"
    gpu = False
    MAX_SETS, MAX_OBJS = 3, 4

    def __init__(self, d):
        self.d = d
        self.rng = np.random.default_rng(d.integer(0, 2**32 - 1))
        self.sets, self.objs, self.trace = [], [], []
        self.ids = itertools.count()
        self.executed = set()
        self.dual = None  # the last fp4gemm.dual_gemm call's arrays (act_dual)

    # -- bookkeeping --

    def log(self, text):
        self.trace.append(text)
        if isinstance(self.d, S.HypothesisDraw):
            note(f"{len(self.trace) - 1}. {text}")

    def call(self, n=1):
        S.count(self.tier, "calls", n)

    def checked(self, n=1):
        S.count(self.tier, "checked", n)

    def attached_sets(self):
        return [w for w in self.sets if w.attached]

    def of_kind(self, kind):
        return [o for o in self.objs if o.kind == kind]

    def actions(self):
        """(name, weight, method) of the actions available now. (Hypothesis draws small numbers
        and 0 often: the first entries -- runs, updates -- come up most.)"""
        a = []
        if self.of_kind("layer"):
            a += [("run_layer", 6, self.act_run_layer)]
        if self.attached_sets():
            a += [("update_in_place", 5, self.act_update)]
        if self.of_kind("gemm"):
            a += [("run_gemm", 4, self.act_run_gemm)]
        if self.attached_sets():
            a += [("build_layer", 4, self.act_build_layer), ("fused_experts", 3, self.act_fused),
                  ("build_gemm", 3, self.act_build_gemm), ("grouped_gemm", 2, self.act_grouped),
                  ("detach_weights", 1, self.act_detach)]
        if any(o.kind == "gemm" and o.alpha_kind == "array" for o in self.objs):
            a += [("update_alpha", 2, self.act_update_alpha)]
        if self.of_kind("layer"):
            a += [("bad_call", 1, self.act_bad_call)]
        a += [("new_weights", 3 if len(self.sets) < 2 else 1, self.act_new_weights)]
        if self.objs:
            a += [("describe", 1, self.act_describe), ("drop_object", 1, self.act_drop_object)]
        a += [("clear_caches", 1, self.act_clear_caches), ("dual_gemm", 1, self.act_dual)]
        return a

    def run(self, steps=None, script=None):
        """`steps` actions drawn by weight, or the actions named in `script` (in order; one not
        available at that point is skipped), then finish()."""
        try:
            for i in range(len(script) if script is not None else steps):
                actions = self.actions()  # (name, weight, method)
                if script is not None:
                    table = {n: fn for n, _, fn in actions}
                    if script[i] not in table:
                        continue
                    name, fn = script[i], table[script[i]]
                else:
                    # (a wide draw folded onto the weights: hypothesis favours the ends of small ranges)
                    r = self.d.integer(0, 2**20 - 1) % sum(w for _, w, _ in actions)
                    for name, w, fn in actions:
                        if r < w:
                            break
                        r -= w
                S.count(self.tier, f"action {name}")
                self.executed.add(name)
                fn()
            self.finish()
        except BaseException:
            if not isinstance(self.d, S.HypothesisDraw):
                print(f"\nfailing {self.tier} sequence:\n{S.trace_text(self.trace)}")
            raise
        S.count(self.tier, "sequences")

    def finish(self):
        """Every object runs once more (after everything that happened to its weights), then all is
        dropped and the caches cleared."""
        for o in list(self.objs):
            (self.run_layer if o.kind == "layer" else self.run_gemm)(o)
        self.objs.clear()
        self.sets.clear()
        self.dual = None
        moe.clear_layer_cache()
        gc.collect()

    # -- weight sets --

    def to_live(self, c, t):
        live = dict(w13=t.w13.copy(), s13=S.live_scales(t.s13, c.scale_layout), w2=t.w2.copy(),
                    s2=S.live_scales(t.s2, c.scale_layout))
        for k in ALPHAS:
            live[k] = None if getattr(t, k) is None else getattr(t, k).copy()
        live["w13_bias"], live["w2_bias"] = S.bias_arrays(c, t)
        return live, None

    def add_set(self, c, t, live, base=None):
        if len(self.sets) >= self.MAX_SETS:
            old = self.sets.pop(0)  # forget the oldest (objects keep their arrays)
            old.drop_arrays()
        ws = WeightSet(f"W{next(self.ids)}", c, t, live, base)
        self.sets.append(ws)
        return ws

    def act_new_weights(self, cfg=None):
        c = cfg or S.draw_config(self.d, self.gpu)
        t = S.random_truth(self.rng, c, self.d.choice(["none", "gate", "all"]), self.gpu)
        live, base = self.to_live(c, t)
        ws = self.add_set(c, t, live, base)
        self.log(f"new weights {ws.name}: {c.text()}, alphas {self.alpha_text(t)}")
        return ws

    @staticmethod
    def alpha_text(t):
        return "+".join(k for k in ("w13_alpha", "w13_alpha_up", "w2_alpha") if getattr(t, k) is not None) or "none"

    def pick_set(self):
        return self.d.choice(self.attached_sets())

    def add_obj(self, rec):
        if len(self.objs) >= self.MAX_OBJS:
            old = self.objs.pop(0)
            self.log(f"drop {old.name} (oldest)")
            del old
            gc.collect()
        self.objs.append(rec)

    # -- layers --

    def act_build_layer(self, ws=None):
        ws = ws or self.pick_set()
        c = ws.cfg
        max_tokens = self.d.integer(1, 16)
        topk = self.d.integer(1, min(c.e, 4))
        invariant = self.d.choice([False, True])  # (checked against the host composition either way)
        # the decode path for runs of T <= decode (past 8: the wide kernels, W4A16 MXFP4), never, or by the layer; 512
        # (kDecodeTokensMax): clamped to max_tokens and 512 / topk
        decode = self.d.choice([0, 2, 8, 24, 512, None])
        pieces = self.gpu and self.d.integer(0, 2) == 0  # (GPU: a third of the layers on weights in pieces)
        lv = ws.live
        w13, w2, layout = lv["w13"], lv["w2"], "rows"
        if pieces:  # packed once per weight set, again after each in-place update (repack)
            if ws.pieces is None:
                ws.pieces = dict(w13=moe.pack_pieces(ws.base["w13"], c.gate_up, format=c.fmt),
                                 w2=moe.pack_pieces(ws.base["w2"], format=c.fmt))
                self.call(2)
            w13, w2, layout = ws.pieces["w13"], ws.pieces["w2"], "pieces"
            S.count(self.tier, "layers on pieces")
        layer = moe.MoeLayer(w13, lv["s13"], w2, lv["s2"], max_tokens=max_tokens, topk=topk,
                             w13_alpha=lv["w13_alpha"], w13_alpha_up=lv["w13_alpha_up"], w2_alpha=lv["w2_alpha"],
                             w13_bias=lv["w13_bias"], w2_bias=lv["w2_bias"], batch_invariant=invariant,
                             decode_tokens=decode, weight_layout=layout, **c.layer_kwargs())
        self.call()
        rec = Rec(f"L{next(self.ids)}", "layer", layer, ws, max_tokens=max_tokens, topk=topk, pieces=pieces)
        self.log(f"build {rec.name} = MoeLayer({ws.name}, max_tokens={max_tokens}, topk={topk}, "
                 f"batch_invariant={invariant}, decode_tokens={decode}, weight_layout={layout})")
        self.check_layer_properties(rec)
        if self.gpu:  # both GEMMs planned without stream-K exactly when batch invariant
            d = layer.describe()
            assert (d.count("no stream-K") == 2) is invariant, d
            # the decode path exactly for layers that are not batch invariant and allow it: top-k <= 8,
            # hidden and intermediate sizes multiples of 32 (W4A16 always; W4A4 NVFP4 may have 16)
            decodes = not invariant and decode != 0 and topk <= 8 and c.h % 32 == 0 and c.i % 32 == 0
            assert ("decode path for T <= " in d) is decodes, d
        self.add_obj(rec)

    def check_layer_properties(self, rec):
        layer, c = rec.obj, rec.ws.cfg
        assert (layer.experts, layer.hidden, layer.inter, layer.topk, layer.max_tokens) == (
            c.e, c.h, c.i, rec.topk, rec.max_tokens)
        assert layer.on_host is (not self.gpu)
        d = layer.describe()
        assert isinstance(d, str) and d, d
        assert repr(layer) == f"fp4gemm.moe.MoeLayer({d})"
        assert f"{c.e} experts" in d and f"top-{rec.topk}" in d and f"H {c.h}" in d and f"I {c.i}" in d, d
        assert c.activation in d, d
        assert ("weights in pieces" in d) is getattr(rec, "pieces", False), d
        if self.gpu:
            assert d.startswith("MoE layer on ") and layer.device_bytes > 0, (d, layer.device_bytes)
        else:
            assert d.startswith("CPU reference") and layer.device_bytes == 0, (d, layer.device_bytes)
        self.call(14)

    def draw_tokens(self, max_tokens):
        edge = self.d.choice(["any", "0", "1", "max"])
        if edge == "any":
            return self.d.integer(0, max_tokens)
        return {"0": 0, "1": 1, "max": max_tokens}[edge]

    def draw_batch(self, c, t, topk):
        """tokens bf16 [t, H], ids [t, k], weights [t, k] (host arrays; t = 0 as slices of one row:
        NumPy 2 gives fresh empty arrays zero strides, see test_zero_tokens_with_fresh_empty_arrays)."""
        kind = self.d.choice(S.ROUTINGS)
        ids_dtype = self.d.choice([np.int32, np.int64])
        wbf16 = self.d.boolean()
        n = max(t, 1)
        x = S.random_tokens(self.rng, n, c.h, c.values)[:t]
        ids, wts = S.random_routing(self.rng, n, c.e, topk, kind, ids_dtype, wbf16)
        return x, ids[:t], wts[:t], f"{kind} ids {np.dtype(ids_dtype).name} weights {'bf16' if wbf16 else 'f32'}"

    def act_run_layer(self):
        self.run_layer(self.d.choice(self.of_kind("layer")))

    def run_layer(self, rec, t=None):
        c = rec.ws.cfg
        if t is None:
            t = self.draw_tokens(rec.max_tokens)
        x, ids, wts, what = self.draw_batch(c, t, rec.topk)
        modes = ["alloc", "out", "call"] + (["hidden_fp4"] if c.act != "bf16" and t else [])
        mode = self.d.choice(modes)
        if t == 0 and mode != "out":
            mode = "out"  # (a library-allocated [0, H] output has zero strides under NumPy 2: see the dedicated test)
        self.log(f"run {rec.name} T={t} {what} ({mode})")
        before = (x.copy(), ids.copy(), wts.copy())
        hidden_fp4 = None
        out = None
        if mode == "hidden_fp4":
            hidden_fp4 = fp4gemm.quantize(x.astype(np.float32), c.fmt, global_scale=c.a1)
            got = rec.obj.run(None, ids, wts, hidden_fp4=hidden_fp4)
        elif mode == "out":
            out = np.full((max(t, 1), c.h), np.nan, BF16)[:t]
            got = rec.obj.run(x, ids, wts, out=out)
            assert got is out
        elif mode == "call":
            got = rec.obj(x, ids, wts)
        else:
            got = rec.obj.run(x, ids, wts)
        self.call()
        self.check_layer_result(self.described(rec), c, rec.ws.truth, x, ids, wts, got, hidden_fp4)
        for a, b in zip(before, (x, ids, wts)):
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{rec.name}: the run changed an input"
        self.check_untouched(rec.ws)

    def check_layer_result(self, what, c, truth, x, ids, wts, got, hidden_fp4=None):
        t = ids.shape[0]
        assert got.shape == (t, c.h) and got.dtype == BF16, (what, got.shape, got.dtype)
        assert not np.isnan(got.astype(np.float32)).any(), f"{what}: NaN in the output (no input holds NaN)"
        if truth.w13_bias is not None:  # (the host pieces take no biases: the float64 layer with them)
            S.assert_biased_layer_float64(c, truth, x, ids, wts, got, what, hidden_fp4)
            S.count(self.tier, "results with biases")
            self.checked()
            return
        want, inter = S.compose_layer(c, truth, x, ids, wts, hidden_fp4, with_inter=True)
        same = S.bf16_bits(got) == S.bf16_bits(want)
        assert same.all(), (f"{what}: {int((~same).sum())} of {same.size} elements differ from the composition "
                            f"of host MoeGemm runs + ep.combine on the current weights; first at "
                            f"{np.argwhere(~same)[:3].tolist()}")
        S.assert_layer_float64(c, truth, x, ids, wts, got, inter, what, hidden_fp4)
        self.checked()

    def check_untouched(self, ws):
        """The library never writes into the weights."""
        if not ws.attached or self.gpu:
            return
        lv, t = ws.live, ws.truth
        assert np.array_equal(lv["w13"], t.w13) and np.array_equal(lv["w2"], t.w2), f"{ws.name}: weights written"
        assert np.array_equal(lv["s13"], S.live_scales(t.s13, ws.cfg.scale_layout)), f"{ws.name}: scales written"

    @staticmethod
    def described(rec):
        n = rec.ws.updates - rec.built_at
        return f"{rec.name} (its weights were updated in place {n} time(s) since it was built)" if n else rec.name

    def act_bad_call(self):
        rec = self.d.choice(self.of_kind("layer"))
        c = rec.ws.cfg
        if self.d.boolean():
            t = rec.max_tokens + self.d.integer(1, 3)
            x, ids, wts, _ = self.draw_batch(c, t, rec.topk)
            argument, match = "hidden_states", "max_tokens"
        else:
            t = self.d.integer(1, rec.max_tokens)
            x, ids, wts, _ = self.draw_batch(c, t, rec.topk)
            ids = np.ascontiguousarray(np.concatenate([ids, ids], 1))
            wts = np.ascontiguousarray(np.concatenate([wts, wts], 1))
            argument, match = "topk_ids", "topk"
        self.log(f"bad call {rec.name}: {argument}")
        with pytest.raises(fp4gemm.ArgumentError, match=match) as info:
            rec.obj.run(self.dev(x), self.dev(ids), self.dev(wts))
        assert info.value.argument == argument, (info.value.argument, str(info.value))
        self.call()
        self.run_layer(rec)  # and the object still works

    def dev(self, a):
        return a

    # -- MoE GEMMs --

    def act_build_gemm(self):
        ws = self.pick_set()
        c = ws.cfg
        which = self.d.choice(["w13-glu", "w13", "w2"])
        layout = self.d.choice(["contiguous", "masked"])
        capacity = self.d.integer(1, 24)
        glu = which == "w13-glu"
        out_dtype = self.d.choice(["bfloat16", "float32"] if glu else ["bfloat16", "float16", "float32"])
        alpha_kind = self.d.choice(["none", "number", "array"])
        pool = S.ALPHAS_GPU if self.gpu else S.ALPHAS_HOST
        alpha_truth = alpha_up_truth = None
        if alpha_kind == "number":
            alpha_truth = float(pool[self.rng.integers(0, len(pool))]) * (-1 if self.d.boolean() else 1)
        elif alpha_kind == "array":
            signs = self.rng.choice([-1, 1], c.e)
            alpha_truth = (pool[self.rng.integers(0, len(pool), c.e)] * signs).astype(np.float32)
        if glu and self.d.boolean():
            alpha_up_truth = pool[self.rng.integers(0, len(pool), c.e)].astype(np.float32)
        rescale = self.d.boolean()
        alpha_live = self.dev(alpha_truth.copy()) if isinstance(alpha_truth, np.ndarray) else alpha_truth
        alpha_up_live = None if alpha_up_truth is None else self.dev(alpha_up_truth.copy())
        w, s = (ws.live["w13"], ws.live["s13"]) if which != "w2" else (ws.live["w2"], ws.live["s2"])
        g = moe.MoeGemm(w, s, format=c.fmt, scale_layout=c.scale_layout, out_dtype=out_dtype,
                        activation=c.gemm_activation, layout=layout, capacity=capacity, alpha=alpha_live,
                        epilogue=c.activation if glu else "none", gate_up=c.gate_up, alpha_up=alpha_up_live,
                        rescale_each_run=rescale)
        self.call()
        rec = Rec(f"G{next(self.ids)}", "gemm", g, ws, which=which, layout=layout, capacity=capacity, rescale=rescale,
                  out_dtype=out_dtype, alpha_kind=alpha_kind, alpha_truth=alpha_truth, alpha_live=alpha_live,
                  alpha_up_truth=alpha_up_truth, alpha_up_live=alpha_up_live)
        self.log(f"build {rec.name} = MoeGemm({ws.name}.{which}, {layout}, capacity={capacity}, {out_dtype}, alpha "
                 f"{alpha_kind}{', alpha_up array' if alpha_up_truth is not None else ''}, rescale_each_run={rescale})")
        self.check_gemm_properties(rec)
        self.add_obj(rec)

    def gemm_dims(self, rec):
        c = rec.ws.cfg
        n = {"w13-glu": c.i, "w13": 2 * c.i, "w2": c.h}[rec.which]
        k = c.i if rec.which == "w2" else c.h
        return n, k

    def check_gemm_properties(self, rec):
        g, c = rec.obj, rec.ws.cfg
        n, k = self.gemm_dims(rec)
        rows = rec.capacity * c.e if rec.layout == "masked" else rec.capacity
        assert (g.experts, g.n, g.k, g.capacity, g.rows) == (c.e, n, k, rec.capacity, rows)
        assert (g.format, g.scale_layout, g.out_dtype, g.activation, g.layout) == (
            c.fmt, c.scale_layout, rec.out_dtype, c.gemm_activation, rec.layout)
        shape = (c.e, rec.capacity, n) if rec.layout == "masked" else (rows, n)
        assert g.output_shape() == shape
        e = g.empty_output()
        assert tuple(e.shape) == shape
        d = g.describe()
        assert repr(g) == f"fp4gemm.moe.MoeGemm({d})"
        assert f"{c.e} experts" in d and f"N {n}" in d and f"K {k}" in d, d
        assert g.on_host is (not self.gpu)
        if self.gpu:
            assert d.startswith(g.kernel_name + " on ") and g.device_bytes > 0, d
            assert str(e.dtype) == f"torch.{rec.out_dtype}" and e.is_cuda
        else:
            assert g.kernel_name == "cpu_reference" and d.startswith("CPU reference"), d
            assert g.device_bytes == 0
            assert e.dtype == (BF16 if rec.out_dtype == "bfloat16" else np.dtype(rec.out_dtype))
        self.call(19)

    def act_run_gemm(self):
        self.run_gemm(self.d.choice(self.of_kind("gemm")))

    def draw_gemm_run(self, rec, extra_rows=True, layout=None):
        c = rec.ws.cfg
        n, k = self.gemm_dims(rec)
        layout = layout or rec.layout
        kind = self.d.choice(["spread", "spread", "hot", "empty", "partial"])
        gather = layout == "contiguous" and self.d.boolean()
        run = S.random_gemm_run(self.rng, c.e, n, k, c.fmt, c.gemm_activation, layout, rec.capacity, c.values, kind,
                                gather, extra_rows)
        return run, f"{kind}{' gather' if gather else ''}"

    def gemm_weights(self, rec):
        t = rec.ws.truth
        return (t.w13, t.s13) if rec.which != "w2" else (t.w2, t.s2)

    def run_gemm(self, rec):
        run, what = self.draw_gemm_run(rec)
        self.log(f"run {rec.name} ({what})")
        out = self.poisoned(run.out_shape, rec.out_dtype)
        args = (run.a, run.a_scales, run.offsets, run.counts, run.gather)
        if self.d.boolean():
            got = rec.obj.run(*args, out=out)
        else:
            got = rec.obj(*args, out=out)
        assert got is out
        self.call()
        self.check_gemm_result(rec, run, got)

    def poisoned(self, shape, out_dtype):
        dtype = BF16 if out_dtype == "bfloat16" else np.dtype(out_dtype)
        return np.full(shape, np.nan, dtype)

    def check_gemm_result(self, rec, run, got, alpha=None, alpha_up=None, use_rec_alpha=True):
        c = rec.ws.cfg
        w, lin = self.gemm_weights(rec)
        if use_rec_alpha:
            alpha, alpha_up = rec.alpha_truth, rec.alpha_up_truth
        out = np.asarray(got).reshape(-1, got.shape[-1])
        if rec.which == "w13-glu":
            S.glu_bound(w, lin, c.fmt, run, alpha, alpha_up, c.activation, c.gate_up, out, rec.out_dtype,
                        self.described(rec))
        else:
            S.assert_gemm_exact(out, S.gemm_reference(w, lin, c.fmt, run, alpha), rec.out_dtype, self.described(rec))
        self.checked()

    def act_update_alpha(self):
        rec = self.d.choice([o for o in self.objs if o.kind == "gemm" and o.alpha_kind == "array"])
        pool = S.ALPHAS_GPU if self.gpu else S.ALPHAS_HOST
        new = (pool[self.rng.integers(0, len(pool), rec.ws.cfg.e)] * self.rng.choice([-1, 1], rec.ws.cfg.e)).astype(
            np.float32)
        self.log(f"update {rec.name}'s alpha array in place")
        self.write(rec.alpha_live, slice(None), new)
        rec.alpha_truth = new
        self.run_gemm(rec)  # read at run time: the next run sees it

    # -- the one-call paths --

    def act_fused(self, ws=None):
        ws = ws or self.pick_set()
        c, lv = ws.cfg, ws.live
        topk = self.d.integer(1, min(c.e, 4))
        t = self.draw_tokens(16)
        x, ids, wts, what = self.draw_batch(c, t, topk)
        self.log(f"fused_experts({ws.name}) T={t} top-{topk} {what}")
        out = np.full((max(t, 1), c.h), np.nan, BF16)[:t] if (t == 0 or self.d.boolean()) else None
        got = moe.fused_experts(x, lv["w13"], lv["s13"], lv["w2"], lv["s2"], wts, ids, activation=c.activation,
                                act_format=c.act, gate_up=c.gate_up, scale_layout=c.scale_layout,
                                w13_alpha=lv["w13_alpha"], w13_alpha_up=lv["w13_alpha_up"], w2_alpha=lv["w2_alpha"],
                                a1_scale=c.a1, a2_scale=c.a2, w13_bias=lv["w13_bias"], w2_bias=lv["w2_bias"], out=out)
        if out is not None:
            assert got is out
        self.call()
        self.check_layer_result(f"fused_experts({ws.name}; {ws.updates} in-place updates of these weights so far)", c,
                                ws.truth, x, ids, wts, got)
        self.check_untouched(ws)

    def act_grouped(self):
        ws = self.pick_set()
        c = ws.cfg
        which = self.d.choice(["w13", "w2"])
        out_dtype = self.d.choice(["bfloat16", "float16", "float32"])
        rec = Rec("moe.grouped_gemm", "gemm", None, ws, which=which, layout="contiguous",
                  capacity=self.d.integer(1, 24), out_dtype=out_dtype, alpha_kind="none", alpha_truth=None,
                  alpha_up_truth=None)
        run, what = self.draw_gemm_run(rec, extra_rows=False, layout="contiguous")
        alpha = None
        if self.d.boolean():
            pool = S.ALPHAS_GPU if self.gpu else S.ALPHAS_HOST
            alpha = float(pool[self.rng.integers(0, len(pool))])
        self.log(f"moe.grouped_gemm({ws.name}.{which}, rows {rec.capacity}, {what}, {out_dtype}, alpha {alpha})")
        w, s = (ws.live["w13"], ws.live["s13"]) if which == "w13" else (ws.live["w2"], ws.live["s2"])
        out = self.poisoned(run.out_shape, out_dtype)
        got = moe.grouped_gemm(self.dev(run.a), self.dev(run.a_scales), w, s, self.dev(run.offsets),
                               gather_index=self.dev(run.gather), out=out, alpha=alpha, format=c.fmt,
                               scale_layout=c.scale_layout, out_dtype=out_dtype)
        assert got is out
        self.call()
        self.after_grouped(got)
        self.check_gemm_result(rec, run, self.host(got), alpha=alpha, use_rec_alpha=False)

    def after_grouped(self, got):
        pass

    def act_dual(self):
        """fp4gemm.dual_gemm (the one-call dual GEMM) on arrays of its own: new arrays (1-2 groups,
        NVFP4 or MXFP4, silu or swigluoai), the last call's arrays and outputs again (the call memo),
        or some of them refilled in place first (read at every run); each checked bit for bit
        against a host DualGemm of the arrays' current values (GPU MODE values: exact sums). Or up
        weights of the wrong row count: refused, naming them."""
        mode = self.d.choice(["new", "again", "refill", "bad"]) if self.dual is not None else "new"
        if mode == "new":
            fmt, act = self.d.choice(["nvfp4", "mxfp4"]), self.d.choice(["silu", "swigluoai"])
            vec = 16 if fmt == "nvfp4" else 32
            host = []
            for _ in range(self.d.integer(1, 2)):
                m, n, k = self.d.integer(1, 40), 8 * self.d.integer(1, 6), 64 * self.d.integer(1, 4)
                host.append([S.rand_fp4(self.rng, (r, k // 2), "gpumode") for r in (m, n, n)] +
                            [S.rand_scales(self.rng, (r, k // vec), fmt, "gpumode") for r in (m, n, n)])
            self.dual = dict(fmt=fmt, act=act, host=host, memo=False, dev=[[self.dev(x) for x in g] for g in host],
                             out=[self.poisoned((g[0].shape[0], g[1].shape[0]), "float16") for g in host])
        du = self.dual
        dev = du["dev"]
        lists = [[g[i] for g in dev] for i in range(6)]  # a, b1, b2, sfa, sfb1, sfb2: the same objects as before
        self.log(f"dual_gemm {mode}: {len(dev)} groups, {du['fmt']}, {du['act']}")
        if mode == "bad":
            g = self.d.integer(0, len(dev) - 1)
            short = du["host"][g]
            lists[2] = list(lists[2])
            lists[2][g] = self.dev(short[2][: short[2].shape[0] - 8])
            lists[5] = list(lists[5])
            lists[5][g] = self.dev(short[5][: short[5].shape[0] - 8])
            with pytest.raises(fp4gemm.ArgumentError) as info:
                fp4gemm.dual_gemm(*lists, du["out"], format=du["fmt"], activation=du["act"])
            assert info.value.argument in (f"b2[{g}]", f"sfb2[{g}]"), (info.value.argument, str(info.value))
            self.call()
            return
        if mode == "refill":  # new values in place: the activations and the gate scales of one group
            g = self.d.integer(0, len(dev) - 1)
            h = du["host"][g]
            for i in (0, 4):
                new = (S.rand_fp4(self.rng, h[i].shape, "gpumode") if i == 0 else
                       S.rand_scales(self.rng, h[i].shape, du["fmt"], "gpumode"))
                if self.gpu:
                    self.write(dev[g][i], slice(None), new)
                h[i][...] = new  # (host: the same array)
        for o in du["out"]:
            self.write(o, slice(None), np.full(tuple(o.shape), np.nan, np.float16))
        hits = fp4gemm.plan_cache_info()["memo_hits"]
        got = fp4gemm.dual_gemm(*lists, du["out"], format=du["fmt"], activation=du["act"])
        self.call()
        assert got is du["out"]
        if self.gpu and mode in ("again", "refill"):  # the same tensor objects in the same state: the memo,
            # unless the caches were cleared since the last call (then a miss, which records the call again)
            assert fp4gemm.plan_cache_info()["memo_hits"] == hits + du["memo"], (
                "a repeated dual_gemm call missed the memo" if du["memo"] else
                "a dual_gemm call after clear_plan_cache() hit a memo entry the clear should have dropped")
        du["memo"] = True
        for g, h in enumerate(du["host"]):
            want = np.full((h[0].shape[0], h[1].shape[0]), np.nan, np.float16)
            fp4gemm.DualGemm([h[0]], [h[1]], [h[2]], [h[3]], [h[4]], [h[5]], [want], format=du["fmt"],
                             activation=du["act"]).run()
            assert np.array_equal(self.host(got[g]).view(np.uint16), want.view(np.uint16)), (mode, g)
            self.checked()

    def host(self, a):
        return a

    # -- in-place updates, drops --

    def write(self, dst, index, new, how="numpy"):
        dst[index] = new

    def act_update(self, ws=None):
        if ws is None:  # (mostly a set some object is built on)
            used = [w for w in self.attached_sets() if any(o.ws is w for o in self.objs)]
            ws = self.d.choice(used) if used and self.d.integer(0, 3) else self.pick_set()
        c, t = ws.cfg, ws.truth
        allowed = (["w13", "s13", "w2", "s2"] + [k for k in ALPHAS if getattr(t, k) is not None]
                   + [k for k in S.BIASES if getattr(t, k) is not None])
        what = self.d.choice(allowed + ["all"])
        lo = self.d.integer(0, c.e - 1)
        hi = self.d.integer(lo + 1, c.e)
        vec = S.vec_of(c.fmt)
        n = hi - lo
        how = self.write_path()
        self.log(f"update {ws.name}.{what}[{lo}:{hi}] in place ({how})")
        ws.updates += 1
        values = c.values
        pool = S.ALPHAS_GPU if self.gpu else S.ALPHAS_HOST
        for name in (allowed if what == "all" else [what]):
            if name in ALPHAS:
                new = pool[self.rng.integers(0, len(pool), n)].astype(np.float32)
                getattr(t, name)[lo:hi] = new
                self.write(ws.base[name], slice(lo, hi), new, how)
                continue
            if name in S.BIASES:  # (read at every run: no reload needed, documented)
                new = S.random_bias(self.rng, (n,) + getattr(t, name).shape[1:])
                getattr(t, name)[lo:hi] = new
                self.write(ws.base[name], slice(lo, hi), new.astype(BF16 if c.bias == "bf16" else np.float32), how)
                continue
            if name == "w13":
                new = S.rand_fp4(self.rng, (n, 2 * c.i, c.h // 2), values)
            elif name == "w2":
                new = S.rand_fp4(self.rng, (n, c.h, c.i // 2), values)
            elif name == "s13":
                new = S.rand_scales(self.rng, (n, 2 * c.i, c.h // vec), c.fmt, values)
            else:
                new = S.rand_scales(self.rng, (n, c.h, c.i // vec), c.fmt, values)
            getattr(t, name)[lo:hi] = new
            live_new = S.live_scales(new, c.scale_layout) if name.startswith("s") else new
            self.write(ws.base[name], slice(lo, hi), live_new, how)
        self.repack(ws)
        users = [o for o in self.objs if o.ws is ws]
        self.after_update(ws, users, how)
        # The next run of an object built on these arrays sees the new values.
        if users:
            o = self.d.choice(users)
            (self.run_layer if o.kind == "layer" else self.run_gemm)(o)
        elif self.d.boolean():
            self.act_fused(ws)

    def write_path(self):
        return "numpy"

    def repack(self, ws):
        """Weights in pieces follow their rows: packed again into the same arrays after the rows changed in place
        (read at every run, as the rows are: no reload needed)."""
        if ws.pieces is not None:
            self.log("  pack_pieces again into the same arrays")
            moe.pack_pieces(ws.base["w13"], ws.cfg.gate_up, format=ws.cfg.fmt, out=ws.pieces["w13"])
            moe.pack_pieces(ws.base["w2"], format=ws.cfg.fmt, out=ws.pieces["w2"])
            self.call(2)

    def after_update(self, ws, users, how):
        """Host objects read the arrays at every run: reload_weights() is a no-op there (called at
        times all the same, and must change nothing)."""
        for o in users:
            if self.d.integer(0, 3) == 0:
                self.log(f"  {o.name}.reload_weights()")
                o.obj.reload_weights()
                self.call()

    def act_drop_object(self):
        o = self.d.choice(self.objs)
        self.objs.remove(o)
        self.log(f"drop {o.name}")
        del o
        gc.collect()

    def act_detach(self):
        """Our references to a weight set's arrays dropped; junk written over what gets freed; the
        objects built on it keep their arrays and stay right."""
        ws = self.pick_set()
        self.log(f"detach {ws.name}")
        sizes = [(a.shape, a.dtype) for a in ws.live.values() if a is not None]
        sizes += [(a.shape, a.dtype) for a in (ws.pieces or {}).values()]
        ws.drop_arrays()
        self.sets.remove(ws)
        gc.collect()
        junk = self.junk(sizes)
        users = [o for o in self.objs if o.ws is ws]
        for o in users[:2]:
            (self.run_layer if o.kind == "layer" else self.run_gemm)(o)
        del junk

    def junk(self, sizes):
        return [np.frombuffer(self.rng.bytes(int(np.prod(s)) * np.dtype(dt).itemsize), np.uint8) for s, dt in sizes]

    def act_describe(self):
        o = self.d.choice(self.objs)
        self.log(f"describe {o.name}")
        (self.check_layer_properties if o.kind == "layer" else self.check_gemm_properties)(o)

    def act_clear_caches(self):
        self.log("clear caches")
        moe.clear_layer_cache()
        fp4gemm.clear_plan_cache()
        self.call(2)
        if self.dual is not None:
            self.dual["memo"] = False  # (act_dual: its next repeated call misses)
        info = fp4gemm.plan_cache_info()
        assert info["plans"] == 0 and info["moe_plans"] == 0, info  # (pinned plans are counted apart)


def _host_body(draw):
    HostSequence(draw).run(3 + draw.integer(0, 2**20 - 1) % 14)


def test_host_random_sequences():
    _drive("host", HOST_SEQUENCES, _host_body, shrink=True)
    assert S.COUNTS["host"]["sequences"] >= 1


HOST_TOUR = ["new_weights", "build_layer", "run_layer", "build_gemm", "run_gemm", "build_gemm", "update_alpha",
             "update_in_place", "run_layer", "fused_experts", "grouped_gemm", "bad_call", "describe",
             "new_weights", "build_layer", "detach_weights", "run_layer", "drop_object", "clear_caches",
             "fused_experts", "update_in_place", "run_gemm", "dual_gemm", "dual_gemm", "dual_gemm"]


def _tour(cls, tier, script, seeds=12):
    """Scripted sequences (NumPy-driven draws) until every action of the machine has run at least
    once: the random tier's coverage does not rest on what the property-based draws favour."""
    names = set()
    for seed in range(seeds):
        seq = cls(S.RngDraw(10_000 + seed))
        seq.run(script=script)
        names |= seq.executed
        every = {n for n, _, _ in seq.actions()} | set(script)
        if names >= every:
            return
    assert names >= every, f"actions that never ran: {sorted(every - names)}"


def test_host_action_tour():
    _tour(HostSequence, "host", HOST_TOUR)


def test_zero_tokens_with_fresh_empty_arrays():
    """T = 0 is a valid run (0 <= T <= max_tokens). Under NumPy 2, zero-size arrays have zero strides
    (np.empty((0, H)).strides == (0, 0)); the layer must accept them -- including the [0, H] output
    MoeLayer.run allocates itself when out is None -- and return an empty bf16 [0, H]."""
    rng = np.random.default_rng(5)
    c = S.Config("nvfp4", "nvfp4", "silu", "stacked", "linear", 2, 64, 64, "gpumode")
    t = S.random_truth(rng, c, "none", False)
    layer = moe.MoeLayer(t.w13, t.s13, t.w2, t.s2, max_tokens=4, topk=1, **c.layer_kwargs())
    x = np.empty((0, 64), BF16)
    ids = np.empty((0, 1), np.int32)
    wts = np.empty((0, 1), np.float32)
    got = layer.run(x, ids, wts)
    assert got.shape == (0, 64) and got.dtype == BF16
    got = layer.run(x, ids, wts, out=np.empty((0, 64), BF16))
    assert got.shape == (0, 64)
    got = moe.fused_experts(x, t.w13, t.s13, t.w2, t.s2, wts, ids, scale_layout="linear")
    assert got.shape == (0, 64)


# ---- the GPU tier ------------------------------------------------------------------------------------------


def _torch():
    import torch

    return torch


class GpuSequence(HostSequence):
    tier = "gpu"
    gpu = True

    def __init__(self, d):
        super().__init__(d)
        self.torch = _torch()

    # -- conversions --

    def dev(self, a):
        if a is None:
            return None
        torch = self.torch
        if isinstance(a, torch.Tensor):
            return a
        a = np.ascontiguousarray(a)
        if a.shape and a.shape[0] == 0:  # (NumPy 2 gives empty arrays zero strides: slice a one-row tensor)
            return self.dev(np.zeros((1,) + a.shape[1:], a.dtype))[:0]
        if a.dtype == BF16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()
        return torch.from_numpy(a).cuda()

    def host(self, t):
        torch = self.torch
        if isinstance(t, np.ndarray):
            return t
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).cpu().numpy().view(BF16)
        return t.cpu().numpy()

    def write(self, dst, index, new, how="torch"):
        """torch: copy_ into a view of the array (torch's version counter sees it); alias: through
        another tensor over the same memory (a DLPack alias: a write torch does not count for the
        array, as another framework's or a raw kernel's would be)."""
        torch = self.torch
        if how == "alias":
            dst = torch.from_dlpack(dst)
        dst[index].copy_(self.dev(np.ascontiguousarray(new)))  # (a view: basic slicing)

    def write_path(self):
        return self.d.choice(["torch", "torch", "alias"])

    def after_update(self, ws, users, how):
        """After writes torch does not count, objects need reload_weights() (documented) and
        fused_experts' cached plans are released (moe.clear_layer_cache()); torch writes are seen by
        the next eager call as they are (reload_weights() at times all the same)."""
        for o in users:
            if how == "alias" or self.d.integer(0, 3) == 0:
                self.log(f"  {o.name}.reload_weights()")
                o.obj.reload_weights()
                self.call()
        if how == "alias":
            self.log("  moe.clear_layer_cache()")
            moe.clear_layer_cache()

    def poisoned(self, shape, out_dtype):
        torch = self.torch
        return torch.full(shape, float("nan"), dtype=getattr(torch, out_dtype), device="cuda")

    def to_live(self, c, t):
        """uint8 tensors on the device (the base, written in place) and what the library gets: the
        same memory, sometimes viewed as float4_e2m1fn_x2 / float8 scales."""
        torch = self.torch
        base = dict(w13=self.dev(t.w13), s13=self.dev(S.live_scales(t.s13, "blocked")), w2=self.dev(t.w2),
                    s2=self.dev(S.live_scales(t.s2, "blocked")))
        live = dict(base)
        fp4 = getattr(torch, "float4_e2m1fn_x2", None)
        f8 = getattr(torch, "float8_e4m3fn" if c.fmt == "nvfp4" else "float8_e8m0fnu", None)
        if fp4 is not None and self.d.boolean():
            live["w13"], live["w2"] = base["w13"].view(fp4), base["w2"].view(fp4)
        if f8 is not None and self.d.boolean():
            live["s13"], live["s2"] = base["s13"].view(f8), base["s2"].view(f8)
        for k in ALPHAS:
            live[k] = base[k] = self.dev(getattr(t, k))
        for k, a in zip(S.BIASES, S.bias_arrays(c, t)):
            live[k] = base[k] = self.dev(a)
        return live, base

    # -- results --

    def check_layer_result(self, what, c, truth, x, ids, wts, got, hidden_fp4=None):
        torch = self.torch
        t = ids.shape[0]
        assert tuple(got.shape) == (t, c.h) and got.dtype == torch.bfloat16 and got.is_cuda, (what, got.shape)
        torch.cuda.synchronize()
        g = self.host(got).astype(np.float32)
        assert not np.isnan(g).any(), f"{what}: NaN in the output"
        if t == 0:
            self.checked()
            return
        ref = S.host_layer(c, truth, t, ids.shape[1])
        want = ref.run(self.host(x) if not isinstance(x, np.ndarray) else x,
                       ids if isinstance(ids, np.ndarray) else self.host(ids),
                       wts if isinstance(wts, np.ndarray) else self.host(wts)).astype(np.float32)
        r = S.rel_error(g, want)
        assert r < 2.0**-7, f"{what}: relative error {r:.3g} against the host layer on the same data"
        assert np.mean(g == want) > 0.5, f"{what}: only {np.mean(g == want):.2f} of the elements equal the host layer's"
        if not np.any(want):
            assert not np.any(g), f"{what}: the host layer is 0 (no routed pair), the output is not"
        self.checked()

    def check_gemm_result(self, rec, run, got, alpha=None, alpha_up=None, use_rec_alpha=True):
        """Bit for bit the host MoeGemm on copies of the same data (GPU MODE values, power-of-two
        alphas: exact FP32 sums)."""
        torch = self.torch
        torch.cuda.synchronize()
        c = rec.ws.cfg
        w, lin = self.gemm_weights(rec)
        if use_rec_alpha:
            alpha, alpha_up = rec.alpha_truth, rec.alpha_up_truth
        glu = rec.which == "w13-glu"
        h = S.host_gemm(w, lin, c.fmt, out_dtype=rec.out_dtype, activation=c.gemm_activation, layout=rec.layout,
                        capacity=rec.capacity, alpha=alpha, epilogue=c.activation if glu else "none",
                        gate_up=c.gate_up, alpha_up=alpha_up)
        want = h.run(run.a, run.a_scales, run.offsets, run.counts, run.gather,
                     out=HostSequence.poisoned(self, run.out_shape, rec.out_dtype))
        g = self.host(got).astype(np.float64).reshape(-1, want.shape[-1])
        wv = np.asarray(want).astype(np.float64).reshape(g.shape)
        same = (g == wv) | (np.isnan(g) & np.isnan(wv))
        assert same.all(), (f"{self.described(rec)}: {int((~same).sum())} of {same.size} elements differ from the "
                            f"host MoeGemm; "
                            f"first at {np.argwhere(~same)[:3].tolist()}")
        self.checked()

    def check_untouched(self, ws):
        pass

    # -- overrides of the host actions --

    def run_layer(self, rec, t=None):
        torch = self.torch
        c = rec.ws.cfg
        if t is None:
            t = self.draw_tokens(rec.max_tokens)
        x, ids, wts, what = self.draw_batch(c, t, rec.topk)
        mode = self.d.choice(["alloc", "out", "call", "stream", "token_count"] + (["hidden_fp4"] if c.act != "bf16" and t
                                                                                  else []) + (["expert_rows"] if t else []))
        self.log(f"run {rec.name} T={t} {what} ({mode})")
        xd, idsd, wtsd = self.dev(x), self.dev(ids), self.dev(wts)
        if mode == "hidden_fp4":
            packed, scales = fp4gemm.quantize(xd, c.fmt, global_scale=c.a1)  # on the GPU, no synchronisation
            got = rec.obj.run(None, idsd, wtsd, hidden_fp4=(packed, scales))
        elif mode == "out":
            out = torch.full((t, c.h), float("nan"), dtype=torch.bfloat16, device="cuda")
            got = rec.obj.run(xd, idsd, wtsd, out=out)
            assert got is out
        elif mode == "call":
            got = rec.obj(xd, idsd, wtsd)
        elif mode == "token_count":  # a device-side count n <= T: tokens from n on are absent
            n = self.d.integer(0, t)
            self.log(f"  token_count {n}")
            out = torch.full((t, c.h), float("nan"), dtype=torch.bfloat16, device="cuda")
            got = rec.obj.run(xd, idsd, wtsd, out=out, token_count=torch.tensor([n], dtype=torch.int32, device="cuda"))
            assert torch.isnan(got[n:].float()).all(), f"{self.described(rec)}: rows past token_count {n} were written"
            x, ids, wts, got = x[:n], ids[:n], wts[:n], got[:n]
        elif mode == "expert_rows":  # stopped before the combine: ep.combine over the pairs' rows is the output
            rows = torch.full((t * rec.topk, c.h), float("nan"), dtype=torch.bfloat16, device="cuda")
            row_of = torch.full((t * rec.topk,), -1, dtype=torch.int32, device="cuda")
            if rec.ws.truth.w2_bias is not None:  # (the combine adds the bias: refused, named)
                with pytest.raises(fp4gemm.ArgumentError, match="expert_rows"):
                    rec.obj.run(xd, idsd, wtsd, expert_rows=rows, row_of=row_of)
                got = rec.obj.run(xd, idsd, wtsd)
            else:
                assert rec.obj.run(xd, idsd, wtsd, expert_rows=rows, row_of=row_of) is rows
                flat = idsd.reshape(-1).long()
                valid = (flat >= 0) & (flat < c.e)
                pairs = torch.zeros_like(rows)
                pairs[valid] = rows[row_of.long()[valid]]
                got = ep.combine(pairs, wtsd, idsd, c.e)
        elif mode == "stream":
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            got = rec.obj.run(xd, idsd, wtsd, stream=s)
            torch.cuda.current_stream().wait_stream(s)
        else:
            got = rec.obj.run(xd, idsd, wtsd)
        self.call()
        if self.d.boolean():
            torch.cuda.synchronize()
            rec.obj.check()
            self.call()
        self.check_layer_result(self.described(rec), c, rec.ws.truth, x, ids, wts, got)

    def run_gemm(self, rec):
        run, what = self.draw_gemm_run(rec)
        self.log(f"run {rec.name} ({what})")
        out = self.poisoned(run.out_shape, rec.out_dtype)
        args = tuple(self.dev(a) for a in (run.a, run.a_scales, run.offsets, run.counts, run.gather))
        got = rec.obj.run(*args, out=out) if self.d.boolean() else rec.obj(*args, out=out)
        assert got is out
        self.call()
        if self.d.boolean():
            rec.obj.check()
            self.call()
        self.check_gemm_result(rec, run, got)

    def act_fused(self, ws=None):
        torch = self.torch
        ws = ws or self.pick_set()
        c = ws.cfg
        topk = self.d.integer(1, min(c.e, 4))
        t = self.draw_tokens(16)
        x, ids, wts, what = self.draw_batch(c, t, topk)
        via = self.d.choice(["moe", "ops"])
        self.log(f"{via}.fused_experts({ws.name}) T={t} top-{topk} {what}")
        got = self.fused(via, ws, self.dev(x), self.dev(ids), self.dev(wts))
        self.call()
        self.check_layer_result(f"{via}.fused_experts({ws.name}; {ws.updates} in-place updates of these weights so "
                                f"far)", c, ws.truth, x, ids, wts, got)
        assert got.is_cuda and got.dtype == torch.bfloat16

    def fused(self, via, ws, x, ids, wts, out=None):
        c, lv = ws.cfg, ws.live
        kw = dict(activation=c.activation, act_format=c.act, gate_up=c.gate_up, scale_layout=c.scale_layout,
                  w13_alpha=lv["w13_alpha"], w13_alpha_up=lv["w13_alpha_up"], w2_alpha=lv["w2_alpha"],
                  a1_scale=c.a1, a2_scale=c.a2, w13_bias=lv.get("w13_bias"), w2_bias=lv.get("w2_bias"))
        if via == "ops":
            from fp4gemm import ops

            return ops.fused_experts(x, lv["w13"], lv["s13"], lv["w2"], lv["s2"], wts, ids, **kw)
        return moe.fused_experts(x, lv["w13"], lv["s13"], lv["w2"], lv["s2"], wts, ids, out=out, **kw)

    def after_grouped(self, got):
        self.torch.cuda.synchronize()
        moe.check()
        self.call()

    def junk(self, sizes):
        torch = self.torch
        out = []
        for shape, dtype in sizes:
            n = int(np.prod(shape)) * (4 if "float32" in str(dtype) else 1)
            out.append(torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda"))
        return out

    def act_bad_routing(self):
        """A bad routing (offsets decreasing) is reported by check(), naming expert_offsets, and writes
        nothing; the next good run is right."""
        rec = self.d.choice([o for o in self.of_kind("gemm") if o.layout == "contiguous"])
        c = rec.ws.cfg
        run, _ = self.draw_gemm_run(rec)
        self.log(f"bad routing into {rec.name}")
        bad = np.arange(c.e + 1, dtype=np.int32)[::-1].copy() if c.e > 1 else np.array([0, rec.capacity + 1], np.int32)
        out = self.poisoned(run.out_shape, rec.out_dtype)
        rec.obj.run(self.dev(run.a), self.dev(run.a_scales), self.dev(bad), None, self.dev(run.gather), out=out)
        with pytest.raises(fp4gemm.ArgumentError) as info:
            rec.obj.check()
        assert info.value.argument == "expert_offsets", str(info.value)
        assert bool(out.isnan().all()), "a bad routing wrote output"
        rec.obj.check()  # cleared
        self.call(3)
        self.run_gemm(rec)

    # -- GPU-only actions --

    def actions(self):
        """The GPU-only actions first (the draws favour the first entries), then the host ones."""
        a = [("quantize_on_gpu_then_plan", 3, self.act_quantized)]
        if self.of_kind("layer") or self.attached_sets():
            a += [("graph", 3, self.act_graph)]
        if self.attached_sets():
            a += [("threads", 2, self.act_threads)]
        a += [("recycle_memory", 2, self.act_recycle), ("synchronize_and_check", 1, self.act_check)]
        if any(o.kind == "gemm" and o.layout == "contiguous" for o in self.objs):
            a += [("bad_routing", 1, self.act_bad_routing)]
        return a + super().actions()

    def act_check(self):
        self.log("synchronize; check()")
        self.torch.cuda.synchronize()
        for o in self.objs:
            o.obj.check()
        moe.check()
        self.call(len(self.objs) + 1)

    def act_recycle(self):
        """Everything on one weight set dropped (layer caches cleared or not, empty_cache() or not),
        then new weights of the same shapes -- likely at the freed addresses -- used at once."""
        torch = self.torch
        if self.sets:
            ws = self.d.choice(self.sets)
            cfg = ws.cfg
            self.objs = [o for o in self.objs if o.ws is not ws]
            self.sets.remove(ws)
            ws.drop_arrays()
        else:
            cfg = S.draw_config(self.d, True)
        clear, empty = self.d.boolean(), self.d.boolean()
        self.log(f"recycle: dropped a weight set ({cfg.text()}), clear_layer_cache {clear}, empty_cache {empty}")
        if clear:
            moe.clear_layer_cache()
        gc.collect()
        if empty:
            torch.cuda.empty_cache()
        if self.d.boolean():
            self.act_quantized(cfg)
        else:
            ws = self.act_new_weights(cfg)
            if self.d.boolean():
                self.act_fused(ws)
            else:
                self.act_build_layer(ws)

    def quantize_experts(self, w, fmt):
        """[E, rows, K] bf16 on the device -> packed [E, rows, K/2] and blocked scales [E, bytes],
        quantised on the GPU (one call over all rows where rows % 128 == 0: the blocked layout of
        the stacked rows is then the experts' layouts back to back)."""
        torch = self.torch
        e, rows, k = w.shape
        if rows % 128 == 0:
            p, s = fp4gemm.quantize(w.reshape(e * rows, k), fmt, "blocked")
            return p.view(e, rows, k // 2), s.view(e, -1)
        parts = [fp4gemm.quantize(w[x], fmt, "blocked") for x in range(e)]
        return torch.stack([p for p, _ in parts]), torch.stack([s for _, s in parts])

    def act_quantized(self, cfg=None):
        """Weights quantised on the GPU behind a sleeping kernel, used AT ONCE (no synchronisation) by
        a new MoeLayer / moe.fused_experts / ops.fused_experts: plan-time reads must see the
        quantiser's output. MXFP4 weights scaled x16 have scale codes > 128, so a plan that read
        stale or unwritten scales (codes <= 128: one multiply) fails check() or the comparison."""
        torch = self.torch
        c = dataclasses.replace(cfg or S.draw_config(self.d, True), bias="none")  # (the quantiser's weights only)
        big = c.fmt == "mxfp4" and self.d.boolean()
        mult = 16.0 if big else 1.0
        topk = self.d.integer(1, min(c.e, 4))
        t = self.d.integer(1, 16)
        via = self.d.choice(["layer", "moe", "ops"])
        self.log(f"quantize on the GPU then plan at once: {c.text()}{' x16 (MXFP4 codes > 128)' if big else ''}, "
                 f"via {via}, T={t} top-{topk}")
        w13_np = (S.rand_bf16(self.rng, (c.e, 2 * c.i, c.h), "gpumode").astype(np.float32) * mult).astype(BF16)
        w2_np = (S.rand_bf16(self.rng, (c.e, c.h, c.i), "gpumode").astype(np.float32) * mult).astype(BF16)
        x, ids, wts, what = self.draw_batch(c, t, topk)
        w13_b, w2_b, xd, idsd, wtsd = (self.dev(a) for a in (w13_np, w2_np, x, ids, wts))
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(20_000_000)  # the quantiser starts ~10 ms from now
        w13, s13 = self.quantize_experts(w13_b, c.fmt)
        w2, s2 = self.quantize_experts(w2_b, c.fmt)
        kw = c.layer_kwargs()
        layer = None
        if via == "layer":
            layer = moe.MoeLayer(w13, s13, w2, s2, max_tokens=t, topk=topk, **kw)
            got = layer.run(xd, idsd, wtsd)
        else:
            live = dict(w13=w13, s13=s13, w2=w2, s2=s2, w13_alpha=None, w13_alpha_up=None, w2_alpha=None,
                        w13_bias=None, w2_bias=None)
            got = self.fused(via, WeightSet("tmp", c, None, live), xd, idsd, wtsd)
        self.call(5)
        torch.cuda.synchronize()
        if layer is not None:
            layer.check()
        moe.check()
        # What the weights hold: the GPU quantiser is bit for bit the host rule.
        vec = S.vec_of(c.fmt)
        truth = S.Truth(w13.view(torch.uint8).cpu().numpy(), None, w2.view(torch.uint8).cpu().numpy(), None)
        b13, b2 = s13.view(torch.uint8).cpu().numpy(), s2.view(torch.uint8).cpu().numpy()
        truth.s13 = np.stack([S.from_blocked(b13[x], 2 * c.i, c.h // vec) for x in range(c.e)])
        truth.s2 = np.stack([S.from_blocked(b2[x], c.h, c.i // vec) for x in range(c.e)])
        hp, hs = fp4gemm.quantize(w13_np.astype(np.float32).reshape(-1, c.h), c.fmt)
        assert np.array_equal(hp.reshape(truth.w13.shape), truth.w13), "GPU quantiser != host quantiser (w13)"
        assert np.array_equal(hs.reshape(truth.s13.shape), truth.s13), "GPU quantiser != host quantiser (w13 scales)"
        if big:
            assert truth.s13.max() > 128, "the x16 MXFP4 weights were meant to have scale codes > 128"
        self.check_layer_result(f"quantised-then-{via}", c, truth, x, ids, wts, got)
        ws = WeightSet(f"W{next(self.ids)}", c, truth, dict(w13=w13, s13=s13, w2=w2, s2=s2, w13_alpha=None,
                                                             w13_alpha_up=None, w2_alpha=None, w13_bias=None,
                                                             w2_bias=None))
        if len(self.sets) >= self.MAX_SETS:
            old = self.sets.pop(0)
            old.drop_arrays()
        self.sets.append(ws)
        if layer is not None:
            self.add_obj(Rec(f"L{next(self.ids)}", "layer", layer, ws, max_tokens=t, topk=topk))

    def act_graph(self):
        """A CUDA graph of a layer run (MoeLayer.run, moe.fused_experts or ops.fused_experts) captured
        once and replayed with new tokens / routings / weights written into the captured tensors."""
        torch = self.torch
        layers = self.of_kind("layer")
        if layers and (not self.attached_sets() or self.d.boolean()):
            rec = self.d.choice(layers)
            ws, topk, t_max, via = rec.ws, rec.topk, rec.max_tokens, "layer"
        else:
            rec = None
            ws = self.pick_set()
            topk, t_max, via = self.d.integer(1, min(ws.cfg.e, 4)), 16, self.d.choice(["moe", "ops"])
        c = ws.cfg
        t = self.d.integer(1, t_max)
        ids_dtype = self.d.choice([np.int32, np.int64])
        wbf16 = self.d.boolean()
        replays = self.d.integer(1, 4)
        self.log(f"graph of {via} on {rec.name if rec else ws.name}: T={t} top-{topk}, {replays} replays")

        def batch():
            x = S.random_tokens(self.rng, t, c.h, c.values)
            ids, wts = S.random_routing(self.rng, t, c.e, topk, self.d.choice(S.ROUTINGS), ids_dtype, wbf16)
            return x, ids, wts

        x, ids, wts = batch()
        xs, ids_s, wts_s = self.dev(x), self.dev(ids), self.dev(wts)

        def step():
            if via == "layer":
                return rec.obj.run(xs, ids_s, wts_s)
            return self.fused(via, ws, xs, ids_s, wts_s)

        warm = step()  # plans / grows the workspace outside the capture
        self.check_layer_result(f"graph warm-up ({via})", c, ws.truth, x, ids, wts, warm)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        self.call(2)
        for r in range(replays):
            x, ids, wts = batch()
            xs.copy_(self.dev(x))
            ids_s.copy_(self.dev(ids))
            wts_s.copy_(self.dev(wts))
            if ws.attached and self.d.boolean():
                if via == "layer":  # everything, then reload_weights(): replays read the layer's copies
                    self.log(f"  weights, scales and alphas updated in place; {rec.name}.reload_weights()")
                    self.update_quietly(ws, copied=True)
                    rec.obj.reload_weights()
                    self.call()
                else:  # (fused_experts' plan is not the caller's to reload: only what runs read)
                    self.log("  w13, w2 and w2's scales updated in place")
                    self.update_quietly(ws, copied=False)
            out.fill_(float("nan"))
            graph.replay()
            self.call()
            self.check_layer_result(f"graph replay {r} ({via})", c, ws.truth, x, ids, wts, out)
        del graph, out
        gc.collect()

    def update_quietly(self, ws, copied):
        """New GPU MODE values for some experts of w13, w2 and w2's (blocked) scales, in place: what a
        run reads from the weights' own memory, so graph replays see it as it is; copied: also w13's
        scales and the alphas, which the layer copies (a replay sees them after reload_weights())."""
        c, t = ws.cfg, ws.truth
        lo = int(self.rng.integers(0, c.e))
        hi = int(self.rng.integers(lo + 1, c.e + 1))
        vec = S.vec_of(c.fmt)
        n = hi - lo
        ws.updates += 1
        new = dict(w13=S.rand_fp4(self.rng, (n, 2 * c.i, c.h // 2), "gpumode"),
                   w2=S.rand_fp4(self.rng, (n, c.h, c.i // 2), "gpumode"),
                   s2=S.rand_scales(self.rng, (n, c.h, c.i // vec), c.fmt, "gpumode"))
        if copied:
            new["s13"] = S.rand_scales(self.rng, (n, 2 * c.i, c.h // vec), c.fmt, "gpumode")
            for k in ALPHAS:
                if getattr(t, k) is not None:
                    new[k] = S.ALPHAS_GPU[self.rng.integers(0, len(S.ALPHAS_GPU), n)].astype(np.float32)
        for name, v in new.items():
            getattr(t, name)[lo:hi] = v
            self.write(ws.base[name], slice(lo, hi), S.blocked_experts(v) if name in ("s13", "s2") else v)
        self.repack(ws)

    def act_threads(self):
        """Two Python threads, each running its own layer on its own stream, several runs each."""
        torch = self.torch
        layers = self.of_kind("layer")
        while len(layers) < 2:
            if not self.attached_sets():
                self.act_new_weights()
            self.act_build_layer()
            layers = self.of_kind("layer")
        pair = [layers[-1], layers[-2]] if self.d.boolean() else layers[-2:]
        runs = self.d.integer(1, 4)
        self.log(f"threads: {pair[0].name} and {pair[1].name}, {runs} runs each")
        work = []
        for rec in pair:
            batches = []
            for _ in range(runs):
                t = self.d.integer(0, rec.max_tokens)
                x, ids, wts, _ = self.draw_batch(rec.ws.cfg, t, rec.topk)
                batches.append((x, ids, wts, self.dev(x), self.dev(ids), self.dev(wts)))
            work.append(batches)
        torch.cuda.synchronize()
        results = [[None] * runs for _ in pair]
        errors = []

        def worker(j):
            try:
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    for r, b in enumerate(work[j]):
                        results[j][r] = pair[j].obj.run(*b[3:])
                s.synchronize()
            except BaseException as e:  # noqa: BLE001 -- re-raised below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(j,)) for j in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
        torch.cuda.synchronize()
        self.call(2 * runs)
        for j, rec in enumerate(pair):
            rec.obj.check()
            for r, b in enumerate(work[j]):
                self.check_layer_result(f"thread {j} {rec.name} run {r}", rec.ws.cfg, rec.ws.truth, b[0], b[1], b[2],
                                        results[j][r])

    def finish(self):
        super().finish()
        fp4gemm.clear_plan_cache(pinned=True)
        self.torch.cuda.synchronize()


def _gpu_body(draw):
    GpuSequence(draw).run(3 + draw.integer(0, 2**20 - 1) % 10)


GPU_TOUR = ["quantize_on_gpu_then_plan", "run_layer", "graph", "threads", "new_weights", "build_layer", "run_layer",
            "build_gemm", "run_gemm", "bad_routing", "build_gemm", "update_alpha", "update_in_place", "run_layer",
            "fused_experts", "graph", "grouped_gemm", "bad_call", "describe", "synchronize_and_check",
            "recycle_memory", "quantize_on_gpu_then_plan", "detach_weights", "drop_object", "threads",
            "clear_caches", "update_in_place", "graph", "dual_gemm", "dual_gemm", "dual_gemm"]


@pytest.mark.gpu
def test_gpu_action_tour(backend):
    if backend != "auto":
        pytest.skip(f"the MoE layer runs only the fast kernel (sm_90); this tier runs backend {backend!r}")
    _tour(GpuSequence, "gpu", GPU_TOUR)


@pytest.mark.gpu
def test_gpu_random_sequences(backend):
    if backend != "auto":
        pytest.skip(f"the MoE layer runs only the fast kernel (sm_90); this tier runs backend {backend!r}")
    _drive("gpu", GPU_SEQUENCES, _gpu_body, shrink=False)
    assert S.COUNTS["gpu"]["sequences"] >= 1
