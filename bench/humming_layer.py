#!/usr/bin/env python3
"""Whole MoE expert layer, same run: Humming (humming-kernels 0.1.19, vLLM's Humming MoE backend) vs
fp4gemm's ``MoeLayer.run``, on the same MXFP4 weight bytes and the same routing.

The layer (the problem of ``.peers/tk_layer.py``):
    out[t] = sum_j w[t,j] * W2_e act(W13_e x_t),  e = ids[t,j]
MXFP4 weights (e2m1 nibbles, UE8M0 scale per 32 along K) x bf16 activations (W4A16), bf16 out.
  gpt-oss-120b   E 128, H 2880, I 2880, top-4, gate/up interleaved (gate = even rows of W13),
                 act = gpt-oss clamped SwiGLU: g' = min(g, 7), u' = clamp(u, -7, 7),
                 act = g' * sigmoid(1.702 g') * (u' + 1)            (vLLM's SWIGLUOAI)
  Qwen3-30B-A3B  E 128, H 2048, I 768, top-8, gate/up stacked (gate = rows 0..I-1),
                 act = silu(g) * u                                  (vLLM's SILU)
T in 1, 4096, 64, 512, 8 (run token-major in that order, so a budget cut drops the last T's).

Weights: random bytes in fp4gemm's K-major layout: w13 uint8 [E, 2I, H/2] (low nibble = even k),
scales uint8 [E, 2I, H/32] (UE8M0 codes 120..127, 2^(c-127)); w2 [E, H, I/2], [E, H, I/32].
fp4gemm gets them as they are (scale_layout="linear", act_format="bf16", activation "swigluoai"
interleaved / "silu" stacked). Humming gets the same bytes through vLLM's load path:

  1. humming.schema "mxfp4" (Mxfp4WeightSchema; gpt-oss's "gpt_oss_mxfp4" is the same class):
     its tensors are exactly these: weight uint8 [E, N, K/2], weight_scale uint8 [E, N, K/32].
     ``convert_humming`` views the weight as int32 [E, N, K/8] (8 nibbles per word, element i at
     bits 4i..4i+3: on little-endian bytes that is low nibble = even k, gpt-oss's order, no
     repacking) and the scales as torch.float8_e8m0fnu -> HummingWeightSchema(float4e2m1,
     bs float8e8m0, group 32).  (vLLM: fused_moe/oracle/humming.py _convert_sublayer_to_humming)
  2. ``HummingMethod.prepare_layer_meta(layer, shape_n, shape_k, weight_schema, input_schema=
     HummingInputSchema() (bf16 activations), num_experts=E, pad_n_to_multiple=256,
     pad_k_to_multiple=128, torch_dtype=bf16, sublayer_name="w13"/"w2")``: the LayerConfig; N and
     K are padded (gpt-oss: w13 5760x2880 -> 5888x2944, w2 2880x2880 -> 3072x2944).
  3. ``HummingMethod.transform_humming_layer(layer, sublayer_name)``: pads (weight 0, scale 1.0),
     repacks the weight for its WGMMA kernel (humming's repack_weight JIT kernel) and permutes
     the scales.  (vLLM: _prepare_and_transform_sublayer, same arguments)
     If that fails, a fallback does the same with transform.py's own two functions on
     uint8-padded tensors (transform_humming_weight + transform_humming_weight_scale) and says so.
  4. ``HummingMethod.get_default_tuning_configs(layer, gemm_type=GemmType.INDEXED, ...)`` per
     sublayer: humming's [lo, hi, config] table by valid rows M = T*topk.
Per call (vLLM's HummingIndexedExperts.main_apply, fused_moe/experts/fused_humming_moe.py):
  moe_align_block_size(topk_ids, block = w13 table's block_shape[0] for M)  -- vLLM's CUDA op is not
     here: a torch equivalent (same outputs: sorted_ids padded with T*k, expert_ids per block,
     num_tokens_padded[1]; capturable, no host sync)
  forward_layer(w13, x, top_k=k, sorted_ids, expert_ids, num_tokens_padded, valid_shape_m=M)
     -> gate_up [T*k, 2I] bf16 (row t*k+j)
  activation -> [T*k, I] bf16: vLLM runs its own silu_and_mul / swigluoai_and_mul kernel; here
     Humming's own process_input kernel with the formula above (HummingMethod.may_process_input,
     activation_type binary_interleaved / binary_split), or torch if that fails (HML_ACT=torch)
  forward_layer(w2, act, top_k=1, same routing tables) -> down [T*k, H] bf16
  combine: out[t] = sum_j w[t,j] down[t*k+j] (vLLM: moe_fused_mul_sum; here one torch.bmm)
Timed: humming (all of it, routing tables included), humming_gemms (routing tables made in advance,
as tk_layer's tk_gemms), humming_align (the tables alone, eager), fp4gemm_run (MoeLayer.run).

Correctness: each output against a float32 torch reference on the dequantised weights (exact
values, no intermediate rounding): max_rel = max|out-ref| / max|ref| (expected < 1e-2), rms_rel.
For small T (and on any failure) GEMM1/GEMM2 are checked alone on some rows (GEMM1 also against
nibble-swapped weights, to name a layout mix-up).
Timing: CUDA events around one call, median of >= 30 reps, a 256 MiB write (L2 flush) and a
~1.5 ms GPU spin before each rep (the host enqueues meanwhile: GPU time, not launch time); host
back-to-back time too; then the same call captured in a CUDA graph and replayed (if capture works).

Run on the GPU machine, from the repository root, with .peers (wheels) and .carry/pkg (fp4gemm)
carried:
    python3 -m pip install --no-deps --no-index .peers/wheels/*.whl --target .peers/site
    PYTHONPATH=.peers/site:.carry/pkg python3 bench/humming_layer.py       # OUT=dir -> dir/humming_layer.json
(if `import humming` then fails in cuda.bindings, reinstall leaving out the cuda_bindings / cuda_pathfinder
wheels: the image has its own.  The image has torch 2.11, triton 3.6, numpy, packaging, filelock and a
CUDA 13 toolkit with NVRTC;
humming's launcher is the wheel's precompiled one for torch >= 2.11; its kernels are JIT-compiled
with NVRTC at first use into HUMMING_CACHE_DIR, default ~/.humming/cache).
Env: HML_BUDGET_S (240: cases that would start past it are skipped), HML_REPS (30, at least 30),
     HML_SHAPES (comma-separated substrings of the shape names), HML_TOKENS (1,4096,64,512,8),
     HML_GRAPHS (1), HML_ACT (humming | torch), HML_TUNING (needed: humming's table cut to the
     intervals this run's M values fall in, the same kernels compiled once in parallel | full:
     vLLM's whole table, every interval compiled at the first call), HML_FP4GEMM (1),
     HML_SLEEP_CYCLES (3000000), HML_DIAG_T (64: per-GEMM diagnostics for T up to this),
     HML_W2_ALIGN (own: when humming's w2 table picks another block M than w13's for the same M, w2
     gets its own routing tables | shared: w13's tables for both, exactly as vLLM's main_apply does),
     HML_TRACEBACK (1: print the last lines of the traceback of a failed step).
Checked off-GPU when this was written (humming's Python run against a stand-in H200 DeviceInfo, NVRTC
13.2 from PyPI): every GEMM kernel the tables pick for these shapes and T, the two process_input
activation kernels and the repack kernel compile for sm_90a (about 2 s each on one core).
Note (read from humming 0.1.19's SM90 heuristics with an H200's figures, not run): the w13 and w2
tables do pick different block M for some M (e.g. Qwen3 T=512: M=4096 -> w13 48, w2 40), hence
HML_W2_ALIGN.
"""

