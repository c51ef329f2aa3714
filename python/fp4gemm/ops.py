"""torch custom ops: ``torch.ops.fp4gemm.grouped_gemm`` / ``grouped_gemm_out`` and
``torch.ops.fp4gemm.moe_grouped_gemm`` / ``moe_grouped_gemm_out`` (fp4gemm.moe).

Registered through torch.library with fake (meta) implementations, so they trace under
``torch.compile(fullgraph=True)`` and can be captured in CUDA graphs (the binding builds plans
outside the graph — also when first seen during a capture — and keeps plans used by a captured
graph alive). All run on the stream torch considers current.

    c = fp4gemm.ops.grouped_gemm(a, b, sfa, sfb, scale_layout="blocked")      # allocates C
    fp4gemm.ops.grouped_gemm_out(a, b, sfa, sfb, c, scale_layout="blocked")   # writes C

Packed FP4 may be uint8 or float4_e2m1fn_x2, scales uint8 / float8_e4m3fn / float8_e8m0fnu.
`alpha` is a list of floats (baked into the graph) or, via `alpha_tensor`, a float32 CUDA
tensor of one value per group read at run time.

    out = fp4gemm.ops.moe_grouped_gemm(a, a_scales, w, w_scales, expert_offsets, gather_index)

takes the routing as device tensors, so one compiled graph / captured CUDA graph serves every
routing (see fp4gemm.moe).
"""

# No `from __future__ import annotations`: torch.library infers the op schemas from live annotations.
import inspect
from typing import List, Optional, Sequence

import torch

from . import _fp4gemm as _C
from . import moe as _moe

Tensor = torch.Tensor

_LIB = torch.library.Library("fp4gemm", "FRAGMENT")


class _Op:
    """What ``torch.library.custom_op`` returns, as far as this module uses it."""

    def __init__(self, name: str):
        self.name = name

    def register_fake(self, fake):
        torch.library.register_fake(f"fp4gemm::{self.name}", fake, lib=_LIB)
        return fake


def _versioned(fn, mutated):
    """`fn` followed by a version-counter bump of the arguments at the positions `mutated` (a tensor
    or a list of tensors each), as custom_op's ADInplaceOrView kernel does for mutates_args."""

    def versioned(*args):
        result = fn(*args)
        for i in mutated:
            for t in (args[i] if isinstance(args[i], (list, tuple)) else (args[i],)):
                torch.autograd.graph.increment_version(t)
        return result

    return versioned


def _custom_op(qualname: str, mutates_args=(), kernel=None):
    """``torch.library.custom_op``'s registration done on the dispatcher directly: the schema
    inferred from the annotations as custom_op infers it, and one CompositeExplicitAutograd kernel
    (CPU and CUDA) that bumps the version counters of the arguments it mutates, as custom_op's
    ADInplaceOrView kernel does. custom_op also routes every call through Python autograd and
    aliasing wrappers: 11.7 us of host time per call for a do-nothing op, against 2.7 us this
    way (H200 host, bench/host_overhead.py). No autograd formula either way (inference ops).
    `kernel`: a callable taking the schema's arguments in order to register instead of the
    decorated function (which then only gives the schema)."""
    name = qualname.split("::", 1)[1]

    def wrap(fn):
        _LIB.define(name + torch.library.infer_schema(fn, mutates_args=mutates_args))
        if kernel is not None:
            impl = kernel
        elif mutates_args:
            params = list(inspect.signature(fn).parameters)
            impl = _versioned(fn, [params.index(a) for a in mutates_args])
        else:
            impl = fn
        _LIB.impl(name, impl, "CompositeExplicitAutograd")
        return _Op(name)

    return wrap


def _reporting(kernel, returns: str):
    """A Python kernel as the native (C++) kernels call it for what they leave to Python (misses,
    errors): an exception cannot travel back through torch's C shim (it would be logged and reduced
    to an error code), so it is handed to the native kernel, which raises it as a RuntimeError
    with this text."""

    def run(*args):
        if not _C._torch_native_forwarding():  # called directly: raise as usual
            return kernel(*args)
        try:
            return kernel(*args)
        except Exception as e:  # noqa: BLE001 -- every error goes back to the caller
            _C._torch_native_error(f"{type(e).__name__}: {e}")
            # a value of the schema's return type (the native kernel discards it)
            return {"tensor": lambda: args[0].new_empty(0), "list": list}.get(returns, lambda: None)()

    return run


