"""The public Python API, enumerated: every public function, class, method and property of
``fp4gemm``, ``fp4gemm.moe``, ``fp4gemm.ops`` and ``fp4gemm.ep`` is called at least once on valid
input by a recipe below, and its result checked (against the SPEC decoders, float64 products, the
host reference or the host path of the same call). A public name without a recipe FAILS the test,
so new API gets one.

Public: the names in the module's ``__all__`` (where it has one) plus the functions and classes
the module defines without a leading underscore (``fp4gemm.moe.clear_layer_cache`` is public but
not in ``moe.__all__``); in a module without ``__all__``, every non-underscore attribute that is
not a module and comes from fp4gemm (imports of typing / torch names are not API). The same set is
also read from the source (ast) -- the only way where a module cannot be imported (``fp4gemm.ops``
without torch) -- and where both work they must agree. A class's public members: the
non-underscore attributes its own classes define (not those of builtins), ``__call__``,
``__repr__`` and ``__len__`` where it defines them, dataclass fields, and the public attributes of
the instances the recipes made.

Two variants: HOST (no marker; NumPy arrays, the CPU reference; runs in CI without torch) runs
every recipe that can run on the host, and checks that every other public name has a recipe that
runs on the GPU, with the reason it cannot run here; GPU (``gpu`` marker) runs every recipe on
CUDA tensors. ``fp4gemm.ep`` runs on a world-size-1 torch.distributed group (gloo, CPU tensors, in
this process) in the GPU variant; ``test_gpu_expert_parallel_nccl_world_one`` also runs it on CUDA
tensors over NCCL."""

from __future__ import annotations

import ast
import collections
import dataclasses
import gc
import importlib
import inspect
import os
import socket

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

import fp4gemm  # noqa: E402

pytestmark = pytest.mark.usefixtures("release_pinned_plans")  # (conftest.py)
from fp4gemm import ep, moe  # noqa: E402
from fp4gemm.testing import random_groups  # noqa: E402

import _sequences as S  # noqa: E402
from _sequences import BF16  # noqa: E402

MODULES = ("fp4gemm", "fp4gemm.moe", "fp4gemm.ops", "fp4gemm.ep")
MEMBER_DUNDERS = ("__call__", "__repr__", "__len__")

# Public classes the host variant cannot construct, and why (the GPU variant constructs them).
HOST_UNCONSTRUCTED = {
    "fp4gemm.GroupedGemm": "GroupedGemm needs CUDA arrays (host arrays are refused, checked here)",
    "fp4gemm.ep.TorchComm": "TorchComm needs torch.distributed (the GPU variant runs it on a world-size-1 group)",
    "fp4gemm.ep.LocalGroup": "the device path needs CUDA tensors (the GPU variant runs two ranks on one GPU)",
    "fp4gemm.ep.SymmetricMemoryComm": "SymmetricMemory needs CUDA and torch.distributed (the GPU variant: world 1)",
}


# ---- enumeration -------------------------------------------------------------------------------------------


def _module_file(name):
    base = os.path.dirname(fp4gemm.__file__)
    return os.path.join(base, "__init__.py") if name == "fp4gemm" else os.path.join(base, name.split(".")[1] + ".py")


def names_from_source(name):
    """The public names of module `name` read from its source: __all__ (a literal list) plus the
    top-level functions and classes without a leading underscore; without __all__ also the names
    imported from fp4gemm's own submodules (``from .x import y``)."""
    tree = ast.parse(open(_module_file(name)).read())
    all_names, defs, reexports = None, set(), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            defs.add(node.name)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            all_names = set(ast.literal_eval(node.value))
        elif isinstance(node, ast.ImportFrom) and node.level >= 1 and node.module:
            reexports |= {a.asname or a.name for a in node.names if not (a.asname or a.name).startswith("_")}
    return (all_names | defs) if all_names is not None else (defs | reexports)


def names_from_module(mod):
    own = {n for n, v in vars(mod).items()
           if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v)) and v.__module__ == mod.__name__}
    if hasattr(mod, "__all__"):
        return set(mod.__all__) | own
    return {n for n, v in vars(mod).items()
            if not n.startswith("_") and not inspect.ismodule(v)
            and str(getattr(v, "__module__", "") or "").startswith("fp4gemm")}


def import_or_none(name):
    try:
        return importlib.import_module(name)
    except ImportError:  # fp4gemm.ops without torch
        return None


def public_names():
    """{module: (names, imported module or None)}; the two enumerations agree where both run."""
    out = {}
    for name in MODULES:
        src = names_from_source(name)
        mod = import_or_none(name)
        if mod is not None:
            got = names_from_module(mod)
            assert got == src, f"{name}: names by import {sorted(got ^ src)} differ from the source's"
        out[name] = (src, mod)
    return out


def class_members(cls):
    names = set()
    for klass in cls.__mro__:
        if klass.__module__ == "builtins":
            continue
        for n in vars(klass):
            if not n.startswith("_") or n in MEMBER_DUNDERS:
                names.add(n)
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    return names


# ---- the recipes' bookkeeping -------------------------------------------------------------------------


class Tracker:
    """Every public name a recipe touches goes through use(): what was used is what was covered."""

    def __init__(self):
        self.used = collections.defaultdict(set)
        self.instances = collections.defaultdict(list)

    def use(self, owner, obj, name):
        self.used[owner].add(name)
        return getattr(obj, name)

    def instance(self, key, obj):
        self.instances[key].append(obj)
        return obj


@dataclasses.dataclass
class Recipe:
    module: str
    names: tuple
    fn: object
    host: bool
    why_not_host: str


RECIPES = []


def recipe(module, *names, host=True, why_not_host=""):
    assert host or why_not_host, "a recipe that cannot run on the host says why"

    def wrap(fn):
        RECIPES.append(Recipe(module, names, fn, host, why_not_host))
        return fn

    return wrap


class Env:
    """Where a recipe's arrays live: NumPy (host) or torch CUDA tensors (gpu)."""

    def __init__(self, gpu, torch=None, dist=None):
        self.gpu, self.torch, self.dist = gpu, torch, dist

    def dev(self, a):
        if a is None or not self.gpu:
            return a
        torch = self.torch
        a = np.ascontiguousarray(a)
        if a.shape and a.shape[0] == 0:  # (NumPy 2: zero strides on empty arrays)
            return self.dev(np.zeros((1,) + a.shape[1:], a.dtype))[:0]
        if a.dtype == BF16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()
        return torch.from_numpy(a).cuda()

    def host(self, t):
        if isinstance(t, np.ndarray) or t is None:
            return t
        torch = self.torch
        self.sync()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).cpu().numpy().view(BF16)
        return t.cpu().numpy()

    def nan_out(self, shape, dtype):
        if not self.gpu:
            return np.full(shape, np.nan, BF16 if dtype == "bfloat16" else np.dtype(dtype))
        return self.torch.full(shape, float("nan"), dtype=getattr(self.torch, dtype), device="cuda")

    def sync(self):
        if self.gpu:
            self.torch.cuda.synchronize()

    def write(self, dst, new, alias=False):
        """dst[...] = new in place: NumPy assignment; torch copy_ (its version counter sees it) or,
        alias=True, through a DLPack alias of the same memory (a write torch does not count for dst)."""
        if not self.gpu:
            dst[...] = new
            return
        if alias:
            dst = self.torch.from_dlpack(dst)
        dst.copy_(self.dev(np.ascontiguousarray(new)))


def bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


# ---- fp4gemm: exceptions, devices, backends, caches ---------------------------------------------------------


@recipe("fp4gemm", "ArgumentError")
def r_argument_error(T, env):
    cls = T.use("fp4gemm", fp4gemm, "ArgumentError")
    assert issubclass(cls, ValueError)
    rng = np.random.default_rng(1)
    cfg = S.Config("nvfp4", "nvfp4", "silu", "stacked", "blocked", 2, 64, 64, "gpumode")
    t = S.random_truth(rng, cfg, "none", False)
    with pytest.raises(cls) as info:  # w2 of another inner size than w13's
        moe.MoeLayer(env.dev(t.w13), env.dev(S.blocked_experts(t.s13)), env.dev(t.w2[:, :, :16]),
                     env.dev(S.blocked_experts(t.s2)), max_tokens=2, topk=1)
    e = T.instance("fp4gemm.ArgumentError", info.value)
    assert T.use("fp4gemm.ArgumentError", e, "argument") == "w2" and T.use("fp4gemm.ArgumentError", e, "group") == -1
    assert str(e).startswith("fp4gemm: w2:"), str(e)


@recipe("fp4gemm", "DeviceError", "device_count", "device_info")
def r_devices(T, env):
    n = T.use("fp4gemm", fp4gemm, "device_count")()
    assert isinstance(n, int) and n >= 0
    device_error = T.use("fp4gemm", fp4gemm, "DeviceError")
    assert issubclass(device_error, RuntimeError)
    with pytest.raises(device_error) as info:  # a device that does not exist (or no device at all)
        fp4gemm.device_info(n + 1)
    e = T.instance("fp4gemm.DeviceError", info.value)
    assert T.use("fp4gemm.DeviceError", e, "argument") == "device" and T.use("fp4gemm.DeviceError", e, "group") == -1
    info_fn = T.use("fp4gemm", fp4gemm, "device_info")
    if n == 0:
        with pytest.raises(device_error, match="no CUDA device"):
            info_fn()
        assert not env.gpu
        return
    d = info_fn()
    assert set(d) >= {"index", "name", "sm", "multiprocessors", "l2_bytes", "smem_per_block_optin", "has_fast_kernel"}
    assert d["multiprocessors"] > 0 and d["l2_bytes"] > 0
    if env.gpu:
        torch = env.torch
        assert n == torch.cuda.device_count()
        assert d["index"] == torch.cuda.current_device() and d["name"] == torch.cuda.get_device_name(d["index"])
        assert tuple(d["sm"]) == torch.cuda.get_device_capability(d["index"])
        assert d["has_fast_kernel"] == (tuple(d["sm"]) == (9, 0))