import gc
import json
import math
import os
import statistics
import sys
import time
import traceback

T0 = time.time()


def _env_num(name, default, cast):
    try:
        return cast(os.environ.get(name, str(default)))
    except ValueError:
        print(f"WARNING: {name}={os.environ.get(name)!r} is not a number; using {default}", flush=True)
        return cast(default)


BUDGET_S = _env_num("HML_BUDGET_S", 240.0, float)
REPS = max(30, _env_num("HML_REPS", 30, int))
WARMUP = 3
B2B = 20
SLEEP_CYCLES = _env_num("HML_SLEEP_CYCLES", 3000000, int)
GRAPHS = os.environ.get("HML_GRAPHS", "1") != "0"
ACT_PREF = os.environ.get("HML_ACT", "humming").strip().lower()
TUNING = os.environ.get("HML_TUNING", "needed").strip().lower()
USE_FP4 = os.environ.get("HML_FP4GEMM", "1") != "0"
DIAG_T = _env_num("HML_DIAG_T", 64, int)
W2_ALIGN = os.environ.get("HML_W2_ALIGN", "own").strip().lower()   # own | shared (vLLM: w13's tables for both)
SW_ALPHA, SW_LIMIT = 1.702, 7.0
PAD_N, PAD_K = 256, 128      # vLLM's pad_n_to_multiple / pad_k_to_multiple for Humming MoE
N_LOCKS = 16384              # stream-K locks (int32, zeroed); vLLM gives the layer 1024

SHAPES = [
    dict(name="gpt-oss-120b", E=128, H=2880, I=2880, k=4, act="swigluoai", gate_up="interleaved"),
    dict(name="qwen3-30b-a3b", E=128, H=2048, I=768, k=8, act="silu", gate_up="stacked"),
]
TOKENS = [1, 4096, 64, 512, 8]
IMPL_ORDER = ["humming", "humming_gemms", "humming_align", "fp4gemm_run"]

# Humming process_input activation formulas (a = gate, b = up; the kernel is built without fast math)
ACT_IMPL = {
    "swigluoai": (f"(fminf(a, {SW_LIMIT}f) / (1.0f + expf(-{SW_ALPHA}f * fminf(a, {SW_LIMIT}f))))"
                  f" * (fminf(fmaxf(b, -{SW_LIMIT}f), {SW_LIMIT}f) + 1.0f)"),
    "silu": "(a / (1.0f + expf(-a))) * b",
}
ACT_TYPE = {"interleaved": "binary_interleaved", "stacked": "binary_split"}


def function_desc(cfg):
    if cfg["act"] == "swigluoai":
        act = (f"g' = min(g, {SW_LIMIT}), u' = clamp(u, -{SW_LIMIT}, {SW_LIMIT}), "
               f"act = g' * sigmoid({SW_ALPHA} g') * (u' + 1)  [gpt-oss / vLLM SWIGLUOAI]")
    else:
        act = "act = silu(g) * u = g * sigmoid(g) * u  [vLLM SILU]"
    lay = ("gate = even rows of W13 (even GEMM1 columns), up = odd rows" if cfg["gate_up"] == "interleaved"
           else f"gate = rows 0..{cfg['I'] - 1} of W13, up = rows {cfg['I']}..{2 * cfg['I'] - 1}")
    return f"out[t] = sum_j w[t,j] * W2_e act(W13_e x_t), e = ids[t,j]; {lay}; {act}"


ROUTING_DESC = ("router logits: per token a random permutation of 0..E-1 times 2^-3..2^-1 (no ties); top-k, "
                "softmax over the k selected, weights rounded to bf16, experts ascending per token; the same "
                "ids / weights go to both libraries and the reference")