def _python_twin(name: str, kernel) -> None:
    """Defines fp4gemm::_<name>_python: op <name>'s schema with `kernel` (through _reporting, and
    bumping the version counters of what the schema says it mutates) as its only kernel -- what
    <name>'s native kernel calls for what it leaves to Python."""
    op_schema = getattr(torch.ops.fp4gemm, name).default._schema
    mutated = [i for i, a in enumerate(op_schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    schema = str(op_schema)
    _LIB.define(f"_{name}_python" + schema[schema.index("("):])
    impl = _versioned(kernel, mutated) if mutated else kernel
    returns = ("none" if not op_schema.returns else
               "list" if op_schema.returns[0].type.kind() == "ListType" else "tensor")
    _LIB.impl(f"_{name}_python", _reporting(impl, returns), "CompositeExplicitAutograd")


def _out_shape(a: Tensor, b: Tensor) -> List[int]:
    return [a.shape[0], b.shape[0], 1] if a.dim() == 3 else [a.shape[0], b.shape[0]]


def _alpha_arg(alpha: Optional[List[float]], alpha_tensor: Optional[Tensor]):
    if alpha_tensor is not None:
        if alpha is not None:
            raise _C.ArgumentError("fp4gemm: alpha: pass either alpha or alpha_tensor, not both")
        return alpha_tensor
    return alpha


def _grouped_gemm_impl(a, b, sfa, sfb, alpha, alpha_tensor, format, scale_layout, out_dtype, backend):
    c = [torch.empty(_out_shape(x, y), dtype=out_dtype, device=x.device) for x, y in zip(a, b)]
    _C.grouped_gemm(a, b, sfa, sfb, c, _alpha_arg(alpha, alpha_tensor), format, scale_layout, out_dtype,
                    backend or None, None, 0)
    return c


def _grouped_gemm_out_impl(a, b, sfa, sfb, c, alpha, alpha_tensor, format, scale_layout, backend):
    out_dtype = c[0].dtype if len(c) else torch.float16
    _C.grouped_gemm(a, b, sfa, sfb, c, _alpha_arg(alpha, alpha_tensor), format, scale_layout, out_dtype,
                    backend or None, None, 0)


@_custom_op("fp4gemm::grouped_gemm", mutates_args=())
def _grouped_gemm(
    a: List[Tensor],
    b: List[Tensor],
    sfa: List[Tensor],
    sfb: List[Tensor],
    alpha: Optional[List[float]],
    alpha_tensor: Optional[Tensor],
    format: str,
    scale_layout: str,
    out_dtype: torch.dtype,
    backend: str,
) -> List[Tensor]:
    return _grouped_gemm_impl(a, b, sfa, sfb, alpha, alpha_tensor, format, scale_layout, out_dtype, backend)


# The pointer-array ops' Python kernels under their own names: what their native CUDA kernels call
# for what they leave to Python (lists of different lengths, alpha given twice, empty calls).
_python_twin("grouped_gemm", _grouped_gemm_impl)


@_grouped_gemm.register_fake
def _grouped_gemm_fake(a, b, sfa, sfb, alpha, alpha_tensor, format, scale_layout, out_dtype, backend):
    if len(a) != len(b):
        raise _C.ArgumentError(f"fp4gemm: b: has {len(b)} entries but a has {len(a)}")
    return [x.new_empty(_out_shape(x, y), dtype=out_dtype) for x, y in zip(a, b)]


@_custom_op("fp4gemm::grouped_gemm_out", mutates_args=("c",))
def _grouped_gemm_out(
    a: List[Tensor],
    b: List[Tensor],
    sfa: List[Tensor],
    sfb: List[Tensor],
    c: List[Tensor],
    alpha: Optional[List[float]],
    alpha_tensor: Optional[Tensor],
    format: str,
    scale_layout: str,
    backend: str,
) -> None:
    _grouped_gemm_out_impl(a, b, sfa, sfb, c, alpha, alpha_tensor, format, scale_layout, backend)


_python_twin("grouped_gemm_out", _grouped_gemm_out_impl)


@_grouped_gemm_out.register_fake
def _grouped_gemm_out_fake(a, b, sfa, sfb, c, alpha, alpha_tensor, format, scale_layout, backend):
    return None


def _alpha_list(alpha) -> Optional[List[float]]:
    if alpha is None:
        return None
    if isinstance(alpha, (int, float)):
        return [float(alpha)]  # broadcast below
    return [float(x) for x in alpha]


def grouped_gemm(
    a: Sequence[Tensor],
    b: Sequence[Tensor],
    sfa: Sequence[Tensor],
    sfb: Sequence[Tensor],
    alpha=None,
    alpha_tensor: Optional[Tensor] = None,
    format: str = "nvfp4",
    scale_layout: str = "linear",
    out_dtype: torch.dtype = torch.float16,
    backend: Optional[str] = None,
) -> List[Tensor]:
    """torch.ops.fp4gemm.grouped_gemm with defaults; returns new C tensors [M_g, N_g]."""
    al = _alpha_list(alpha)
    if al is not None and len(al) == 1 and len(a) != 1:
        al = al * len(a)
    return torch.ops.fp4gemm.grouped_gemm(list(a), list(b), list(sfa), list(sfb), al, alpha_tensor, format,
                                          scale_layout, out_dtype, backend or "")


def grouped_gemm_out(
    a: Sequence[Tensor],
    b: Sequence[Tensor],
    sfa: Sequence[Tensor],
    sfb: Sequence[Tensor],
    c: Sequence[Tensor],
    alpha=None,
    alpha_tensor: Optional[Tensor] = None,
    format: str = "nvfp4",
    scale_layout: str = "linear",
    backend: Optional[str] = None,
) -> None:
    """torch.ops.fp4gemm.grouped_gemm_out with defaults; writes the given C tensors."""
    al = _alpha_list(alpha)
    if al is not None and len(al) == 1 and len(a) != 1:
        al = al * len(a)
    torch.ops.fp4gemm.grouped_gemm_out(list(a), list(b), list(sfa), list(sfb), list(c), al, alpha_tensor, format,
                                       scale_layout, backend or "")


# ---- MoE grouped GEMM (fp4gemm.moe) ----------------------------------------------------------------
#
# The routing (expert_offsets, gather_index) is a tensor argument read by the kernels on the device,
# so a compiled graph or a captured CUDA graph serves every routing: only the number of rows (the
# output's shape) is static. The plan is cached on the weights (fp4gemm.moe.grouped_gemm).


def _moe_rows(a: Tensor, gather_index: Optional[Tensor]) -> int:
    return gather_index.shape[0] if gather_index is not None else a.shape[0]


def _moe_grouped_gemm_out_impl(a, a_scales, w, w_scales, expert_offsets, gather_index, out, alpha, alpha_tensor,
                               format, scale_layout):
    _C.moe_grouped_gemm(a, a_scales, w, w_scales, expert_offsets, gather_index, out, _alpha_arg(alpha, alpha_tensor),
                        format or None, scale_layout, out.dtype, None, None, 0)


def _moe_grouped_gemm_impl(a, a_scales, w, w_scales, expert_offsets, gather_index, alpha, alpha_tensor, format,
                           scale_layout, out_dtype):
    # (a.new_empty: 2.4 us of host time against 3.0 for torch.empty(..., device=a.device), H200 host)
    out = a.new_empty((_moe_rows(a, gather_index), w.shape[1]), dtype=out_dtype)
    _moe_grouped_gemm_out_impl(a, a_scales, w, w_scales, expert_offsets, gather_index, out, alpha, alpha_tensor,
                               format, scale_layout)
    return out


@_custom_op("fp4gemm::moe_grouped_gemm", mutates_args=())
def _moe_grouped_gemm(
    a: Tensor,
    a_scales: Optional[Tensor],
    w: Tensor,
    w_scales: Tensor,
    expert_offsets: Tensor,
    gather_index: Optional[Tensor],
    alpha: Optional[float],
    alpha_tensor: Optional[Tensor],
    format: str,
    scale_layout: str,
    out_dtype: torch.dtype,
) -> Tensor:
    return _moe_grouped_gemm_impl(a, a_scales, w, w_scales, expert_offsets, gather_index, alpha, alpha_tensor, format,
                                  scale_layout, out_dtype)


# moe_grouped_gemm's Python kernel under its own name: what its native CUDA kernel calls for linear
# scales and the arguments it does not take.
_python_twin("moe_grouped_gemm", _moe_grouped_gemm_impl)


@_moe_grouped_gemm.register_fake
def _moe_grouped_gemm_fake(a, a_scales, w, w_scales, expert_offsets, gather_index, alpha, alpha_tensor, format,
                           scale_layout, out_dtype):
    if a.dim() != 2 or w.dim() != 3:
        raise _C.ArgumentError(f"fp4gemm: a / w: expected a [rows, K/2 or K] and w [E, N, K/2], got {a.dim()}-D "
                               f"and {w.dim()}-D")
    return a.new_empty((_moe_rows(a, gather_index), w.shape[1]), dtype=out_dtype)


@_custom_op("fp4gemm::moe_grouped_gemm_out", mutates_args=("out",))
def _moe_grouped_gemm_out(
    a: Tensor,
    a_scales: Optional[Tensor],
    w: Tensor,
    w_scales: Tensor,
    expert_offsets: Tensor,
    gather_index: Optional[Tensor],
    out: Tensor,
    alpha: Optional[float],
    alpha_tensor: Optional[Tensor],
    format: str,
    scale_layout: str,
) -> None:
    _moe_grouped_gemm_out_impl(a, a_scales, w, w_scales, expert_offsets, gather_index, out, alpha, alpha_tensor,
                               format, scale_layout)


# moe_grouped_gemm_out's Python kernel under its own name (the version bump included): what its
# native CUDA kernel calls for linear scales and the arguments it does not take.
_python_twin("moe_grouped_gemm_out", _moe_grouped_gemm_out_impl)


@_moe_grouped_gemm_out.register_fake
def _moe_grouped_gemm_out_fake(a, a_scales, w, w_scales, expert_offsets, gather_index, out, alpha, alpha_tensor,
                               format, scale_layout):
    return None


def _plain_eager(*tensors) -> bool:
    """True for an eager call on plain tensors: not under torch.compile, torch.jit tracing, or any
    tensor subclass (FakeTensor, FunctionalTensor, proxies). The wrappers below then call the
    op's implementation directly: the dispatcher's custom-op path costs ~20 us of host time per
    call (H200 host: 35 us through torch.ops.fp4gemm against 15 us direct). Same kernels, same
    stream, same checks; graph capture works either way."""
    if torch.compiler.is_compiling() or torch._C._get_tracing_state() is not None:
        return False
    for t in tensors:  # (a loop: all() over a generator costs ~1 us more per call)
        if t is not None and type(t) is not Tensor:
            return False
    return True


def _moe_alpha(alpha):
    """(alpha, alpha_tensor) of a number or a per-expert float32 tensor."""
    if alpha is None or isinstance(alpha, (int, float)):
        return (None if alpha is None else float(alpha)), None
    return None, alpha


def moe_grouped_gemm(
    a: Tensor,
    a_scales: Optional[Tensor],
    w: Tensor,
    w_scales: Tensor,
    expert_offsets: Tensor,
    gather_index: Optional[Tensor] = None,
    alpha=None,
    format: Optional[str] = None,
    scale_layout: str = "blocked",
    out_dtype: torch.dtype = torch.bfloat16,
) -> Tensor:
    """torch.ops.fp4gemm.moe_grouped_gemm with defaults; returns a new ``out [rows, N]`` (rows past
    expert_offsets[E] uninitialised). See fp4gemm.moe.grouped_gemm."""
    al, al_t = _moe_alpha(alpha)
    if _NATIVE_MOE_GROUPED_GEMM is not None and a.is_cuda:  # the C++ kernel: the fastest path in every mode
        op = _NATIVE_MOE_GROUPED_GEMM
    else:
        eager = _plain_eager(a, a_scales, w, w_scales, expert_offsets, gather_index, al_t)
        op = _moe_grouped_gemm_impl if eager else torch.ops.fp4gemm.moe_grouped_gemm
    return op(a, a_scales, w, w_scales, expert_offsets, gather_index, al, al_t, format or "", scale_layout, out_dtype)


def moe_grouped_gemm_out(
    a: Tensor,
    a_scales: Optional[Tensor],
    w: Tensor,
    w_scales: Tensor,
    expert_offsets: Tensor,
    out: Tensor,
    gather_index: Optional[Tensor] = None,
    alpha=None,
    format: Optional[str] = None,
    scale_layout: str = "blocked",
) -> None:
    """torch.ops.fp4gemm.moe_grouped_gemm_out with defaults; writes the routed rows of ``out``."""
    al, al_t = _moe_alpha(alpha)
    if _NATIVE_MOE_GROUPED_GEMM_OUT is not None and a.is_cuda:  # the C++ kernel (bumps out's version)
        _NATIVE_MOE_GROUPED_GEMM_OUT(a, a_scales, w, w_scales, expert_offsets, gather_index, out, al, al_t,
                                     format or "", scale_layout)
        return
    eager = _plain_eager(a, a_scales, w, w_scales, expert_offsets, gather_index, out, al_t)
    op = _moe_grouped_gemm_out_impl if eager else torch.ops.fp4gemm.moe_grouped_gemm_out
    op(a, a_scales, w, w_scales, expert_offsets, gather_index, out, al, al_t, format or "", scale_layout)
    if eager:
        torch.autograd.graph.increment_version(out)  # as the op's mutates_args does


# ---- the whole expert layer ---------------------------------------------------------------------


def _bias_args(args):
    # the schema's last three arguments, the biases and the weight layout (a Python kernel is called
    # without the trailing arguments left at their defaults)
    return dict(w13_bias=args[16] if len(args) > 16 else None, w2_bias=args[17] if len(args) > 17 else None,
                weight_layout=args[18] if len(args) > 18 else "rows")


def _fused_experts_kernel(*args):
    # (looked up per call, not registered itself: torch's op registry outlives the module, and
    # the cache must go with it at interpreter exit)
    return _moe._cache(*args[:16], **_bias_args(args))


@_custom_op("fp4gemm::fused_experts", mutates_args=(), kernel=_fused_experts_kernel)
def _fused_experts(
    hidden_states: Tensor,
    w13: Tensor,
    w13_scale: Tensor,
    w2: Tensor,
    w2_scale: Tensor,
    topk_weights: Tensor,
    topk_ids: Tensor,
    w13_alpha: Optional[Tensor],
    w13_alpha_up: Optional[Tensor],
    w2_alpha: Optional[Tensor],
    activation: str,
    act_format: str,
    gate_up: str,
    scale_layout: str,
    a1_scale: float,
    a2_scale: float,
    w13_bias: Optional[Tensor] = None,
    w2_bias: Optional[Tensor] = None,
    weight_layout: str = "rows",
) -> Tensor:
    """(The schema. The kernel is fp4gemm.moe's C++ plan cache, called with these arguments in
    this order: gate_up "" means the activation's default layout.)"""
    raise AssertionError("not called")


def _fused_experts_python_kernel(*args):
    return _moe._cache(*args[:16], **_bias_args(args))


# fused_experts' Python kernel under its own name: what its native CUDA kernel calls when it has no
# plan for the arguments.
_python_twin("fused_experts", _fused_experts_python_kernel)


@_fused_experts.register_fake
def _fused_experts_fake(hidden_states, w13, w13_scale, w2, w2_scale, topk_weights, topk_ids, w13_alpha, w13_alpha_up,
                        w2_alpha, activation, act_format, gate_up, scale_layout, a1_scale, a2_scale, w13_bias=None,
                        w2_bias=None, weight_layout="rows"):
    if hidden_states.dim() != 2 or w13.dim() != (4 if weight_layout == "pieces" else 3):
        raise _C.ArgumentError("fp4gemm: hidden_states / w13: expected [T, H] and [E, 2I, H/2] (weights in pieces: "
                               "[E, 2I/16, ceil(H/128), 1024])")
    return hidden_states.new_empty(hidden_states.shape, dtype=torch.bfloat16)


def fused_experts(
    hidden_states: Tensor,
    w13: Tensor,
    w13_scale: Tensor,
    w2: Tensor,
    w2_scale: Tensor,
    topk_weights: Tensor,
    topk_ids: Tensor,
    activation: str = "silu",
    act_format: str = "nvfp4",
    gate_up: Optional[str] = None,
    scale_layout: str = "blocked",
    w13_alpha: Optional[Tensor] = None,
    w13_alpha_up: Optional[Tensor] = None,
    w2_alpha: Optional[Tensor] = None,
    a1_scale: float = 1.0,
    a2_scale: float = 1.0,
    w13_bias: Optional[Tensor] = None,
    w2_bias: Optional[Tensor] = None,
    weight_layout: str = "rows",
) -> Tensor:
    """torch.ops.fp4gemm.fused_experts with defaults (CUDA tensors call the op's C++ kernel where
    registered, see native_status(); else plain eager tensors call the implementation directly);
    see fp4gemm.moe.fused_experts (``weight_layout="pieces"``: w13 / w2 packed by fp4gemm.moe.pack_pieces)."""
    if _NATIVE_FUSED_EXPERTS is not None and hidden_states.is_cuda:  # the C++ kernel: fastest in every mode
        return _NATIVE_FUSED_EXPERTS(hidden_states, w13, w13_scale, w2, w2_scale, topk_weights, topk_ids, w13_alpha,
                                     w13_alpha_up, w2_alpha, activation, act_format, gate_up or "", scale_layout,
                                     float(a1_scale), float(a2_scale), w13_bias, w2_bias, weight_layout)
    # _plain_eager, spelled out (a generator over 10 tensors costs ~1.5 us per call)
    eager = (type(hidden_states) is Tensor and type(w13) is Tensor and type(w13_scale) is Tensor
             and type(w2) is Tensor and type(w2_scale) is Tensor and type(topk_weights) is Tensor
             and type(topk_ids) is Tensor and (w13_alpha is None or type(w13_alpha) is Tensor)
             and (w13_alpha_up is None or type(w13_alpha_up) is Tensor)
             and (w2_alpha is None or type(w2_alpha) is Tensor)
             and (w13_bias is None or type(w13_bias) is Tensor) and (w2_bias is None or type(w2_bias) is Tensor)
             and not torch.compiler.is_compiling() and torch._C._get_tracing_state() is None)
    if eager:
        return _moe._cache(hidden_states, w13, w13_scale, w2, w2_scale, topk_weights, topk_ids, w13_alpha, w13_alpha_up,
                           w2_alpha, activation, act_format, gate_up or "", scale_layout, float(a1_scale),
                           float(a2_scale), w13_bias=w13_bias, w2_bias=w2_bias, weight_layout=weight_layout)
    return torch.ops.fp4gemm.fused_experts(hidden_states, w13, w13_scale, w2, w2_scale, topk_weights, topk_ids,
                                           w13_alpha, w13_alpha_up, w2_alpha, activation, act_format, gate_up or "",
                                           scale_layout, float(a1_scale), float(a2_scale), w13_bias, w2_bias,
                                           weight_layout)


# ---- native (C++) kernels through torch's stable C ABI ------------------------------------------


def _register_native() -> dict:
    import os

    try:
        return _C._register_torch_native(os.path.join(os.path.dirname(torch.__file__), "lib"), _moe._cache)
    except Exception as e:  # noqa: BLE001 -- the Python kernels stay; native_status() says why
        return {op: f"{type(e).__name__}: {e}"
                for op in ("fused_experts", "moe_grouped_gemm", "moe_grouped_gemm_out", "grouped_gemm", "grouped_gemm_out")}


_NATIVE_STATUS = _register_native()
# The ops whose C++ kernel the wrappers above call on CUDA tensors (None: not registered).
_NATIVE_FUSED_EXPERTS = torch.ops.fp4gemm.fused_experts.default if _NATIVE_STATUS.get("fused_experts") == "" else None
_NATIVE_MOE_GROUPED_GEMM = (torch.ops.fp4gemm.moe_grouped_gemm.default
                            if _NATIVE_STATUS.get("moe_grouped_gemm") == "" else None)
_NATIVE_MOE_GROUPED_GEMM_OUT = (torch.ops.fp4gemm.moe_grouped_gemm_out.default
                                if _NATIVE_STATUS.get("moe_grouped_gemm_out") == "" else None)


def native_status() -> dict:
    """Which torch.ops.fp4gemm ops run a C++ kernel on CUDA tensors (registered through torch's
    stable C ABI, torch >= 2.10) instead of their Python kernel, and why not where they do not:
    ``{"fused_experts": "", "moe_grouped_gemm": "", ...}`` (registered: every torch.ops.fp4gemm op
    has one) or the reason per op ("torch exports no ...")."""
    return dict(_NATIVE_STATUS)