@recipe("fp4gemm", "get_default_backend", "set_default_backend")
def r_backend(T, env):
    get = T.use("fp4gemm", fp4gemm, "get_default_backend")
    put = T.use("fp4gemm", fp4gemm, "set_default_backend")
    before = get()
    assert before in ("auto", "fast", "reference")
    try:
        for b in ("reference", "fast", "auto"):
            put(b)
            assert get() == b
        with pytest.raises(fp4gemm.ArgumentError) as info:
            put("bogus")
        assert info.value.argument == "backend"
    finally:
        put(before)
    assert get() == before


@recipe("fp4gemm", "plan_cache_info", "clear_plan_cache", "set_plan_cache_capacity", "set_plan_cache_max_bytes")
def r_plan_cache(T, env):
    info = T.use("fp4gemm", fp4gemm, "plan_cache_info")
    clear = T.use("fp4gemm", fp4gemm, "clear_plan_cache")
    keys = {"plans", "memo", "pinned", "capacity", "bytes", "max_bytes", "hits", "misses", "memo_hits", "moe_plans",
            "moe_pinned", "moe_bytes", "moe_hits", "moe_misses", "moe_memo_hits"}
    i0 = info()
    assert set(i0) == keys, sorted(set(i0) ^ keys)
    try:
        T.use("fp4gemm", fp4gemm, "set_plan_cache_capacity")(7)
        assert info()["capacity"] == 7
        T.use("fp4gemm", fp4gemm, "set_plan_cache_max_bytes")(12345678)
        assert info()["max_bytes"] == 12345678
    finally:
        fp4gemm.set_plan_cache_capacity(i0["capacity"])
        fp4gemm.set_plan_cache_max_bytes(i0["max_bytes"])
    assert (info()["capacity"], info()["max_bytes"]) == (i0["capacity"], i0["max_bytes"])
    if env.gpu:  # a call caches a plan; the second is a hit; clear drops it
        clear()
        i0 = info()
        d = random_groups([32, 16], 64, 128, "nvfp4", "linear", seed=3)
        args = [[env.dev(x) for x in lst] for lst in (d.a, d.b, d.sfa, d.sfb)]
        fp4gemm.grouped_gemm(*args)
        fp4gemm.grouped_gemm(*args)
        env.sync()
        i1 = info()
        assert i1["plans"] >= 1 and i1["hits"] + i1["memo_hits"] >= i0["hits"] + i0["memo_hits"] + 1, i1
    clear()
    i2 = info()
    assert i2["plans"] == 0 and i2["moe_plans"] == i2["moe_pinned"], i2


# ---- fp4gemm: format helpers -----------------------------------------------------------------------------------


@recipe("fp4gemm", "decode_e2m1", "encode_e2m1", "pack_fp4", "unpack_fp4")
def r_e2m1(T, env):
    codes = np.arange(16, dtype=np.uint8)
    v = T.use("fp4gemm", fp4gemm, "decode_e2m1")(codes)
    assert v.dtype == np.float32 and np.array_equal(v, S.E2M1) and np.array_equal(np.signbit(v), np.signbit(S.E2M1))
    enc = T.use("fp4gemm", fp4gemm, "encode_e2m1")
    back = enc(S.E2M1.astype(np.float32))
    assert np.array_equal(fp4gemm.decode_e2m1(back), S.E2M1)
    x = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 7, 100, -0.75, -5], np.float32)  # ties to even, saturation
    assert np.array_equal(fp4gemm.decode_e2m1(enc(x)), [0, 1, 1, 2, 2, 4, 4, 6, 6, -1, -4])
    rng = np.random.default_rng(2)
    nib = rng.integers(0, 16, (5, 64), dtype=np.uint8)
    packed = T.use("fp4gemm", fp4gemm, "pack_fp4")(nib)
    assert packed.shape == (5, 32) and np.array_equal(packed, nib[:, 0::2] | (nib[:, 1::2] << 4))
    assert np.array_equal(T.use("fp4gemm", fp4gemm, "unpack_fp4")(packed), nib)
    assert np.array_equal(S.unpack(packed), nib)


@recipe("fp4gemm", "decode_scales", "encode_scales", "scale_block_size", "scale_bytes")
def r_scales(T, env):
    codes = np.arange(256, dtype=np.uint8)
    dec = T.use("fp4gemm", fp4gemm, "decode_scales")
    enc = T.use("fp4gemm", fp4gemm, "encode_scales")
    for fmt in ("nvfp4", "mxfp4"):
        assert np.array_equal(dec(codes, fmt), S.decode_scale_codes(codes, fmt).astype(np.float32), equal_nan=True)
    pos = np.arange(0x7F, dtype=np.uint8)  # every non-negative finite E4M3 code
    assert np.array_equal(enc(S.decode_scale_codes(pos, "nvfp4").astype(np.float32), "nvfp4"), pos)
    assert list(enc(np.array([1.0, 3.0, 0.3], np.float32), "mxfp4")) == [127, 129, 126]  # UE8M0: next power of 2
    bs = T.use("fp4gemm", fp4gemm, "scale_block_size")
    assert (bs("nvfp4"), bs("mxfp4")) == (16, 32)
    sb = T.use("fp4gemm", fp4gemm, "scale_bytes")
    assert sb("linear", 200, 7) == 1400 and sb("blocked", 200, 7) == 256 * 8 and sb("blocked", 128, 4) == 512


@recipe("fp4gemm", "linear_to_blocked", "blocked_to_linear")
def r_layouts(T, env):
    rng = np.random.default_rng(3)
    for rows, cols in ((200, 7), (128, 4), (1, 1), (300, 9)):
        lin = rng.integers(0, 256, (rows, cols), dtype=np.uint8)
        blocked = T.use("fp4gemm", fp4gemm, "linear_to_blocked")(lin)
        assert np.array_equal(blocked, S.to_blocked(lin)), (rows, cols)  # SPEC §2's offsets, written out here
        assert np.array_equal(T.use("fp4gemm", fp4gemm, "blocked_to_linear")(blocked, rows, cols), lin)