def say(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def short(e, n=500):
    msg = str(e).replace("\n", " ").strip()
    return f"{type(e).__name__}: {msg}"[:n]


class StepError(Exception):
    def __init__(self, step, err):
        super().__init__(f"{step} failed: {short(err)}")
        self.step, self.err = step, err


def synced(fn):
    """fn followed by a device sync, so that an asynchronous kernel error is blamed on fn's step."""
    def call(*a, **kw):
        r = fn(*a, **kw)
        torch.cuda.synchronize()
        return r
    return call


def step(name, fn, *a, **kw):
    """Runs fn; any exception becomes StepError naming the step (printed by the caller)."""
    try:
        return fn(*a, **kw)
    except StepError:
        raise
    except Exception as e:  # noqa: BLE001
        if os.environ.get("HML_TRACEBACK", "1") == "1":
            tb = traceback.format_exc().strip().splitlines()
            say(f"  traceback ({name}): " + " | ".join(x.strip() for x in tb[-6:])[:1500])
        raise StepError(name, e) from e


# ----------------------------------------------------------------------------------------- imports
try:
    import torch
except Exception as _e:  # noqa: BLE001
    say(f"HML_SKIP: torch import failed: {short(_e)}")
    sys.exit(0)

DEV = torch.device("cuda")


class NS:
    pass


H = None          # namespace of the Humming names used here
H_ERR = None
FP4 = FMOE = None
FP4_ERR = None


def import_humming():
    global H, H_ERR
    try:
        import humming
        from humming.config import GemmType
        from humming.layer import HummingMethod
        from humming.schema import BaseWeightSchema, HummingInputSchema
        ns = NS()
        ns.mod, ns.version = humming, getattr(humming, "__version__", "?")
        ns.path = os.path.dirname(os.path.abspath(humming.__file__))
        ns.GemmType, ns.Method = GemmType, HummingMethod
        ns.BaseWeightSchema, ns.InputSchema = BaseWeightSchema, HummingInputSchema
        try:
            from humming.transform import transform_humming_weight, transform_humming_weight_scale
            ns.tw, ns.tws = transform_humming_weight, transform_humming_weight_scale
        except Exception:  # noqa: BLE001
            ns.tw = ns.tws = None
        H = ns
    except Exception as e:  # noqa: BLE001
        H_ERR = e
        tb = traceback.format_exc().strip().splitlines()
        say("  traceback (import humming): " + " | ".join(x.strip() for x in tb[-6:])[:1500])


def import_fp4gemm():
    global FP4, FMOE, FP4_ERR
    try:
        import fp4gemm
        from fp4gemm import moe
        FP4, FMOE = fp4gemm, moe
    except Exception as e:  # noqa: BLE001
        FP4_ERR = e


# ------------------------------------------------------------------------------ MXFP4 bytes, decode
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
_LUT = {}


def decode_rows(p, s, swap=False):
    """fp4gemm layout -> float32 [N, K]: p [N, K/2] uint8 (k = 2j low nibble, 2j+1 high; swap=True
    reads them the other way round), s [N, K/32] UE8M0 codes (2^(code-127))."""
    lut = _LUT.get(p.device)
    if lut is None:
        lut = _LUT[p.device] = torch.tensor(_E2M1, dtype=torch.float32, device=p.device)
    n = p.shape[0]
    lo, hi = lut[(p & 0xF).long()], lut[(p >> 4).long()]
    v = torch.stack((hi, lo) if swap else (lo, hi), dim=-1).reshape(n, -1)
    sc = torch.exp2(s.float() - 127.0)
    return (v.view(n, -1, 32) * sc.unsqueeze(-1)).reshape(n, -1)


def make_weights(cfg, seed):
    E, Hd, I = cfg["E"], cfg["H"], cfg["I"]
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    p13 = torch.randint(0, 256, (E, 2 * I, Hd // 2), dtype=torch.uint8, device=DEV, generator=g)
    s13 = torch.randint(120, 128, (E, 2 * I, Hd // 32), dtype=torch.uint8, device=DEV, generator=g)
    p2 = torch.randint(0, 256, (E, Hd, I // 2), dtype=torch.uint8, device=DEV, generator=g)
    s2 = torch.randint(120, 128, (E, Hd, I // 32), dtype=torch.uint8, device=DEV, generator=g)
    return p13, s13, p2, s2


# ------------------------------------------------------------------------------ routing, reference
def make_routing(T, E, k, seed):
    g = torch.Generator(device=DEV)
    g.manual_seed(seed)
    perm = torch.argsort(torch.rand((T, E), device=DEV, generator=g), dim=1).float()
    sc = torch.exp2(torch.randint(-3, 0, (T, 1), device=DEV, generator=g).float())
    logits = perm * sc
    vals, idx = torch.topk(logits, k, dim=1)
    w = torch.softmax(vals, dim=1).to(torch.bfloat16).float()
    idx, order = torch.sort(idx, dim=1)
    w = torch.gather(w, 1, order)
    return idx.to(torch.int32).contiguous(), w.contiguous()


def act_fn(cfg, h):
    """h float32 [n, 2I] (GEMM1 columns in W13 row order) -> act [n, I]."""
    I = cfg["I"]
    if cfg["gate_up"] == "interleaved":
        g, u = h[:, 0::2], h[:, 1::2]
    else:
        g, u = h[:, :I], h[:, I:]
    if cfg["act"] == "swigluoai":
        g = g.clamp(max=SW_LIMIT)
        u = u.clamp(min=-SW_LIMIT, max=SW_LIMIT)
        return g * torch.sigmoid(SW_ALPHA * g) * (u + 1.0)
    return g * torch.sigmoid(g) * u


def reference(cfg, st, x, ids, wts):
    """float32 layer on the exact dequantised weights, no intermediate rounding."""
    T, k = ids.shape
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=cfg["E"]).tolist()
    tok = order // k
    wrow = wts.reshape(-1).float()[order]
    xf = x.float()
    out = torch.zeros((T, cfg["H"]), dtype=torch.float32, device=x.device)
    o = 0
    for e, n in enumerate(counts):
        if n == 0:
            continue
        t, wr = tok[o:o + n], wrow[o:o + n]
        o += n
        w13 = decode_rows(st.p13[e], st.s13[e])          # [2I, H]
        w2 = decode_rows(st.p2[e], st.s2[e])             # [H, I]
        hmat = xf.index_select(0, t) @ w13.t()
        y = act_fn(cfg, hmat) @ w2.t()
        out.index_add_(0, t, y * wr[:, None])
    return out


def errors(ref, out, tol=1e-2):
    o = out.float()
    d = o - ref
    finite = bool(torch.isfinite(o).all().item())
    max_rel = (d.abs().max() / ref.abs().max().clamp_min(1e-30)).item()
    rms_rel = (d.pow(2).mean().sqrt() / ref.pow(2).mean().sqrt().clamp_min(1e-30)).item()
    # ok: the 1e-2 expected here; ok_tk: tk_layer.py's looser criterion (max_rel < 5e-2, rms_rel < 2e-2)
    return dict(max_rel=max_rel, rms_rel=rms_rel, finite=finite, ok=finite and max_rel < tol,
                ok_tk=finite and max_rel < 0.05 and rms_rel < 0.02)


# ------------------------------------------------------------------------------ Humming MoE layer
class HummingMoE:
    """vLLM's Humming MoE path for one weight set: load-time conversion + transform, per-call
    moe_align (torch) -> GEMM1 (indexed) -> activation -> GEMM2 (indexed, top_k 1) -> combine."""

    def __init__(self, cfg, p13, s13, p2, s2, m_values, notes):
        self.cfg, self.notes = cfg, notes
        self.E, self.Hd, self.I, self.k = cfg["E"], cfg["H"], cfg["I"], cfg["k"]
        self.layer = torch.nn.Module()
        self.layer.register_buffer("locks", torch.zeros(N_LOCKS, dtype=torch.int32, device=DEV))
        self.transform_how = {}
        self.timings = {}
        M = H.Method
        # (1) checkpoint format -> Humming standard format (vLLM: _convert_sublayer_to_humming)
        wschema = step("schema", H.BaseWeightSchema.from_config, {"quant_method": "mxfp4"})
        ischema = H.InputSchema()   # a_dtype None -> bf16 activations, no input quantisation
        self.schemas = {}
        subs = {"w13": (p13, s13, 2 * self.I, self.Hd, [self.I, self.I]),
                "w2": (p2, s2, self.Hd, self.I, [self.Hd])}
        for sub, (p, s, n, kdim, n_stacks) in subs.items():
            t = time.time()
            hs, tens = step(f"convert ({sub})", wschema.convert_humming,
                            tensors={"weight": p.clone(), "weight_scale": s.clone()},
                            shape_n_stacks=n_stacks, shape_k_stacks=[kdim], param_dtype=torch.bfloat16,
                            num_experts=self.E)
            his, _ = step(f"convert input schema ({sub})", ischema.convert_humming, tensors=tens,
                          shape_n_stacks=n_stacks, shape_k_stacks=[kdim], param_dtype=torch.bfloat16,
                          num_experts=self.E)
            self.schemas[sub] = (hs, his)
            for name, tt in tens.items():
                setattr(self.layer, f"{sub}_{name}", torch.nn.Parameter(tt, requires_grad=False))
            # (2) layer config (vLLM: _prepare_and_transform_sublayer, same arguments)
            step(f"prepare_layer_meta ({sub})", M.prepare_layer_meta, layer=self.layer, shape_n=n, shape_k=kdim,
                 weight_schema=hs, input_schema=his, num_experts=self.E, pad_n_to_multiple=PAD_N,
                 pad_k_to_multiple=PAD_K, has_bias=False, torch_dtype=torch.bfloat16, sublayer_name=sub)
            # (3) transform (repack kernel is JIT-compiled here)
            try:
                step(f"transform ({sub}, incl. JIT of humming's repack kernel)", synced(M.transform_humming_layer),
                     self.layer, sublayer_name=sub)
                self.transform_how[sub] = "HummingMethod.transform_humming_layer"
            except StepError as e:
                say(f"  WARNING Humming {e}; trying the manual transform (transform.py's functions, uint8 padding)")
                step(f"transform fallback ({sub})", synced(self._manual_transform), sub, p, s)
                self.transform_how[sub] = f"manual fallback (transform_humming_layer failed: {short(e.err, 200)})"
                notes.append(f"{sub}: {self.transform_how[sub]}")
            self.timings[f"transform_{sub}_s"] = round(time.time() - t, 2)
        self.metas = dict(self.layer.humming_metas)
        for sub, meta in self.metas.items():
            w = getattr(self.layer, meta.weight_name)
            sc = getattr(self.layer, meta.weight_scale_name)
            say(f"  humming {sub}: shape_n {meta.shape_n} (pad {meta.pad_shape_n}) shape_k {meta.shape_k} "
                f"(pad {meta.pad_shape_k}) a {meta.a_dtype} b {meta.b_dtype} bs {meta.bs_dtype} c {meta.c_dtype} "
                f"group {meta.weight_scale_group_size} scale_type {getattr(meta.weight_scale_type, 'value', '?')} "
                f"scale2 {getattr(meta.weight_scale_2_type, 'value', '?')} fused_e8m0 {meta.use_fused_e8m0_scale} "
                f"block_scaled_mma {meta.use_block_scaled_mma}; weight {tuple(w.shape)} {w.dtype}, "
                f"scale {tuple(sc.shape)} {sc.dtype}; {self.transform_how[sub]}")
        # (4) humming's tuning tables (vLLM: HummingExpertsBase.init_humming_moe)
        t = time.time()
        self.compute_config = {"use_batch_invariant": False, "use_f16_accum": False,
                               "gemm_type": H.GemmType.INDEXED.value}
        self.compute_str = json.dumps(self.compute_config)
        self.tables, self.tune_str = {}, {}
        for sub in ("w13", "w2"):
            table = step(f"tuning table ({sub})", M.get_default_tuning_configs, layer=self.layer,
                         use_f16_accum=False, use_batch_invariant=False, gemm_type=H.GemmType.INDEXED,
                         sublayer_name=sub)
            self.tables[sub] = table
            if TUNING == "full":
                used = table
            else:
                used = [ent for ent in table if any(ent[0] < m <= ent[1] for m in m_values)]
            self.tune_str[sub] = json.dumps(used)
            say(f"  humming {sub}: tuning table {len(table)} intervals, {len(used)} used by this run "
                f"(HML_TUNING={TUNING}); distinct configs {len({json.dumps(x[2], sort_keys=True) for x in used})}")
        self.timings["tuning_table_s"] = round(time.time() - t, 2)
        # activation
        self.act_mode = "humming" if ACT_PREF != "torch" else "torch"
        self.act_type = ACT_TYPE[cfg["gate_up"]]
        self.act_impl = ACT_IMPL[cfg["act"]]

    # -- fallback transform: the same functions transform_humming_tensors calls for this config
    def _manual_transform(self, sub, p, s):
        meta = self.layer.humming_metas[sub]
        if meta.use_fused_e8m0_scale or meta.use_block_scaled_mma or meta.use_int_weight_scale:
            raise RuntimeError("manual transform only covers plain group e8m0 scales")
        if H.tw is None or H.tws is None:
            raise RuntimeError("humming.transform functions not importable")
        E, n, kh = p.shape
        npad, kpad = meta.shape_n, meta.shape_k
        wp = torch.zeros((E, npad, kpad // 2), dtype=torch.uint8, device=p.device)
        wp[:, :n, :kh] = p
        sp = torch.full((E, npad, kpad // 32), 127, dtype=torch.uint8, device=p.device)  # 2^0, as pad value 1.0
        sp[:, :n, :s.shape[2]] = s
        w = H.tw(weight=wp.view(torch.int32), b_dtype=meta.b_dtype, a_dtype=meta.a_dtype, zero_point=None,
                 use_fused_e8m0_scale=False, packed=True, interleave_mode=3,
                 use_packed_k_layout=bool(meta.use_packed_k_layout), use_native_dequant=meta.use_native_dequant,
                 use_raw_weight=meta.use_raw_weight, use_flat_weight=meta.use_flat_weight,
                 use_ldmatrix_dequant=meta.use_ldmatrix_dequant)
        sc = H.tws(sp, to_apply_on_c=meta.should_apply_bs_on_c).view(torch.float8_e8m0fnu)
        H.Method.may_set_param(self.layer, meta.weight_name, w)
        H.Method.may_set_param(self.layer, meta.weight_scale_name, sc)

    # -- per-call pieces
    def block_m(self, sub, m):
        """vLLM's rule: the interval lo < M <= hi of the (full) table, its block_shape[0]."""
        for lo, hi, conf in self.tables[sub]:
            if lo < m <= hi:
                return int(conf["block_shape"][0]), conf
        raise ValueError(f"cannot find moe_block_size for shape {m} ({sub})")

    def align(self, ids):
        """Routing tables for both GEMMs (vLLM aligns once with w13's block; a second alignment is
        made only if w2's table asks another block M for the same M, which vLLM does not do)."""
        T, k = ids.shape
        m = T * k
        b1, _ = self.block_m("w13", m)
        b2, _ = self.block_m("w2", m)
        a1 = moe_align(ids, self.E, b1)
        a2 = a1 if (b2 == b1 or W2_ALIGN == "shared") else moe_align(ids, self.E, b2)
        return (a1, a2)

    def activation(self, gu, act):
        if self.act_mode == "humming":
            H.Method.may_process_input(self.layer, gu, outputs=act, activation_type=self.act_type,
                                       activation_impl=self.act_impl, sublayer_name="w2")
        else:
            act.copy_(act_fn(self.cfg, gu.float()))

    def gemm1(self, x, al, bufs):
        s, e, n = al[0]
        H.Method.forward_layer(layer=self.layer, inputs=x, outputs=bufs["gu"], sorted_ids=s, expert_ids=e,
                               num_tokens_padded=n, top_k=self.k, valid_shape_m=x.shape[0] * self.k,
                               compute_config=self.compute_str, tuning_config=self.tune_str["w13"],
                               sublayer_name="w13")

    def gemm2(self, al, bufs):
        s, e, n = al[1]
        H.Method.forward_layer(layer=self.layer, inputs=bufs["act"], outputs=bufs["down"], sorted_ids=s,
                               expert_ids=e, num_tokens_padded=n, top_k=1, valid_shape_m=bufs["act"].shape[0],
                               compute_config=self.compute_str, tuning_config=self.tune_str["w2"],
                               sublayer_name="w2")

    def combine(self, wb, bufs):
        T = bufs["out"].shape[0]
        torch.bmm(wb.view(T, 1, self.k), bufs["down"].view(T, self.k, self.Hd), out=bufs["out"].view(T, 1, self.Hd))
        return bufs["out"]

    def run(self, x, ids, wts, bufs, al=None, wb=None):
        if al is None:
            al = self.align(ids)
        if wb is None:
            wb = wts.to(torch.bfloat16)
        self.gemm1(x, al, bufs)
        self.activation(bufs["gu"], bufs["act"])
        self.gemm2(al, bufs)
        return self.combine(wb, bufs)

    def buffers(self, T):
        m = T * self.k
        return dict(gu=torch.empty((m, 2 * self.I), dtype=torch.bfloat16, device=DEV),
                    act=torch.empty((m, self.I), dtype=torch.bfloat16, device=DEV),
                    down=torch.empty((m, self.Hd), dtype=torch.bfloat16, device=DEV),
                    out=torch.empty((T, self.Hd), dtype=torch.bfloat16, device=DEV))


def moe_align(ids, E, bs):
    """torch version of vLLM's moe_align_block_size(topk_ids, bs, E): (sorted_ids int32 [cap]
    (flat index t*k+j, grouped by expert, each group padded to a multiple of bs with the sentinel
    T*k), expert_ids int32 [cap/bs], num_tokens_padded int32 [1]); no host sync (graph-capturable)."""
    T, k = ids.shape
    n = T * k
    dev = ids.device
    flat = ids.reshape(-1).to(torch.int64)
    counts = torch.zeros(E, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + (bs - 1)) // bs * bs
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    cnt_start = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    e_sorted = flat[order]
    dest = pad_start[e_sorted] + (torch.arange(n, device=dev) - cnt_start[e_sorted])
    cap = min(n + E * (bs - 1), n * bs)
    cap = (cap + bs - 1) // bs * bs
    sorted_ids = torch.full((cap,), n, dtype=torch.int32, device=dev)
    sorted_ids.scatter_(0, dest, order.to(torch.int32))
    starts = torch.arange(cap // bs, device=dev, dtype=torch.int64) * bs
    expert_ids = torch.searchsorted(pad_end, starts, right=True).clamp_(max=E - 1).to(torch.int32)
    num_tokens_padded = pad_end[-1:].to(torch.int32)
    return sorted_ids, expert_ids, num_tokens_padded


# ------------------------------------------------------------------------------ diagnostics
def diagnose(cfg, st, hm, x, ids, wts, bufs, tag, max_rows=32):
    """GEMM1 and GEMM2 alone on the first rows: Humming's gate_up against x @ W13_e^T (and against
    nibble-swapped weights), Humming's down against its own act @ W2_e^T; one expert decoded at a time."""
    out = {}
    try:
        T, k = ids.shape
        al = hm.align(ids)
        hm.gemm1(x, al, bufs)
        hm.activation(bufs["gu"], bufs["act"])
        hm.gemm2(al, bufs)
        torch.cuda.synchronize()
        rows = min(T * k, max_rows)
        groups = {}
        for r, e in enumerate(ids.reshape(-1)[:rows].tolist()):
            groups.setdefault(e, []).append(r)
        r1 = torch.empty((rows, 2 * cfg["I"]), dtype=torch.float32, device=DEV)
        r1s = torch.empty_like(r1)
        r2 = torch.empty((rows, cfg["H"]), dtype=torch.float32, device=DEV)
        for e, rs in groups.items():
            idx = torch.tensor(rs, device=DEV)
            xs = x.index_select(0, idx // k).float()
            w = decode_rows(st.p13[e], st.s13[e])
            r1[idx] = xs @ w.t()
            w = decode_rows(st.p13[e], st.s13[e], swap=True)
            r1s[idx] = xs @ w.t()
            w = decode_rows(st.p2[e], st.s2[e])
            r2[idx] = bufs["act"].index_select(0, idx).float() @ w.t()
            del w
        g1 = bufs["gu"][:rows].float()
        g2 = bufs["down"][:rows].float()
        out["rows"] = rows
        out["gemm1"] = errors(r1, g1)
        out["gemm1_vs_nibble_swapped"] = errors(r1s, g1)
        out["gemm2"] = errors(r2, g2)
        out["activation"] = errors(act_fn(cfg, g1), bufs["act"][:rows].float())
        say(f"{tag} diag (rows 0..{rows - 1}): GEMM1 max_rel {out['gemm1']['max_rel']:.2e} "
            f"(vs nibble-swapped weights {out['gemm1_vs_nibble_swapped']['max_rel']:.2e}), activation "
            f"{out['activation']['max_rel']:.2e} (on its own bf16 GEMM1 output), GEMM2 {out['gemm2']['max_rel']:.2e} "
            "(on its own activation)")
    except Exception as e:  # noqa: BLE001
        out["error"] = short(e)
        say(f"{tag} diag failed: {short(e)}")
    return out


# ------------------------------------------------------------------------------ timing
_FLUSH = None


def gpu_time_us(fn, reps=REPS):
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=DEV)
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    st = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    en = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        _FLUSH.zero_()  # 256 MiB write: L2 flush, outside the events
        try:
            torch.cuda._sleep(SLEEP_CYCLES)
        except Exception:  # noqa: BLE001
            pass
        st[i].record()
        fn()
        en[i].record()
    torch.cuda.synchronize()
    ts = sorted(a.elapsed_time(b) * 1e3 for a, b in zip(st, en))
    t = time.perf_counter()
    for _ in range(B2B):
        fn()
    torch.cuda.synchronize()
    b2b = (time.perf_counter() - t) / B2B * 1e6
    return dict(us=statistics.median(ts), us_min=ts[0], us_p90=ts[int(0.9 * (len(ts) - 1))], reps=reps,
                back2back_us=b2b)


def capture_graph(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    torch.cuda.synchronize()
    return g, out


def measure(name, fn, ref, impls, graph=True, step_name="forward"):
    r = {}
    impls[name] = r
    try:
        t = time.time()
        out = step(step_name, synced(fn))
        r["first_call_s"] = round(time.time() - t, 3)
        if ref is not None:
            r.update(errors(ref, out))
            out = out.clone()
        r.update(step(f"{step_name} (timing)", gpu_time_us, fn))
    except Exception as e:  # noqa: BLE001
        r.clear()
        r["error"] = short(e)
        r["step"] = getattr(e, "step", "?")
        say(f"ERROR {name}: {r['error']}")
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            pass
        return None
    if graph and GRAPHS:
        g = gout = None
        try:
            g, gout = capture_graph(fn)
            if ref is not None:
                g.replay()
                torch.cuda.synchronize()
                r["graph_max_rel"] = errors(ref, gout)["max_rel"]
            gr = gpu_time_us(g.replay)
            r["graph_us"], r["graph_us_min"], r["graph_back2back_us"] = gr["us"], gr["us_min"], gr["back2back_us"]
        except Exception as e:  # noqa: BLE001
            r["graph_error"] = short(e, 300)
            say(f"  {name}: graph capture/replay failed: {r['graph_error']}")
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
        del g, gout
    return out


# ------------------------------------------------------------------------------ one shape
def prepare_shape(cfg, tokens, seed):
    st = NS()
    st.notes, st.info = [], {}
    E, k = cfg["E"], cfg["k"]
    t0 = time.time()
    st.p13, st.s13, st.p2, st.s2 = make_weights(cfg, seed)
    w = decode_rows(st.p13[0], st.s13[0])
    st.w13_rms = w.pow(2).mean().sqrt().item()
    st.x_scale = 3.0 / (st.w13_rms * math.sqrt(cfg["H"]))   # GEMM1 outputs ~ N(0, 3^2)
    del w
    b = int(st.p13[0, 0, 0].item())
    st.info["first_byte"] = (f"w13[0,0,0] = 0x{b:02x}: W[n=0,k=0] = {_E2M1[b & 15]:+g}, W[n=0,k=1] = "
                             f"{_E2M1[b >> 4]:+g} (x 2^{int(st.s13[0, 0, 0].item()) - 127})")
    say(f"[{cfg['name']}] weights: random bytes, scale codes 120..127; W13 rms {st.w13_rms:.3f}; "
        f"x ~ N(0, {st.x_scale:.3g}^2); {st.info['first_byte']}")
    # Humming
    st.hm = None
    st.h_err = None
    if H is None:
        st.h_err = f"import failed: {short(H_ERR) if H_ERR else '?'}"
    else:
        m_values = sorted({T * k for T in tokens} | {k})
        try:
            t = time.time()
            st.hm = HummingMoE(cfg, st.p13, st.s13, st.p2, st.s2, m_values, st.notes)
            st.info["humming_load_s"] = round(time.time() - t, 2)
            st.info["humming_timings"] = st.hm.timings
            st.info["humming_transform"] = st.hm.transform_how
            st.info["humming_meta"] = {s: m.to_str() for s, m in st.hm.metas.items()}
            # JIT compile: one small call compiles every kernel of the (cut) tables and the activation
            t = time.time()
            ids1, w1 = make_routing(1, E, k, seed + 3)
            x1 = torch.zeros((1, cfg["H"]), dtype=torch.bfloat16, device=DEV)
            bufs = st.hm.buffers(1)
            al = st.hm.align(ids1)
            step("JIT compile + first launch (w13 GEMM)", synced(st.hm.gemm1), x1, al, bufs)
            try:
                step("JIT compile + first launch (activation, humming process_input)", synced(st.hm.activation),
                     bufs["gu"], bufs["act"])
            except StepError as e:
                if st.hm.act_mode == "humming":
                    say(f"  WARNING Humming activation: {e}; using torch for the activation")
                    st.notes.append(f"humming process_input activation failed ({short(e.err, 200)}): torch activation")
                    st.hm.act_mode = "torch"
                    st.hm.activation(bufs["gu"], bufs["act"])
                else:
                    raise
            step("JIT compile + first launch (w2 GEMM)", synced(st.hm.gemm2), al, bufs)
            st.info["humming_jit_s"] = round(time.time() - t, 2)
            say(f"[{cfg['name']}] humming ready: load+transform {st.info['humming_load_s']} s, JIT + first calls "
                f"{st.info['humming_jit_s']} s; activation: {st.hm.act_mode}"
                + (f" ({st.hm.act_type}: {st.hm.act_impl})" if st.hm.act_mode == "humming" else ""))
        except StepError as e:
            st.h_err = str(e)
            say(f"ERROR humming [{cfg['name']}]: {e}")
            st.hm = None
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
        except Exception as e:  # noqa: BLE001
            st.h_err = f"setup failed: {short(e)}"
            say(f"ERROR humming [{cfg['name']}]: {st.h_err}")
            st.hm = None
    # fp4gemm
    st.fp4 = None
    st.fp4_err = None
    st.fp4_kw = dict(act_format="bf16", activation=cfg["act"], gate_up=cfg["gate_up"], scale_layout="linear")
    if cfg["act"] == "swigluoai":
        st.fp4_kw.update(swiglu_alpha=SW_ALPHA, swiglu_limit=SW_LIMIT)
    if not USE_FP4:
        st.fp4_err = "HML_FP4GEMM=0"
    elif FMOE is None:
        st.fp4_err = f"fp4gemm not importable: {short(FP4_ERR) if FP4_ERR else '?'}"
    else:
        try:
            t = time.time()
            st.fp4 = FMOE.MoeLayer(st.p13, st.s13, st.p2, st.s2, max_tokens=max(tokens), topk=k, **st.fp4_kw)
            torch.cuda.synchronize()
            st.info["fp4gemm_plan_s"] = round(time.time() - t, 2)
        except Exception as e:  # noqa: BLE001
            st.fp4_err = f"MoeLayer plan failed: {short(e)}"
            say(f"ERROR fp4gemm [{cfg['name']}]: {st.fp4_err}")
    st.prep_s = round(time.time() - t0, 1)
    return st


def run_case(cfg, T, st, seed):
    E, Hd, I, k = cfg["E"], cfg["H"], cfg["I"], cfg["k"]
    tag = f"[{cfg['name']} T={T}]"
    case = dict(shape=cfg["name"], T=T, E=E, H=Hd, I=I, topk=k, notes=[], impls={})
    impls = case["impls"]
    ids, wts = make_routing(T, E, k, seed)
    g = torch.Generator(device=DEV)
    g.manual_seed(seed + 1)
    x = (torch.randn((T, Hd), device=DEV, dtype=torch.float32, generator=g) * st.x_scale).to(torch.bfloat16)
    ref = reference(cfg, st, x, ids, wts)
    rows = T * k
    active = int(torch.unique(ids).numel())
    case.update(rows=rows, active_experts=active)
    flops = 6.0 * rows * Hd * I
    wbytes = active * 3.0 * Hd * I * (0.5 + 1.0 / 32.0)

    hm = st.hm
    if hm is not None:
        try:
            b1, c1 = hm.block_m("w13", rows)
            b2, c2 = hm.block_m("w2", rows)
            case["humming_configs"] = dict(w13=c1, w2=c2)
            case["moe_block_size"] = dict(w13=b1, w2=b2)
            if b1 != b2:
                case["notes"].append(
                    f"w13 block M {b1} != w2 block M {b2} for M={rows}: " +
                    ("w2 gets its own moe_align with block M " + str(b2) + " (vLLM passes w13's tables to both "
                     "GEMMs, which the kernel reads with its own block M: HML_W2_ALIGN=shared reproduces that)"
                     if W2_ALIGN != "shared" else "HML_W2_ALIGN=shared: w2 reads w13's tables, as vLLM does"))
            say(f"{tag} humming kernels: w13 {c1.get('mma_type')} block {c1.get('block_shape')} stream_k "
                f"{c1.get('use_stream_k')}; w2 {c2.get('mma_type')} block {c2.get('block_shape')} stream_k "
                f"{c2.get('use_stream_k')}")
            bufs = hm.buffers(T)
            al = step("moe_align (torch)", hm.align, ids)
            wb = wts.to(torch.bfloat16)
            measure("humming", lambda: hm.run(x, ids, wts, bufs), ref, impls)
            bufs2 = hm.buffers(T)
            measure("humming_gemms", lambda: hm.run(x, ids, wts, bufs2, al=al, wb=wb), ref, impls)
            measure("humming_align", lambda: hm.align(ids), None, impls, graph=False, step_name="moe_align")
            bad = any("error" in impls.get(n, {}) or not impls.get(n, {}).get("ok", True)
                      for n in ("humming", "humming_gemms"))
            if T <= DIAG_T or bad:
                case["humming_diag"] = diagnose(cfg, st, hm, x, ids, wts, hm.buffers(T), tag)
            impls["humming"]["function"] = f"activation by {hm.act_mode}"
        except Exception as e:  # noqa: BLE001
            impls.setdefault("humming", {})["error"] = short(e)
            say(f"{tag} ERROR humming: {short(e)}")
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
    else:
        impls["humming"] = dict(error=st.h_err or "humming not available")

    if st.fp4 is not None:
        out_buf = torch.empty((T, Hd), dtype=torch.bfloat16, device=DEV)
        measure("fp4gemm_run", lambda: st.fp4.run(x, ids, wts, out=out_buf), ref, impls, step_name="fp4gemm run")
    else:
        impls["fp4gemm_run"] = dict(error=st.fp4_err or "fp4gemm not available")

    hum = impls.get("humming", {})
    for name, r in impls.items():
        if "us" not in r or name == "humming_align":
            continue
        r["tflops"] = flops / (r["us"] * 1e-6) / 1e12
        r["tbps_weights"] = wbytes / (r["us"] * 1e-6) / 1e12
        if hum.get("us"):
            r["x_humming"] = r["us"] / hum["us"]
        if r.get("graph_us") and hum.get("graph_us"):
            r["x_humming_graph"] = r["graph_us"] / hum["graph_us"]
    say(f"{tag} rows={rows} active experts={active}")
    for name in IMPL_ORDER:
        if name in impls:
            say(case_line(tag, name, impls[name]))
    for n in case["notes"]:
        say(f"{tag} note: {n}")
    return case


def _f(v, fmt, width):
    if isinstance(v, (int, float)) and v == v and v not in (float("inf"), float("-inf")):
        return format(v, fmt).rjust(width)
    return "n/a".rjust(width)


def case_line(tag, name, r):
    if "error" in r:
        return f"{tag} {name:<14s} ERROR [{r.get('step', '?')}] {r['error']}"
    s = f"{tag} {name:<14s} {_f(r.get('us'), '.1f', 9)} us  graph {_f(r.get('graph_us'), '.1f', 9)} us"
    if name != "humming_align":
        s += f"  x humming {_f(r.get('x_humming'), '.2f', 5)} (graph {_f(r.get('x_humming_graph'), '.2f', 5)})"
    if "max_rel" in r:
        verdict = "OK" if r.get("ok") else ("ok(tk_layer criterion)" if r.get("ok_tk") else "CHECK")
        s += f"  max_rel {r['max_rel']:.2e} rms_rel {r['rms_rel']:.2e} {verdict}"
        if "graph_max_rel" in r:
            s += f" (graph max_rel {r['graph_max_rel']:.1e})"
    if "tflops" in r:
        s += f"  {r['tflops']:.1f} TF/s {r['tbps_weights']:.2f} TB/s(w)"
    s += f"  host b2b {_f(r.get('back2back_us'), '.1f', 7)} us  first {r.get('first_call_s', 0):.2f} s"
    if "graph_error" in r:
        s += f"  [graph capture failed: {r['graph_error'][:160]}]"
    return s


def print_tables(results):
    names = ["humming", "humming_gemms", "fp4gemm_run"]
    for key, title in (("us", "eager, CUDA events"), ("graph_us", "CUDA graph replay")):
        say(f"== {title}: median us per layer call (L2 flushed); ratio = fp4gemm_run / humming ==")
        hdr = f"{'shape':<16s}{'T':>6s}" + "".join(f"{n:>15s}" for n in names)
        hdr += f"{'run/humming':>13s}{'run/h_gemms':>13s}{'h max_rel':>11s}{'run max_rel':>12s}"
        print(hdr, flush=True)
        for c in results:
            imp = c.get("impls", {})
            if c.get("skipped"):
                print(f"{c['shape']:<16s}{c['T']:>6d}  {c['skipped']}", flush=True)
                continue
            row = f"{c['shape']:<16s}{c['T']:>6d}"
            for n in names:
                v = imp.get(n, {})
                row += ("ERR".rjust(15) if "error" in v else _f(v.get(key), ".1f", 15))

            def ratio(a, b):
                x, y = imp.get(a, {}).get(key), imp.get(b, {}).get(key)
                return x / y if x and y else None

            row += _f(ratio("fp4gemm_run", "humming"), ".2f", 13) + _f(ratio("fp4gemm_run", "humming_gemms"), ".2f", 13)
            row += _f(imp.get("humming", {}).get("max_rel"), ".1e", 11)
            row += _f(imp.get("fp4gemm_run", {}).get("max_rel"), ".1e", 12)
            print(row, flush=True)


def write_json(doc):
    od = os.environ.get("OUT")
    if not od:
        return
    try:
        os.makedirs(od, exist_ok=True)
        path = os.path.join(od, "humming_layer.json")
        with open(path + ".tmp", "w") as f:
            json.dump(doc, f, indent=1, default=str)
        os.replace(path + ".tmp", path)
    except Exception as e:  # noqa: BLE001
        say(f"WARNING: could not write {od}/humming_layer.json: {short(e)}")


def main():
    if not torch.cuda.is_available():
        say("HML_SKIP: no CUDA device visible")
        return
    torch.set_grad_enabled(False)
    try:
        torch.set_float32_matmul_precision("highest")
    except Exception:  # noqa: BLE001
        pass
    gpu = torch.cuda.get_device_name(0)
    cap = torch.cuda.get_device_capability(0)
    say(f"humming_layer: {gpu} sm{cap[0]}{cap[1]}  torch {torch.__version__}  python {sys.version.split()[0]}")
    say("import humming ...")
    import_humming()
    if H is not None:
        say(f"humming {H.version} ({H.path}); HUMMING_CACHE_DIR={os.environ.get('HUMMING_CACHE_DIR', '~/.humming/cache/')}")
    else:
        say(f"ERROR humming: import failed: {short(H_ERR) if H_ERR else '?'} (step: import)")
    if USE_FP4:
        import_fp4gemm()
        if FP4 is not None:
            say(f"fp4gemm {getattr(FP4, '__version__', '?')} ({os.path.dirname(os.path.abspath(FP4.__file__))})")
        else:
            say(f"ERROR fp4gemm: import failed: {short(FP4_ERR) if FP4_ERR else '?'}")
    say(f"reps={REPS} (median; 256 MiB L2 flush and {SLEEP_CYCLES} cycles of GPU spin before each)  budget "
        f"{BUDGET_S:.0f} s  graphs={GRAPHS}  HML_ACT={ACT_PREF}  HML_TUNING={TUNING}  HML_W2_ALIGN={W2_ALIGN}")
    say(f"routing: {ROUTING_DESC}")
    if H is None and FP4 is None:
        say("nothing to run")
        return

    sel = [s.strip().lower() for s in os.environ.get("HML_SHAPES", "").split(",") if s.strip()]
    shapes = [c for c in SHAPES if not sel or any(s in c["name"] for s in sel)]
    try:
        tokens = [int(v) for v in os.environ.get("HML_TOKENS", "").split(",") if v.strip()] or TOKENS
    except ValueError:
        tokens = TOKENS
    results = []
    doc = dict(script="bench/humming_layer.py", gpu=gpu, capability=list(cap), torch=torch.__version__,
               humming=dict(version=H.version if H else None, path=H.path if H else None,
                            error=short(H_ERR) if H_ERR else None),
               fp4gemm=dict(version=getattr(FP4, "__version__", None) if FP4 else None,
                            error=short(FP4_ERR) if FP4_ERR else None),
               routing=ROUTING_DESC,
               settings=dict(reps=REPS, warmup=WARMUP, l2_flush_mib=256, sleep_cycles=SLEEP_CYCLES, budget_s=BUDGET_S,
                             graphs=GRAPHS, act=ACT_PREF, tuning=TUNING, w2_align=W2_ALIGN, tokens=tokens,
                             pad_n=PAD_N, pad_k=PAD_K,
                             ratio="x_humming = t / t(humming), below 1 is faster than Humming"),
               humming_api=["BaseWeightSchema.from_config({'quant_method': 'mxfp4'}).convert_humming",
                            "HummingInputSchema().convert_humming", "HummingMethod.prepare_layer_meta",
                            "HummingMethod.transform_humming_layer", "HummingMethod.get_default_tuning_configs",
                            "HummingMethod.forward_layer (indexed gemm)",
                            "HummingMethod.may_process_input (activation)"],
               shapes=[], results=results)

    states = {}
    for T in tokens:
        for si, cfg in enumerate(shapes):
            tag = f"[{cfg['name']} T={T}]"
            if time.time() - T0 > BUDGET_S:
                results.append(dict(shape=cfg["name"], T=T, skipped="skipped: time budget", impls={}))
                say(f"{tag} skipped: time budget ({BUDGET_S:.0f} s)")
                continue
            if si not in states:
                say(f"[{cfg['name']}] preparing: E={cfg['E']} H={cfg['H']} I={cfg['I']} k={cfg['k']}")
                say(f"[{cfg['name']}] function: {function_desc(cfg)}")
                try:
                    st = prepare_shape(cfg, tokens, 1000 + 97 * si)
                    states[si] = st
                    doc["shapes"].append(dict(name=cfg["name"], E=cfg["E"], H=cfg["H"], I=cfg["I"], topk=cfg["k"],
                                              function=function_desc(cfg), prep_s=st.prep_s, info=st.info,
                                              notes=st.notes, humming_error=st.h_err, fp4gemm_error=st.fp4_err,
                                              fp4gemm_options=st.fp4_kw,
                                              humming_activation=(dict(mode=st.hm.act_mode, type=st.hm.act_type,
                                                                       impl=st.hm.act_impl) if st.hm else None)))
                    for n in st.notes:
                        say(f"[{cfg['name']}] note: {n}")
                except Exception as e:  # noqa: BLE001
                    states[si] = short(e)
                    say(f"ERROR shape {cfg['name']}: preparation failed: {short(e)}")
                    doc["shapes"].append(dict(name=cfg["name"], error=short(e)))
                write_json(doc)
            st = states[si]
            if isinstance(st, str):
                results.append(dict(shape=cfg["name"], T=T, skipped=f"preparation failed: {st[:200]}", impls={}))
                continue
            if time.time() - T0 > BUDGET_S:
                results.append(dict(shape=cfg["name"], T=T, skipped="skipped: time budget", impls={}))
                say(f"{tag} skipped: time budget ({BUDGET_S:.0f} s)")
                continue
            say(f"{tag} start")
            try:
                case = run_case(cfg, T, st, 1000 + 97 * si + 7 * T)
            except Exception as e:  # noqa: BLE001
                case = dict(shape=cfg["name"], T=T, error=short(e), impls={})
                say(f"{tag} ERROR case: {short(e)}")
                try:
                    torch.cuda.synchronize()
                except Exception:  # noqa: BLE001
                    pass
            case["elapsed_s"] = round(time.time() - T0, 1)
            results.append(case)
            doc["elapsed_s"] = case["elapsed_s"]
            write_json(doc)
    order = {c["name"]: i for i, c in enumerate(shapes)}
    results.sort(key=lambda c: (order.get(c.get("shape"), 99), c.get("T", 0)))
    print_tables(results)
    for st in states.values():
        if not isinstance(st, str):
            for a in list(vars(st)):
                setattr(st, a, None)
    gc.collect()
    doc["elapsed_s"] = round(time.time() - T0, 1)
    write_json(doc)
    if os.environ.get("OUT"):
        say(f"wrote {os.path.join(os.environ['OUT'], 'humming_layer.json')}")
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