@recipe("fp4gemm", "quantize", "dequantize")
def r_quantize(T, env):
    rng = np.random.default_rng(4)
    q = T.use("fp4gemm", fp4gemm, "quantize")
    deq = T.use("fp4gemm", fp4gemm, "dequantize")
    # (block scales in E4M3's normal range: a subnormal scale rounds coarsely and then saturates more)
    x = (rng.standard_normal((130, 256)) * np.exp2(rng.integers(-2, 6, (130, 1)))).astype(np.float32)
    x[3, :32] = 0
    for fmt, gs in (("nvfp4", 1.0), ("nvfp4", 0.37), ("mxfp4", 1.0)):
        p, s = q(x, fmt, "linear", gs)
        vec = S.vec_of(fmt)
        assert p.shape == (130, 128) and s.shape == (130, 256 // vec)
        d = deq(p, s, fmt, "linear")
        assert d.dtype == np.float32 and np.array_equal(d, S.dq(p, s, fmt).astype(np.float32))
        scale = np.repeat(S.decode_scale_codes(s, fmt), vec, axis=1) * gs
        # RNE to the nearest e2m1 step of the block scale (the largest half-gap, between 4 and 6, is 1);
        # MXFP4's OCP scale 2^(floor(log2 amax) - 2) leaves |x| / S up to 8, saturated to 6: up to 2
        step = 1.0 if fmt == "nvfp4" else 2.0
        assert np.all(np.abs(d.astype(np.float64) * gs - x) <= step * scale * (1 + 1e-6) + 1e-30), fmt
        pb, sb = q(x, fmt, "blocked", gs)
        assert np.array_equal(pb, p) and np.array_equal(np.asarray(sb).reshape(-1), S.to_blocked(s))
        assert np.array_equal(deq(pb, sb, fmt, "blocked", 256), d)
        if env.gpu:  # the GPU quantiser: the host rule bit for bit
            torch = env.torch
            for dtype in (torch.float32, torch.bfloat16):
                tx = torch.from_numpy(x).to(dtype).cuda()
                xr = tx.float().cpu().numpy()
                gp, gsc = q(tx, fmt, "blocked", gs)
                hp, hs = q(xr, fmt, "blocked", gs)
                env.sync()
                assert gp.is_cuda and np.array_equal(env.host(gp), hp)
                assert np.array_equal(env.host(gsc).reshape(-1), np.asarray(hs).reshape(-1))


# ---- fp4gemm: the pointer-array GEMMs -------------------------------------------------------------------------


def _groups_reference(d, alpha=None):
    out = []
    for g, (a, b, sa, sb) in enumerate(zip(d.a, d.b, d.sfa_linear, d.sfb_linear)):
        r = S.dq(a, sa, d.format) @ S.dq(b, sb, d.format).T
        out.append(r * (1.0 if alpha is None else float(np.float32(alpha[g]))))
    return out


@recipe("fp4gemm", "grouped_gemm", "reference_grouped_gemm")
def r_grouped(T, env):
    for fmt, layout in (("nvfp4", "linear"), ("mxfp4", "blocked")):
        d = random_groups([48, 0, 17], 64, 256, fmt, layout, values="gpumode", seed=5)
        alpha = [1.0, 2.0, 0.5]
        want = _groups_reference(d, alpha)
        args = [[env.dev(x) for x in lst] for lst in (d.a, d.b, d.sfa, d.sfb)]
        for fn in ("grouped_gemm", "reference_grouped_gemm"):
            c = [env.nan_out((a.shape[0], 64), "float32") for a in d.a]
            got = T.use("fp4gemm", fp4gemm, fn)(*args, c=c, alpha=alpha, format=fmt, scale_layout=layout,
                                                out_dtype="float32")
            assert got is c
            for g, (o, w) in enumerate(zip(got, want)):
                assert np.array_equal(env.host(o).astype(np.float64), w.astype(np.float32).astype(np.float64)), (fn, g)
        got = fp4gemm.grouped_gemm(*args, format=fmt, scale_layout=layout)  # allocates float16 outputs, alpha 1
        assert [tuple(o.shape) for o in got] == [(48, 64), (0, 64), (17, 64)]
        for o, w in zip(got, _groups_reference(d)):
            assert np.array_equal(env.host(o).astype(np.float64), w.astype(np.float16))


@recipe("fp4gemm", "GroupedGemm")
def r_grouped_object(T, env):
    cls = T.use("fp4gemm", fp4gemm, "GroupedGemm")
    d = random_groups([80, 33], 128, 256, "nvfp4", "blocked", values="gpumode", seed=6)
    want = _groups_reference(d)
    if not env.gpu:
        with pytest.raises(fp4gemm.ArgumentError, match="needs CUDA arrays"):
            cls(d.a, d.b, d.sfa, d.sfb, d.outputs("float16"), scale_layout="blocked")
        return
    torch = env.torch
    a, b, sfa, sfb = ([env.dev(x) for x in lst] for lst in (d.a, d.b, d.sfa, d.sfb))
    c = [env.nan_out((x.shape[0], 128), "float16") for x in d.a]
    g = T.instance("fp4gemm.GroupedGemm", cls(a, b, sfa, sfb, c, scale_layout="blocked"))
    K = "fp4gemm.GroupedGemm"
    assert T.use(K, g, "num_groups") == 2 and T.use(K, g, "flops") == 2 * (80 + 33) * 128 * 256
    assert T.use(K, g, "min_bytes") > 0
    outs = T.use(K, g, "outputs")
    assert len(outs) == 2 and all(o.data_ptr() == x.data_ptr() for o, x in zip(outs, c))
    name = T.use(K, g, "kernel_name")
    desc = T.use(K, g, "describe")()
    assert isinstance(name, str) and name and isinstance(desc, str) and desc
    T.use(K, g, "run")()
    for o, w in zip(c, want):
        assert np.array_equal(env.host(o).astype(np.float64), w.astype(np.float16))
    for o in c:
        o.fill_(float("nan"))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        T.use(K, g, "__call__")()
    torch.cuda.current_stream().wait_stream(s)
    for o, w in zip(c, want):
        assert np.array_equal(env.host(o).astype(np.float64), w.astype(np.float16))


@recipe("fp4gemm", "dual_gemm")
def r_dual_gemm(T, env):
    """The one-call dual GEMM: the bytes of a bound DualGemm on the same arrays (outputs allocated when
    c is None); a repeated call runs from the call memo; scales and activations refilled in place are
    read again (every run reads them); a tensor moved to new memory (set_) is planned again; bad
    arguments are named."""
    fn = T.use("fp4gemm", fp4gemm, "dual_gemm")
    rng = np.random.default_rng(11)
    m, n, k = 48, 64, 256
    a, b1, b2 = (S.rand_fp4(rng, (r, k // 2), "gpumode") for r in (m, n, n))
    sa, s1, s2 = (S.rand_scales(rng, (r, k // 16), "nvfp4", "gpumode") for r in (m, n, n))

    def bound(a_, s1_, act="silu"):
        hc = np.full((m, n), np.nan, np.float16)
        fp4gemm.DualGemm([a_], [b1], [b2], [sa], [s1_], [s2], [hc], activation=act).run()
        return hc

    for act in ("silu", "swigluoai"):
        args = [[env.dev(x)] for x in (a, b1, b2, sa, s1, s2)]
        c = env.nan_out((m, n), "float16")
        assert fn(*args, [c], activation=act)[0] is c
        assert np.array_equal(env.host(c).view(np.uint16), bound(a, s1, act).view(np.uint16)), act
        got = fn(*args, activation=act)  # outputs allocated
        assert np.array_equal(env.host(got[0]).view(np.uint16), bound(a, s1, act).view(np.uint16)), act
    args = [[env.dev(x)] for x in (a, b1, b2, sa, s1, s2)]
    c = env.nan_out((m, n), "float16")
    fn(*args, [c])
    before = fp4gemm.plan_cache_info()["memo_hits"]
    if env.gpu:
        c.fill_(float("nan"))
    else:
        c[...] = np.nan
    fn(*args, [c])
    if env.gpu:  # (host arrays take the CPU reference, which memoises nothing)
        assert fp4gemm.plan_cache_info()["memo_hits"] == before + 1, "the second call did not run from the memo"
    assert np.array_equal(env.host(c).view(np.uint16), bound(a, s1).view(np.uint16))
    # new values in the same arrays (GPU MODE's harness): read again
    a_new, s1_new = S.rand_fp4(rng, a.shape, "gpumode"), S.rand_scales(rng, s1.shape, "nvfp4", "gpumode")
    if env.gpu:
        args[0][0].copy_(env.dev(a_new))
        args[4][0].copy_(env.dev(s1_new))
    else:
        args[0][0][...] = a_new
        args[4][0][...] = s1_new
    fn(*args, [c])
    assert np.array_equal(env.host(c).view(np.uint16), bound(a_new, s1_new).view(np.uint16)), "refilled arrays"
    if env.gpu:  # a tensor moved to new memory: the memo must not reuse the old plan
        torch = env.torch
        old = args[0][0]
        old.set_(torch.from_numpy(a).cuda())
        fn(*args, [c])
        assert np.array_equal(env.host(c).view(np.uint16), bound(a, s1_new).view(np.uint16)), "after set_()"
    with pytest.raises(fp4gemm.ArgumentError) as e:
        fn(*args, [c], activation="gelu")
    assert e.value.argument == "activation"
    with pytest.raises(fp4gemm.ArgumentError) as e:
        fn(args[0], args[1], [env.dev(b2[:32])], args[3], args[4], [env.dev(s2[:32])], [c])
    assert e.value.argument in ("b2[0]", "sfb2[0]"), e.value.argument


@recipe("fp4gemm", "DualGemm")
def r_dual(T, env):
    cls = T.use("fp4gemm", fp4gemm, "DualGemm")
    rng = np.random.default_rng(7)
    m, n, k = 64, 128, 256
    a, b1, b2 = (S.rand_fp4(rng, (r, k // 2), "gpumode") for r in (m, n, n))
    sa, s1, s2 = (S.rand_scales(rng, (r, k // 16), "nvfp4", "gpumode") for r in (m, n, n))
    x = S.dq(a, sa, "nvfp4")
    g, u = x @ S.dq(b1, s1, "nvfp4").T, x @ S.dq(b2, s2, "nvfp4").T
    want = g / (1 + np.exp(-g)) * u
    c = env.nan_out((m, n), "float16")
    dual = T.instance("fp4gemm.DualGemm", cls([env.dev(a)], [env.dev(b1)], [env.dev(b2)], [env.dev(sa)], [env.dev(s1)],
                                              [env.dev(s2)], [c]))
    K = "fp4gemm.DualGemm"
    assert T.use(K, dual, "num_groups") == 1 and T.use(K, dual, "flops") == 4 * m * n * k
    assert len(T.use(K, dual, "outputs")) == 1
    desc = T.use(K, dual, "describe")()
    assert isinstance(desc, str) and desc
    T.use(K, dual, "run")()
    got = env.host(c).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # (beyond float16's range: inf in both)
        ok = (got == want.astype(np.float16)) | (np.abs(got - want) <= 1e-3 + 1e-3 * np.abs(want))
    assert ok.all(), f"{int((~ok).sum())} elements outside GPU MODE's rule of the float64 dual GEMM"
    first = got.copy()
    if env.gpu:
        c.fill_(float("nan"))
    else:
        c[...] = np.nan
    T.use(K, dual, "__call__")()
    assert np.array_equal(env.host(c).astype(np.float64), first)
    if env.gpu:  # bit for bit the host DualGemm (the FP32 epilogue on GPU MODE values)
        hc = np.full((m, n), np.nan, np.float16)
        fp4gemm.DualGemm([a], [b1], [b2], [sa], [s1], [s2], [hc]).run()
        assert np.array_equal(first, hc.astype(np.float64))
    # Scales changed in place: the host reads them at every run; a device plan pairs them into its own
    # copy, so it refuses them (ArgumentError naming sfb1) unless rescale_each_run=True.
    s1_new = S.rand_scales(rng, s1.shape, "nvfp4", "gpumode")
    g2 = x @ S.dq(b1, s1_new, "nvfp4").T
    want2 = g2 / (1 + np.exp(-g2)) * u
    if not env.gpu:
        sfb1 = s1.copy()
        c2 = env.nan_out((m, n), "float16")
        d2 = cls([a], [b1], [b2], [sa], [sfb1], [s2], [c2])
        d2.run()
        sfb1[...] = s1_new
        d2.run()
        got2 = c2.astype(np.float64)
    else:
        sfb1 = env.dev(s1)
        dual_live = cls([env.dev(a)], [env.dev(b1)], [env.dev(b2)], [env.dev(sa)], [sfb1], [env.dev(s2)], [c])
        dual_live.run()
        sfb1.copy_(env.dev(s1_new))
        with pytest.raises(fp4gemm.ArgumentError) as info:
            dual_live.run()
        assert info.value.argument.startswith("sfb1"), str(info.value)
        sfb1 = env.dev(s1)
        c2 = env.nan_out((m, n), "float16")
        d2 = cls([env.dev(a)], [env.dev(b1)], [env.dev(b2)], [env.dev(sa)], [sfb1], [env.dev(s2)], [c2],
                 rescale_each_run=True)
        d2.run()
        sfb1.copy_(env.dev(s1_new))
        d2.run()
        got2 = env.host(c2).astype(np.float64)
        hc = np.full((m, n), np.nan, np.float16)
        fp4gemm.DualGemm([a], [b1], [b2], [sa], [s1_new], [s2], [hc]).run()
        assert np.array_equal(got2, hc.astype(np.float64)), "rescale_each_run: not the host DualGemm on the new scales"
    with np.errstate(over="ignore", invalid="ignore"):
        ok = (got2 == want2.astype(np.float16)) | (np.abs(got2 - want2) <= 1e-3 + 1e-3 * np.abs(want2))
    assert ok.all(), "after scales changed in place: not the dual GEMM of the new scales"


# ---- fp4gemm.moe ------------------------------------------------------------------------------------------------


def _cfg(act="nvfp4", activation="silu", gate_up="stacked", e=4, h=128, i=64):
    fmt = "nvfp4" if act == "nvfp4" else "mxfp4"
    return S.Config(fmt, act, activation, gate_up, "blocked", e, h, i, "gpumode",
                    0.5 if act == "nvfp4" else 1.0, 0.25 if act == "nvfp4" else 1.0)


def _live(env, t):
    return (env.dev(t.w13), env.dev(S.blocked_experts(t.s13)), env.dev(t.w2), env.dev(S.blocked_experts(t.s2)))


def _check_layer_out(env, c, t, x, ids, wts, got, what):
    """host: bit for bit the composition of host MoeGemm runs + ep.combine; GPU: the host layer
    within 2^-7 (norm-wise), more than half the elements equal, no NaN."""
    g = env.host(got)
    assert g.shape == (ids.shape[0], c.h) and g.dtype == BF16
    assert not np.isnan(g.astype(np.float32)).any(), what
    if not env.gpu:
        want = S.compose_layer(c, t, x, ids, wts)
        assert bits_equal(g, want), what
        return
    want = S.host_layer(c, t, ids.shape[0], ids.shape[1]).run(x, ids, wts).astype(np.float32)
    gf = g.astype(np.float32)
    assert S.rel_error(gf, want) < 2.0**-7 and np.mean(gf == want) > 0.5, what


@recipe("fp4gemm.moe", "MoeLayer")
def r_moe_layer(T, env):
    K = "fp4gemm.moe.MoeLayer"
    cls = T.use("fp4gemm.moe", moe, "MoeLayer")
    rng = np.random.default_rng(8)
    for c, alphas in ((_cfg("nvfp4"), "all"), (_cfg("mxfp4", "swigluoai", "interleaved"), "gate"),
                      (_cfg("bf16"), "none")):
        t = S.random_truth(rng, c, alphas, env.gpu)
        al = [env.dev(None if getattr(t, k) is None else getattr(t, k).copy()) for k in ("w13_alpha", "w13_alpha_up",
                                                                                          "w2_alpha")]
        live = _live(env, t)
        layer = T.instance(K, cls(*live, max_tokens=12, topk=2, w13_alpha=al[0], w13_alpha_up=al[1],
                                  w2_alpha=al[2], **c.layer_kwargs()))
        assert (T.use(K, layer, "experts"), T.use(K, layer, "hidden"), T.use(K, layer, "inter")) == (c.e, c.h, c.i)
        assert (T.use(K, layer, "topk"), T.use(K, layer, "max_tokens")) == (2, 12)
        assert T.use(K, layer, "on_host") is (not env.gpu)
        nbytes = T.use(K, layer, "device_bytes")
        assert (nbytes > 0) if env.gpu else nbytes == 0
        desc = T.use(K, layer, "describe")()
        assert T.use(K, layer, "__repr__")() == f"fp4gemm.moe.MoeLayer({desc})" and f"{c.e} experts" in desc, desc
        x = S.random_tokens(rng, 12, c.h, "gpumode")
        ids, wts = S.random_routing(rng, 12, c.e, 2, "dropped", np.int32, False)
        got = T.use(K, layer, "run")(env.dev(x), env.dev(ids), env.dev(wts))
        _check_layer_out(env, c, t, x, ids, wts, got, f"MoeLayer.run {c.text()}")
        out = env.nan_out((7, c.h), "bfloat16")
        ids2, wts2 = S.random_routing(rng, 7, c.e, 2, "hot", np.int64, True)
        got = T.use(K, layer, "__call__")(env.dev(x[:7]), env.dev(ids2), env.dev(wts2), out=out)
        assert got is out
        _check_layer_out(env, c, t, x[:7], ids2, wts2, got, f"MoeLayer.__call__ {c.text()}")
        if c.act != "bf16":  # pre-quantised tokens: the same bits as the layer's own quantisation
            xq = env.dev(x) if env.gpu else x.astype(np.float32)
            packed, scales = fp4gemm.quantize(xq, c.fmt, global_scale=c.a1)
            pre = layer.run(None, env.dev(ids), env.dev(wts), hidden_fp4=(packed, scales))
            again = layer.run(env.dev(x), env.dev(ids), env.dev(wts))
            assert bits_equal(env.host(pre), env.host(again))
        env.sync()
        T.use(K, layer, "check")()
        # In-place updates: a torch / NumPy write is seen by the next run as it is; a write torch does
        # not count (a DLPack alias) after reload_weights() (a no-op on the host, which reads the
        # arrays at every run).
        for alias in (False, True):
            t.s13[:] = S.rand_scales(rng, t.s13.shape, c.fmt, "gpumode")
            t.w2[:] = S.rand_fp4(rng, t.w2.shape, "gpumode")
            env.write(live[1], S.blocked_experts(t.s13), alias)
            env.write(live[2], t.w2, alias)
            if t.w13_alpha is not None:
                t.w13_alpha[:] = (S.ALPHAS_GPU if env.gpu else S.ALPHAS_HOST)[rng.integers(0, 4, c.e)]
                env.write(al[0], t.w13_alpha, alias)
            if alias or not env.gpu:
                T.use(K, layer, "reload_weights")()
            got = layer.run(env.dev(x), env.dev(ids), env.dev(wts))
            _check_layer_out(env, c, t, x, ids, wts, got, f"MoeLayer after in-place updates (alias {alias}) {c.text()}")


@recipe("fp4gemm.moe", "pack_pieces", host=False, why_not_host="pack_pieces repacks CUDA tensors on their device")
def r_pack_pieces(T, env):
    """The weights packed into pieces: the layer on them gives the rows layer's bytes, before and after the rows are
    rewritten in place and packed again into the same arrays; bad arguments are named."""
    torch = env.torch
    pack_fn = T.use("fp4gemm.moe", moe, "pack_pieces")

    def pack(*args, **kwargs):  # these weights are MXFP4 (W4A16)
        return pack_fn(*args, format="mxfp4", **kwargs)
    rng = np.random.default_rng(12)
    c = _cfg("bf16", "swigluoai", "interleaved", e=4, h=160, i=96)
    t = S.random_truth(rng, c, "none", env.gpu)
    live = _live(env, t)
    p13 = pack(live[0], c.gate_up)
    assert tuple(p13.shape) == (c.e, 2 * c.i // 16, (c.h + 127) // 128, 1024) and p13.dtype == torch.uint8
    p2 = torch.full((c.e, c.h // 16, (c.i + 127) // 128, 1024), 0xA5, dtype=torch.uint8, device=live[2].device)
    assert pack(live[2], out=p2) is p2
    kw = dict(max_tokens=12, topk=2, **c.layer_kwargs())
    rows = moe.MoeLayer(*live, **kw)
    pieces = moe.MoeLayer(p13, live[1], p2, live[3], weight_layout="pieces", **kw)
    assert "weights in pieces" in pieces.describe() and (pieces.hidden, pieces.inter) == (c.h, c.i)

    def same_as_rows(layer, n, what):  # one run of `layer` against the rows layer on fresh tokens and routing
        x = S.random_tokens(rng, n, c.h, "gpumode")
        ids, wts = S.random_routing(rng, n, c.e, 2, "uniform", np.int32, False)
        want = rows.run(env.dev(x), env.dev(ids), env.dev(wts))
        got = layer.run(env.dev(x), env.dev(ids), env.dev(wts))
        env.sync()
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), f"{what}, T {n}"

    for update in (False, True):
        if update:  # new rows in place, packed again into the same arrays
            live[0].copy_(env.dev(S.rand_fp4(rng, t.w13.shape, "gpumode")))
            live[2].copy_(env.dev(S.rand_fp4(rng, t.w2.shape, "gpumode")))
            pack(live[0], c.gate_up, out=p13), pack(live[2], out=p2)
        for n in (1, 3, 12):  # the decode path and the general path
            same_as_rows(pieces, n, f"pieces != rows (update {update})")
    # fused_experts (vLLM's one call) on the same pieces: the rows layer's bytes, on both paths
    fkw = c.layer_kwargs()

    def fused(n, call=moe.fused_experts, **kw2):
        x = S.random_tokens(rng, n, c.h, "gpumode")
        ids, wts = S.random_routing(rng, n, c.e, 2, "uniform", np.int32, False)
        want = rows.run(env.dev(x), env.dev(ids), env.dev(wts))
        got = call(env.dev(x), p13, live[1], p2, live[3], env.dev(wts), env.dev(ids), **fkw, **kw2)
        env.sync()
        return got, want

    from fp4gemm import ops

    def torch_op(x, w13, s13, w2, s2, wts, ids, **kw3):  # the op itself, every argument spelled
        return torch.ops.fp4gemm.fused_experts(x, w13, s13, w2, s2, wts, ids, None, None, None, kw3["activation"],
                                               kw3["act_format"], kw3["gate_up"] or "", kw3["scale_layout"],
                                               float(kw3["a1_scale"]), float(kw3["a2_scale"]), None, None,
                                               kw3["weight_layout"])

    # the function, the torch op's wrapper and the op (its C++ kernel once the plan exists: the second call)
    for call, name in ((moe.fused_experts, "moe.fused_experts"), (ops.fused_experts, "ops.fused_experts"),
                       (torch_op, "torch.ops.fp4gemm.fused_experts"), (torch_op, "the op again")):
        for n in (2, 9):
            hot0 = ops._C._torch_native_counts()[0]
            got, want = fused(n, call, weight_layout="pieces")
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), f"{name} on pieces, T {n}"
            if name == "the op again" and ops.native_status()["fused_experts"] == "":  # the plan exists: C++ path
                assert ops._C._torch_native_counts()[0] == hot0 + 1, "the op on pieces did not take its C++ kernel"
    for bad in ("columns", 3):  # a layout it does not know, or not a string: named
        with pytest.raises(fp4gemm.ArgumentError) as e:
            fused(2, weight_layout=bad)
        assert e.value.argument == "weight_layout", str(e.value)
    with pytest.raises(fp4gemm.ArgumentError) as e:  # pieces read as rows: their shape is refused by name
        fused(2)
    assert e.value.argument in ("w13", "w2"), str(e.value)
    # the layer holds its arrays: the caller's pieces dropped and their memory churned, its runs stay right
    q13, q2 = pack(live[0], c.gate_up), pack(live[2])
    kept = moe.MoeLayer(q13, live[1], q2, live[3], weight_layout="pieces", **kw)
    del q13, q2
    gc.collect()
    torch.cuda.empty_cache()
    churn = [torch.full_like(p13, 0x5A), torch.full_like(p2, 0x5A)]  # (likely the freed blocks, were they freed)
    for n in (1, 12):
        same_as_rows(kept, n, "pieces layer after its arrays were dropped")
    del churn, kept
    with pytest.raises(TypeError, match="format"):  # the format is required: pieces differ per format
        pack_fn(live[2])
    nv13, nv2 = pack_fn(live[0], c.gate_up, format="nvfp4"), pack_fn(live[2], format="nvfp4")  # wrong for this layer
    with pytest.raises(fp4gemm.ArgumentError) as e:
        moe.MoeLayer(nv13, live[1], p2, live[3], weight_layout="pieces", **kw)
    assert e.value.argument == "w13" and "nvfp4" in str(e.value)
    with pytest.raises(fp4gemm.ArgumentError) as e:
        moe.MoeLayer(p13, live[1], nv2, live[3], weight_layout="pieces", **kw)
    assert e.value.argument == "w2"
    del nv13, nv2
    for call, arg in ((lambda: pack(live[0], "separate"), "gate_up"), (lambda: pack(live[0][:, :72].contiguous()), "w"),
                      (lambda: pack_fn(live[2], format="fp8"), "format"),
                      (lambda: pack(live[0], out=p2), "out"), (lambda: pack(t.w13), "w"),
                      (lambda: moe.MoeLayer(p13, live[1], live[2], live[3], weight_layout="pieces", **kw), "w2"),
                      (lambda: moe.MoeLayer(*live, weight_layout="columns", **kw), "weight_layout")):
        with pytest.raises(fp4gemm.ArgumentError) as e:
            call()
        assert e.value.argument == arg, (arg, str(e.value))


@recipe("fp4gemm.moe", "fused_experts", "clear_layer_cache")
def r_fused(T, env):
    rng = np.random.default_rng(9)
    c = _cfg("nvfp4", e=6)
    t = S.random_truth(rng, c, "gate", env.gpu)
    w = _live(env, t)
    al = dict(w13_alpha=env.dev(t.w13_alpha), w2_alpha=env.dev(t.w2_alpha))
    fn = T.use("fp4gemm.moe", moe, "fused_experts")
    for n in (5, 9, 3):
        x = S.random_tokens(rng, n, c.h, "gpumode")
        ids, wts = S.random_routing(rng, n, c.e, 3, "uniform", np.int64, False)
        got = fn(env.dev(x), *w, env.dev(wts), env.dev(ids), activation=c.activation, act_format=c.act,
                 gate_up=c.gate_up, scale_layout="blocked", a1_scale=c.a1, a2_scale=c.a2, **al)
        _check_layer_out(env, c, t, x, ids, wts, got, f"fused_experts T={n}")
    assert moe._cache.plans()  # a plan was cached
    T.use("fp4gemm.moe", moe, "clear_layer_cache")()
    assert not moe._cache.plans() and moe._cache.retired() == 0 and len(moe._cache) == 0


@recipe("fp4gemm.moe", "MoeGemm")
def r_moe_gemm(T, env):
    K = "fp4gemm.moe.MoeGemm"
    cls = T.use("fp4gemm.moe", moe, "MoeGemm")
    rng = np.random.default_rng(10)
    for fmt, act, layout, epilogue, alpha in (("nvfp4", "fp4", "contiguous", "none", "array"),
                                              ("mxfp4", "bf16", "masked", "none", 2.0),
                                              ("mxfp4", "fp4", "contiguous", "silu", None)):
        e, n, k, cap = 4, 64, 128, 16
        rows = 2 * n if epilogue != "none" else n
        w, lin = S.rand_fp4(rng, (e, rows, k // 2), "gpumode"), S.rand_scales(rng, (e, rows, k // S.vec_of(fmt)), fmt,
                                                                               "gpumode")
        alpha_host = np.array([1.0, -2.0, 0.5, 4.0], np.float32) if alpha == "array" else alpha
        w_live, s_live = env.dev(w.copy()), env.dev(S.blocked_experts(lin))
        g = T.instance(K, cls(w_live, s_live, format=fmt, scale_layout="blocked",
                              out_dtype="float32", activation=act, layout=layout, capacity=cap,
                              alpha=env.dev(alpha_host) if alpha == "array" else alpha, epilogue=epilogue))
        shape = (e, cap, n) if layout == "masked" else (cap, n)
        assert (T.use(K, g, "experts"), T.use(K, g, "n"), T.use(K, g, "k"), T.use(K, g, "capacity")) == (e, n, k, cap)
        assert T.use(K, g, "rows") == (e * cap if layout == "masked" else cap)
        assert (T.use(K, g, "format"), T.use(K, g, "scale_layout"), T.use(K, g, "out_dtype"), T.use(K, g, "activation"),
                T.use(K, g, "layout")) == (fmt, "blocked", "float32", act, layout)
        assert T.use(K, g, "on_host") is (not env.gpu)
        nbytes, name = T.use(K, g, "device_bytes"), T.use(K, g, "kernel_name")
        assert (nbytes > 0 and name != "cpu_reference") if env.gpu else (nbytes == 0 and name == "cpu_reference")
        desc = T.use(K, g, "describe")()
        assert T.use(K, g, "__repr__")() == f"fp4gemm.moe.MoeGemm({desc})" and desc.startswith(
            name + " on " if env.gpu else "CPU reference"), desc
        assert T.use(K, g, "output_shape")() == shape
        empty = T.use(K, g, "empty_output")()
        assert tuple(empty.shape) == shape
        for call in ("run", "__call__"):
            if call == "__call__":
                # new scales and weights in place (on the GPU through an alias torch does not count),
                # then reload_weights(): the next run computes with them (GLU plans copy the scales)
                lin = S.rand_scales(rng, lin.shape, fmt, "gpumode")
                w = S.rand_fp4(rng, w.shape, "gpumode")
                env.write(s_live, S.blocked_experts(lin), alias=True)
                env.write(w_live, w, alias=True)
                T.use(K, g, "reload_weights")()
            run = S.random_gemm_run(rng, e, n, k, fmt, act, layout, cap, "gpumode", "spread", call == "run")
            out = env.nan_out(shape, "float32")
            got = T.use(K, g, call)(env.dev(run.a), env.dev(run.a_scales), env.dev(run.offsets), env.dev(run.counts),
                                    env.dev(run.gather), out=out)
            assert got is out
            T.use(K, g, "check")()
            res = env.host(got).reshape(-1, n)
            if epilogue == "none":
                S.assert_gemm_exact(res, S.gemm_reference(w, lin, fmt, run, alpha_host), "float32", f"MoeGemm {fmt}")
            else:
                S.glu_bound(w, lin, fmt, run, alpha_host, None, epilogue, "stacked", res, "float32", "MoeGemm GLU")


@recipe("fp4gemm.moe", "grouped_gemm", "check", "align_routing")
def r_moe_grouped(T, env):
    rng = np.random.default_rng(11)
    e, n, k, tokens, topk = 8, 64, 128, 10, 2
    w, lin = S.rand_fp4(rng, (e, n, k // 2), "gpumode"), S.rand_scales(rng, (e, n, k // 16), "nvfp4", "gpumode")
    a, sa = S.rand_fp4(rng, (tokens, k // 2), "gpumode"), S.rand_scales(rng, (tokens, k // 16), "nvfp4", "gpumode")
    ids = np.stack([rng.permutation(e)[:topk] for _ in range(tokens)]).astype(np.int32)
    align = T.use("fp4gemm.moe", moe, "align_routing")
    offsets, gather, order = align(ids, e)
    flat = ids.reshape(-1)
    want_order = np.argsort(flat, kind="stable")
    assert np.array_equal(order, want_order) and np.array_equal(gather, want_order // topk)
    assert np.array_equal(offsets, np.searchsorted(flat[want_order], np.arange(e + 1)))
    assert offsets.dtype == np.int32 and gather.dtype == np.int32 and order.dtype == np.int64
    if env.gpu:  # on the device: the same arrays
        d_off, d_gather, d_order = align(env.dev(ids), e)
        assert d_off.is_cuda and np.array_equal(env.host(d_off), offsets)
        assert np.array_equal(env.host(d_gather), gather) and np.array_equal(env.host(d_order), order)
    out = env.nan_out((tokens * topk, n), "float32")
    ws = env.dev(S.blocked_experts(lin))
    got = T.use("fp4gemm.moe", moe, "grouped_gemm")(env.dev(a), env.dev(sa), env.dev(w), ws, env.dev(offsets),
                                                    gather_index=env.dev(gather), out=out, out_dtype="float32")
    assert got is out
    T.use("fp4gemm.moe", moe, "check")()  # synchronises; nothing bad
    run = S.GemmRun(a, sa, offsets, None, gather, np.repeat(np.arange(e), np.diff(offsets)), gather.astype(np.int64),
                    (tokens * topk, n))
    S.assert_gemm_exact(env.host(got), S.gemm_reference(w, lin, "nvfp4", run, None), "float32", "moe.grouped_gemm")
    if env.gpu:  # bad routing data on the device: moe.check() names it
        bad = offsets.copy()
        bad[3] = bad[2] - 1
        moe.grouped_gemm(env.dev(a), env.dev(sa), env.dev(w), ws, env.dev(bad), gather_index=env.dev(gather),
                         out=env.nan_out((tokens * topk, n), "float32"), out_dtype="float32")
        with pytest.raises(fp4gemm.ArgumentError) as info:
            moe.check()
        assert info.value.argument == "expert_offsets"
        moe.check()


def _modelopt_sd(rng, e, h, i, convert):
    sd, raw = {}, []
    for x in range(e):
        parts = {}
        for name, (rows, kk) in (("w1", (i, h)), ("w3", (i, h)), ("w2", (h, i))):
            w = S.rand_fp4(rng, (rows, kk // 2), "gpumode")
            s = S.rand_scales(rng, (rows, kk // 16), "nvfp4", "gpumode")
            g = np.float32([0.5, 1.0, 2.0][rng.integers(0, 3)])
            base = f"layers.0.mlp.experts.{x}.{name}."
            sd[base + "weight"], sd[base + "weight_scale"] = convert(w), convert(s)
            sd[base + "weight_scale_2"] = convert(np.array([g], np.float32))
            sd[base + "input_scale"] = convert(np.array([0.5], np.float32))
            parts[name] = (w, s, g)
        raw.append(parts)
    return sd, raw


@recipe("fp4gemm.moe", "ExpertWeights")
def r_expert_weights(T, env):
    K = "fp4gemm.moe.ExpertWeights"
    cls = T.use("fp4gemm.moe", moe, "ExpertWeights")
    rng = np.random.default_rng(12)
    e, h, i = 4, 128, 64
    sd, raw = _modelopt_sd(rng, e, h, i, env.dev)
    ew = T.instance(K, T.use(K, cls, "from_modelopt")(sd, "layers.0.mlp."))
    w13 = np.stack([np.concatenate([p["w1"][0], p["w3"][0]]) for p in raw])
    s13 = np.stack([np.concatenate([p["w1"][1], p["w3"][1]]) for p in raw])
    w2, s2 = np.stack([p["w2"][0] for p in raw]), np.stack([p["w2"][1] for p in raw])
    assert (T.use(K, ew, "format"), T.use(K, ew, "experts"), T.use(K, ew, "hidden"), T.use(K, ew, "intermediate")) == (
        "nvfp4", e, h, i)
    assert np.array_equal(env.host(T.use(K, ew, "w13")), w13) and np.array_equal(env.host(T.use(K, ew, "w2")), w2)
    assert np.array_equal(env.host(T.use(K, ew, "w13_scales")), S.blocked_experts(s13))
    assert np.array_equal(env.host(T.use(K, ew, "w2_scales")), S.blocked_experts(s2))
    assert np.array_equal(env.host(T.use(K, ew, "w13_global")), [[p["w1"][2], p["w3"][2]] for p in raw])
    assert np.array_equal(env.host(T.use(K, ew, "w2_global")), [p["w2"][2] for p in raw])
    assert np.all(env.host(T.use(K, ew, "w13_input_scale")) == 0.5)
    assert np.all(env.host(T.use(K, ew, "w2_input_scale")) == 0.5)
    assert T.use(K, ew, "w13_bias") is None and T.use(K, ew, "w2_bias") is None
    assert T.use(K, ew, "interleaved") is False
    assert T.use(K, ew, "source")["convention"] == "modelopt"
    assert T.use(K, ew, "__repr__")().startswith("ExpertWeights(format='nvfp4'")
    # The loaded arrays run the layer as the checkpoint's own arrays do (bit for bit on one path).
    c = _cfg("nvfp4", e=e, h=h, i=i)
    g13, g2 = env.host(ew.w13_global), env.host(ew.w2_global)
    truth = S.Truth(w13, s13, w2, s2, np.ascontiguousarray(g13[:, 0]), np.ascontiguousarray(g13[:, 1]), g2)
    x = S.random_tokens(rng, 6, h, "gpumode")
    ids, wts = S.random_routing(rng, 6, e, 2, "uniform", np.int32, False)
    got = moe.fused_experts(env.dev(x), ew.w13, ew.w13_scales, ew.w2, ew.w2_scales, env.dev(wts), env.dev(ids),
                            a1_scale=c.a1, a2_scale=c.a2, w13_alpha=env.dev(truth.w13_alpha),
                            w13_alpha_up=env.dev(truth.w13_alpha_up), w2_alpha=env.dev(truth.w2_alpha))
    _check_layer_out(env, c, truth, x, ids, wts, got, "ExpertWeights.from_modelopt -> fused_experts")
    # .layer(): the checkpoint's alphas and input scales (0.5 each here) filled in -- the bits of the
    # same layer called with them by hand
    layer = T.use(K, ew, "layer")(max_tokens=8, topk=2)
    by_hand = moe.fused_experts(env.dev(x), ew.w13, ew.w13_scales, ew.w2, ew.w2_scales, env.dev(wts), env.dev(ids),
                                a1_scale=0.5, a2_scale=0.5, w13_alpha=env.dev(truth.w13_alpha),
                                w13_alpha_up=env.dev(truth.w13_alpha_up), w2_alpha=env.dev(truth.w2_alpha))
    assert np.array_equal(env.host(layer.run(env.dev(x), env.dev(ids), env.dev(wts))).view(np.uint16),
                          env.host(by_hand).view(np.uint16)), "ExpertWeights.layer"

    # gpt-oss MXFP4
    blocks13 = S.rand_fp4(rng, (e, 2 * i, h // 32, 16), "gpumode")
    sc13 = S.rand_scales(rng, (e, 2 * i, h // 32), "mxfp4", "gpumode")
    blocks2 = S.rand_fp4(rng, (e, h, i // 32, 16), "gpumode")
    sc2 = S.rand_scales(rng, (e, h, i // 32), "mxfp4", "gpumode")
    bias = rng.standard_normal((e, h)).astype(np.float32)
    p = "model.layers.1.mlp.experts."
    sd = {p + "gate_up_proj_blocks": env.dev(blocks13), p + "gate_up_proj_scales": env.dev(sc13),
          p + "down_proj_blocks": env.dev(blocks2), p + "down_proj_scales": env.dev(sc2),
          p + "down_proj_bias": env.dev(bias)}
    gx = T.instance(K, T.use(K, cls, "from_mxfp4")(sd, "model.layers.1.mlp."))
    assert (gx.format, gx.experts, gx.hidden, gx.intermediate, gx.interleaved) == ("mxfp4", e, h, i, True)
    assert np.array_equal(env.host(gx.w13), blocks13.reshape(e, 2 * i, h // 2))
    assert np.array_equal(env.host(gx.w13_scales), S.blocked_experts(sc13))
    assert np.array_equal(env.host(gx.w2_scales), S.blocked_experts(sc2))
    assert gx.w13_bias is None and np.array_equal(env.host(gx.w2_bias), bias)
    # pack_pieces: the same layer on the weights in pieces (GPU: equal bytes on these GPU MODE values, both paths;
    # host: refused by name -- it packs CUDA tensors)
    assert T.use(K, gx, "weight_layout") == "rows"
    if not env.gpu:
        with pytest.raises(fp4gemm.ArgumentError) as err:
            T.use(K, gx, "pack_pieces")()
        assert err.value.argument == "w13"
        return
    px = T.use(K, gx, "pack_pieces")()
    assert px.weight_layout == "pieces" and px.w2_bias is gx.w2_bias and px.w13_scales is gx.w13_scales
    with pytest.raises(fp4gemm.ArgumentError) as err:
        px.pack_pieces()
    assert err.value.argument == "weight_layout"
    pe = ew.pack_pieces()  # NVFP4 W4A4: the checkpoint's alphas and input scales, the same bytes as the rows layer
    y_rows = env.host(ew.layer(max_tokens=8, topk=2).run(env.dev(x), env.dev(ids), env.dev(wts)))
    y_pieces = env.host(pe.layer(max_tokens=8, topk=2).run(env.dev(x), env.dev(ids), env.dev(wts)))
    assert np.array_equal(y_rows.view(np.uint16), y_pieces.view(np.uint16)), "NVFP4 ExpertWeights.pack_pieces().layer"
    rows_layer, pieces_layer = gx.layer(max_tokens=12, topk=2), px.layer(max_tokens=12, topk=2)
    assert "weights in pieces" in pieces_layer.describe()
    for n in (2, 12):
        x = S.random_tokens(rng, n, h, "gpumode")
        ids, wts = S.random_routing(rng, n, e, 2, "uniform", np.int32, False)
        a = env.host(rows_layer.run(env.dev(x), env.dev(ids), env.dev(wts)))
        b = env.host(pieces_layer.run(env.dev(x), env.dev(ids), env.dev(wts)))
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16)), f"ExpertWeights.pack_pieces().layer, T {n}"


# ---- fp4gemm.ep ---------------------------------------------------------------------------------------------------


@recipe("fp4gemm.ep", "combine")
def r_combine(T, env):
    rng = np.random.default_rng(13)
    t, k, h, e = 5, 3, 64, 4
    y = (rng.integers(-8, 9, (t * k, h)) * 0.25).astype(np.float32).astype(BF16)
    wts = (rng.integers(-4, 5, (t, k)) * 0.125).astype(np.float32)
    ids = rng.integers(0, e, (t, k)).astype(np.int64)
    ids[1, 2], ids[3, 0] = -1, e  # outside [0, E): skipped
    want = np.zeros((t, h))
    for tok in range(t):
        for j in range(k):
            if 0 <= ids[tok, j] < e:
                want[tok] += wts[tok, j] * y[tok * k + j].astype(np.float64)  # every value exact here
    fn = T.use("fp4gemm.ep", ep, "combine")
    got = fn(env.dev(y), env.dev(wts), env.dev(ids), e)
    assert np.array_equal(env.host(got).astype(np.float64), want.astype(np.float32).astype(BF16).astype(np.float64))
    out = env.nan_out((t, h), "bfloat16")
    stream = env.torch.cuda.current_stream() if env.gpu else None
    assert fn(env.dev(y), env.dev(wts), env.dev(ids), e, out=out, stream=stream) is out
    assert bits_equal(env.host(out), env.host(got))


@recipe("fp4gemm.ep", "ThreadGroup")
def r_thread_group(T, env):
    K = "fp4gemm.ep.ThreadGroup"
    group = T.instance(K, T.use("fp4gemm.ep", ep, "ThreadGroup")(3))
    assert T.use(K, group, "world") == 3

    def step(comm, mine):
        assert (comm.rank, comm.world) == (mine, 3)
        send = np.arange(mine + 1, dtype=np.int64)  # rank r sends one row to each of ranks 0..r
        counts = np.array([1 if d <= mine else 0 for d in range(3)], np.int64)
        recv = comm.split_counts(counts)
        got = comm.all_to_all(send[:counts.sum()].reshape(-1, 1) + 10 * mine, counts, recv)
        return recv, got

    results = T.use(K, group, "run")(step, [0, 1, 2])
    for r, (recv, got) in enumerate(results):
        assert list(recv) == [1 if r <= s else 0 for s in range(3)]
        assert sorted(got.reshape(-1).tolist()) == sorted(10 * s + r for s in range(3) if r <= s)
    T.use(K, group, "comm")(0)


def _ep_case(rng, e=4, h=64, i=64, k=2, act="nvfp4"):
    c = S.Config("nvfp4" if act == "nvfp4" else "mxfp4", act, "silu", "stacked", "linear", e, h, i, "gpumode",
                 0.5 if act == "nvfp4" else 1.0, 0.25 if act == "nvfp4" else 1.0)
    t = S.random_truth(rng, c, "gate", False)
    return c, t


def _ep_layer(T, env, comm, c, t, rank, world, k, convert, dispatch="auto"):
    K = "fp4gemm.ep.ExpertParallel"
    local = c.e // world
    sl = slice(rank * local, (rank + 1) * local)
    kw = c.layer_kwargs()
    layer = T.instance(K, T.use("fp4gemm.ep", ep, "ExpertParallel")(
        convert(t.w13[sl]), convert(t.s13[sl]), convert(t.w2[sl]), convert(t.s2[sl]), experts=c.e, comm=comm,
        max_tokens=8, topk=k, dispatch=dispatch, w13_alpha=convert(t.w13_alpha[sl]), w2_alpha=convert(t.w2_alpha[sl]),
        **kw))
    got = (T.use(K, layer, "world"), T.use(K, layer, "rank"), T.use(K, layer, "experts"), T.use(K, layer, "local"))
    assert got == (world, rank, c.e, local), got
    assert (T.use(K, layer, "topk"), T.use(K, layer, "max_tokens"), T.use(K, layer, "comm")) == (k, 8, comm)
    assert T.use(K, layer, "fp4") == (c.act != "bf16" and dispatch != "bf16")
    assert T.use(K, layer, "format") == c.fmt and T.use(K, layer, "a1") == c.a1
    assert isinstance(T.use(K, layer, "layer"), moe.MoeLayer)
    assert T.use(K, layer, "hidden") == c.h
    vec = 16 if c.fmt == "nvfp4" else 32
    assert T.use(K, layer, "row_bytes") == (c.h // 2 + c.h // vec if layer.fp4 else 2 * c.h)
    assert T.use(K, layer, "device_path") == bool(getattr(comm, "device_path", False))
    return layer


@recipe("fp4gemm.ep", "ExpertParallel")
def r_expert_parallel(T, env):
    """Host: two ranks as threads (ThreadGroup); GPU variant: one rank over torch.distributed (see
    r_torch_comm). Every rank's output: the single-process layer's bits."""
    K = "fp4gemm.ep.ExpertParallel"
    rng = np.random.default_rng(14)
    c, t = _ep_case(rng)
    single = S.host_layer(c, t, 8, 2)
    tokens = []
    for n in (5, 8):
        x = S.random_tokens(rng, n, c.h, "gpumode")
        ids, wts = S.random_routing(rng, n, c.e, 2, "dropped", np.int32, False)
        tokens.append((x, ids, wts))
    group = ep.ThreadGroup(2)

    def step(comm, batch):
        layer = _ep_layer(T, env, comm, c, t, comm.rank, 2, 2, lambda a: a)
        first = T.use(K, layer, "forward")(*batch)
        second = T.use(K, layer, "__call__")(*batch)
        sent = T.use(K, layer, "last_bytes")
        moved = T.use(K, layer, "dispatch_bytes")(batch[1])
        assert moved["rows_remote"] + moved["rows_local"] == int(np.sum((batch[1] >= 0) & (batch[1] < c.e)))
        # last_bytes counts every row the host path sent, this rank's own included
        row = moved["dispatch_bytes"] // max(1, moved["rows_remote"])
        assert moved["rows_remote"] == 0 or (moved["rows_remote"] + moved["rows_local"]) * row == sent, (moved, sent)
        return first, second, sent

    for r, (first, second, sent) in enumerate(group.run(step, tokens)):
        want = single.run(*tokens[r])
        assert bits_equal(first, want) and bits_equal(second, want), r
        assert sent >= 0


@recipe("fp4gemm.ep", "TorchComm", host=False,
        why_not_host="needs torch.distributed; the GPU variant runs it (and ExpertParallel over it) on a world-size-1 "
                     "gloo group")
def r_torch_comm(T, env):
    torch = env.torch
    K = "fp4gemm.ep.TorchComm"
    comm = T.instance(K, T.use("fp4gemm.ep", ep, "TorchComm")())
    assert (T.use(K, comm, "rank"), T.use(K, comm, "world")) == (0, 1)
    assert T.use(K, comm, "group") is None and T.use(K, comm, "dist") is torch.distributed
    assert str(T.use(K, comm, "device")) == ("cuda:0" if env.dist == "nccl" else "cpu")
    dev = comm.device
    assert list(T.use(K, comm, "split_counts")(np.array([5], np.int64))) == [5]
    send = torch.arange(10, dtype=torch.float32, device=dev).reshape(5, 2).to(torch.bfloat16)
    got = T.use(K, comm, "all_to_all")(send, [5], [5])
    assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16), send.view(torch.int16))
    # ExpertParallel over it (world 1: every expert local), on the comm's device
    rng = np.random.default_rng(15)
    c, t = _ep_case(rng)
    single = S.host_layer(c, t, 8, 2)

    def convert(a):
        if a.dtype == BF16:
            return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).to(dev)
        return torch.from_numpy(np.ascontiguousarray(a)).to(dev)

    for dispatch in ("auto", "bf16"):
        layer = _ep_layer(T, env, comm, c, t, 0, 1, 2, convert, dispatch)
        x = S.random_tokens(rng, 6, c.h, "gpumode")
        ids, wts = S.random_routing(rng, 6, c.e, 2, "dropped", np.int32, False)
        got = T.use("fp4gemm.ep.ExpertParallel", layer, "__call__")(convert(x), convert(ids), convert(wts))
        want = single.run(x, ids, wts)
        g = got.view(torch.int16).cpu().numpy().view(BF16)
        if dev.type == "cpu":  # the host layer and the host combine: bit for bit
            assert bits_equal(g, want), dispatch
        else:  # CUDA: the device layer, torch's FP32 combine
            gf, wf = g.astype(np.float32), want.astype(np.float32)
            assert S.rel_error(gf, wf) < 2.0**-7 and np.mean(gf == wf) > 0.5, dispatch


def _device_path_check(T, env, parts, single, tokens, run):
    """parts: every rank's ExpertParallel on the device path; run(inputs) -> the outputs."""
    K = "fp4gemm.ep.ExpertParallel"
    for p in parts:
        assert T.use(K, p, "device_path")
        assert T.use(K, p, "capacity") == p.world * 8  # a token once per rank (max_tokens 8)
        assert T.use(K, p, "row_bytes") == (p.hidden // 2 + p.hidden // 16 if p.fp4 else 2 * p.hidden)
        assert "EpExchange rank" in T.use(K, p, "exchange").describe()
    inputs = [tuple(env.dev(a) for a in batch) for batch in tokens]
    for r, got in enumerate(run(inputs)):
        assert bits_equal(env.host(got), single.run(*tokens[r])), r


@recipe("fp4gemm.ep", "LocalGroup", host=False,
        why_not_host="the device path (fp4gemm::EpExchange kernels) needs CUDA tensors; the GPU variant runs two ranks "
                     "on one GPU")
def r_local_group(T, env):
    K = "fp4gemm.ep.LocalGroup"
    group = T.instance(K, T.use("fp4gemm.ep", ep, "LocalGroup")(2))
    assert T.use(K, group, "world") == 2 and T.use(K, group, "device").type == "cuda"
    rng = np.random.default_rng(16)
    c, t = _ep_case(rng)
    single = S.host_layer(c, t, 16, 2)
    parts = [_ep_layer(T, env, T.use(K, group, "comm")(r), c, t, r, 2, 2, env.dev) for r in range(2)]
    tokens = []
    for n in (3, 8):
        x = S.random_tokens(rng, n, c.h, "gpumode")
        ids, wts = S.random_routing(rng, n, c.e, 2, "dropped", np.int32, False)
        tokens.append((x, ids, wts))
    _device_path_check(T, env, parts, single, tokens, lambda inputs: T.use(K, group, "step")(parts, inputs))


@recipe("fp4gemm.ep", "SymmetricMemoryComm", host=False,
        why_not_host="PyTorch SymmetricMemory needs CUDA and torch.distributed; the GPU variant runs a world-size-1 group")
def r_symmetric_memory_comm(T, env):
    K = "fp4gemm.ep.SymmetricMemoryComm"
    comm = T.instance(K, T.use("fp4gemm.ep", ep, "SymmetricMemoryComm")())
    assert (T.use(K, comm, "rank"), T.use(K, comm, "world")) == (0, 1)
    assert T.use(K, comm, "device").type == "cuda" and T.use(K, comm, "group") is not None
    assert T.use(K, comm, "device_path")
    buf, ptrs = T.use(K, comm, "buffers")(4096)
    assert ptrs == [buf.data_ptr()]
    T.use(K, comm, "barrier")()
    rng = np.random.default_rng(17)
    c, t = _ep_case(rng)
    single = S.host_layer(c, t, 8, 2)
    layer = _ep_layer(T, env, ep.SymmetricMemoryComm(), c, t, 0, 1, 2, env.dev)
    x = S.random_tokens(rng, 6, c.h, "gpumode")
    ids, wts = S.random_routing(rng, 6, c.e, 2, "dropped", np.int32, False)
    _device_path_check(T, env, [layer], single, [(x, ids, wts)],
                       lambda inputs: [T.use("fp4gemm.ep.ExpertParallel", layer, "__call__")(*inputs[0])])


# ---- fp4gemm.ops (torch custom ops) ----------------------------------------------------------------------------

_NO_TORCH = "the torch custom ops need torch (the GPU variant runs them on CUDA tensors)"


@recipe("fp4gemm.ops", "grouped_gemm", "grouped_gemm_out", host=False, why_not_host=_NO_TORCH)
def r_ops_grouped(T, env):
    from fp4gemm import ops

    torch = env.torch
    d = random_groups([64, 24], 128, 256, "nvfp4", "blocked", values="gpumode", seed=16)
    want = _groups_reference(d, [1.0, 2.0])
    a, b, sfa, sfb = ([env.dev(x) for x in lst] for lst in (d.a, d.b, d.sfa, d.sfb))
    got = T.use("fp4gemm.ops", ops, "grouped_gemm")(a, b, sfa, sfb, alpha=[1.0, 2.0], scale_layout="blocked",
                                                     out_dtype=torch.float32)
    for o, w in zip(got, want):
        assert o.dtype == torch.float32 and np.array_equal(env.host(o).astype(np.float64), w.astype(np.float32))
    c = [env.nan_out((x.shape[0], 128), "float16") for x in d.a]
    alpha_t = torch.tensor([1.0, 2.0], device="cuda")
    T.use("fp4gemm.ops", ops, "grouped_gemm_out")(a, b, sfa, sfb, c, alpha_tensor=alpha_t, scale_layout="blocked")
    for o, w in zip(c, want):
        assert np.array_equal(env.host(o).astype(np.float64), w.astype(np.float16))


@recipe("fp4gemm.ops", "moe_grouped_gemm", "moe_grouped_gemm_out", host=False, why_not_host=_NO_TORCH)
def r_ops_moe(T, env):
    from fp4gemm import ops

    torch = env.torch
    rng = np.random.default_rng(17)
    e, n, k, tokens, topk = 6, 64, 256, 9, 2
    w, lin = S.rand_fp4(rng, (e, n, k // 2), "gpumode"), S.rand_scales(rng, (e, n, k // 16), "nvfp4", "gpumode")
    a, sa = S.rand_fp4(rng, (tokens, k // 2), "gpumode"), S.rand_scales(rng, (tokens, k // 16), "nvfp4", "gpumode")
    ids = np.stack([rng.permutation(e)[:topk] for _ in range(tokens)]).astype(np.int32)
    offsets, gather, _ = moe.align_routing(ids, e)
    run = S.GemmRun(a, sa, offsets, None, gather, np.repeat(np.arange(e), np.diff(offsets)), gather.astype(np.int64),
                    (tokens * topk, n))
    alpha = np.array([1, 2, 0.5, 1, 4, -1], np.float32)
    ref = S.gemm_reference(w, lin, "nvfp4", run, alpha)
    args = (env.dev(a), env.dev(sa), env.dev(w), env.dev(S.blocked_experts(lin)), env.dev(offsets))
    got = T.use("fp4gemm.ops", ops, "moe_grouped_gemm")(*args, env.dev(gather), alpha=env.dev(alpha),
                                                         out_dtype=torch.float32)
    S.assert_gemm_exact(env.host(got), ref, "float32", "ops.moe_grouped_gemm")
    out = env.nan_out((tokens * topk, n), "bfloat16")
    T.use("fp4gemm.ops", ops, "moe_grouped_gemm_out")(*args, out, env.dev(gather), alpha=env.dev(alpha))
    S.assert_gemm_exact(env.host(out).astype(np.float64), ref, "bfloat16", "ops.moe_grouped_gemm_out")


@recipe("fp4gemm.ops", "fused_experts", "native_status", host=False, why_not_host=_NO_TORCH)
def r_ops_layer(T, env):
    from fp4gemm import ops

    status = T.use("fp4gemm.ops", ops, "native_status")()
    assert set(status) == {"fused_experts", "moe_grouped_gemm", "moe_grouped_gemm_out", "grouped_gemm",
                           "grouped_gemm_out"}, status
    assert all(isinstance(v, str) for v in status.values())
    rng = np.random.default_rng(18)
    c = _cfg("mxfp4", "swigluoai", "interleaved", e=5)
    t = S.random_truth(rng, c, "all", True)
    x = S.random_tokens(rng, 11, c.h, "gpumode")
    ids, wts = S.random_routing(rng, 11, c.e, 3, "duplicates", np.int64, True)
    got = T.use("fp4gemm.ops", ops, "fused_experts")(
        env.dev(x), *_live(env, t), env.dev(wts), env.dev(ids), activation=c.activation, act_format=c.act,
        gate_up=c.gate_up, w13_alpha=env.dev(t.w13_alpha), w13_alpha_up=env.dev(t.w13_alpha_up),
        w2_alpha=env.dev(t.w2_alpha))
    _check_layer_out(env, c, t, x, ids, wts, got, "ops.fused_experts")


# ---- the two variants -------------------------------------------------------------------------------------------


def _declared():
    out = collections.defaultdict(set)
    for r in RECIPES:
        out[r.module] |= set(r.names)
    return out


def _check_complete(T, gpu):
    """Every public name has a recipe; every recipe run used every name it claims; every public
    class constructed had all its members used (or, on the host, says why it was not constructed)."""
    problems = []
    declared = _declared()
    for module, (names, mod) in public_names().items():
        for n in sorted(names - declared[module]):
            problems.append(f"{module}.{n}: public, but no recipe in test_api_surface.py calls it (add one)")
        for n in sorted(declared[module] - names):
            problems.append(f"{module}.{n}: a recipe claims it, but it is not public API (stale recipe?)")
        ran = [r for r in RECIPES if r.module == module and (gpu or r.host)]
        for r in ran:
            for n in r.names:
                if n not in T.used[module]:
                    problems.append(f"{module}.{n}: recipe {r.fn.__name__} did not call it")
        if mod is None:
            continue
        for n in sorted(names):
            obj = getattr(mod, n)
            if not inspect.isclass(obj):
                continue
            key = f"{module}.{n}"
            made = T.instances.get(key, [])
            if not made:
                if gpu or key not in HOST_UNCONSTRUCTED:
                    problems.append(f"{key}: no recipe constructed one")
                continue
            members = class_members(obj)
            for inst in made:
                members |= {a for a in getattr(inst, "__dict__", {}) if not a.startswith("_")}
            for m in sorted(members - T.used[key]):
                problems.append(f"{key}.{m}: public member no recipe used")
    assert not problems, "\n".join(problems)


def test_host_api_surface():
    T = Tracker()
    env = Env(gpu=False)
    for r in RECIPES:
        if r.host:
            r.fn(T, env)
    _check_complete(T, gpu=False)


def test_recipe_table_names_every_public_name():
    """(Also where nothing runs: each public name, ops' included, has a recipe, and each recipe that
    cannot run on the host says why.)"""
    declared = _declared()
    for module, (names, _) in public_names().items():
        assert names <= declared[module], (module, sorted(names - declared[module]))
    for r in RECIPES:
        assert r.host or r.why_not_host, r.fn.__name__


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dist_group(torch, backend):
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("this torch has no torch.distributed")
    if dist.is_initialized():
        pytest.skip("a default process group already exists in this process")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    return dist


@pytest.mark.gpu
def test_gpu_api_surface(backend):
    if backend != "auto":
        pytest.skip(f"the MoE GEMM and layer run only the fast kernel (sm_90); this tier runs backend {backend!r}")
    torch = pytest.importorskip("torch")
    dist = _dist_group(torch, "gloo")
    try:
        T = Tracker()
        env = Env(gpu=True, torch=torch, dist="gloo")
        for r in RECIPES:
            r.fn(T, env)
        torch.cuda.synchronize()
        _check_complete(T, gpu=True)
    finally:
        dist.destroy_process_group()
        fp4gemm.set_default_backend(backend)
        moe.clear_layer_cache()


@pytest.mark.gpu
def test_gpu_expert_parallel_nccl_world_one(backend):
    """fp4gemm.ep on CUDA tensors: TorchComm over a world-size-1 NCCL group, ExpertParallel's device
    path (the device layer, the CUDA combine) against the host layer."""
    if backend != "auto":
        pytest.skip(f"the MoE layer runs only the fast kernel (sm_90); this tier runs backend {backend!r}")
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("this torch has no NCCL backend")
    _dist_group(torch, "nccl")
    try:
        T = Tracker()
        r_torch_comm(T, Env(gpu=True, torch=torch, dist="nccl"))
        assert {"split_counts", "all_to_all", "device"} <= T.used["fp4gemm.ep.TorchComm"]
        assert {"__call__", "layer", "fp4"} <= T.used["fp4gemm.ep.ExpertParallel"]
    finally:
        dist.destroy_process_group()
