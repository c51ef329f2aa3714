"""grouped_gemm: the pointer-array grouped GEMM over lists of DLPack arrays."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from . import _fp4gemm as _C

_OUT_NAMES = {
    "float16": "float16", "f16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "f32": "float32", "fp32": "float32", "float": "float32",
}


def _argument_error(argument: str, message: str, group: int = -1) -> _C.ArgumentError:
    err = _C.ArgumentError(f"fp4gemm: {argument}: {message}")
    err.argument = argument
    err.group = group
    return err


def out_dtype_name(out_dtype: Any) -> str:
    """'float16' / 'bfloat16' / 'float32' for a name, a torch dtype or a NumPy dtype."""
    if isinstance(out_dtype, str):
        text = out_dtype
    elif isinstance(out_dtype, type):
        text = out_dtype.__name__
    else:
        text = str(out_dtype)
    text = text.lower().removeprefix("torch.")
    try:
        return _OUT_NAMES[text]
    except KeyError:
        raise _argument_error("out_dtype", f"must be 'float16', 'bfloat16' or 'float32', got {out_dtype!r}") from None


def _numpy_dtype(name: str):
    import numpy as np

    if name == "bfloat16":
        try:
            import ml_dtypes

            return ml_dtypes.bfloat16
        except ImportError:
            return np.uint16  # raw bf16 bits
    return np.dtype(name)


def empty_like_framework(like: Any, shape: tuple, out_dtype: Any = "float16", argument: str = "c"):
    """An empty array of `shape` and out_dtype on the framework (torch, NumPy, CuPy) and device of
    `like`. bfloat16 without a native type is raw uint16 bits (NumPy without ml_dtypes, CuPy)."""
    name = out_dtype_name(out_dtype)
    module = type(like).__module__.split(".")[0]
    if module == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, name), device=like.device)
    if module == "numpy":
        import numpy as np

        return np.empty(shape, dtype=_numpy_dtype(name))
    if module == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype="uint16" if name == "bfloat16" else name)
    raise _argument_error(argument, f"cannot allocate outputs for {type(like).__name__} arrays; pass {argument}")


def allocate_outputs(a: Sequence[Any], b: Sequence[Any], out_dtype: Any = "float16") -> list:
    """Empty outputs [M_g, N_g] (or [M_g, N_g, 1] when A_g is 3-D) on the framework and device of a[0]."""
    name = out_dtype_name(out_dtype)
    if len(a) != len(b):
        raise _argument_error("b", f"has {len(b)} entries but a has {len(a)}; every list needs one entry per group")
    if len(a) == 0:
        return []

    def shape(x, y):
        s = (x.shape[0], y.shape[0])
        return s + (1,) if len(x.shape) == 3 else s

    return [empty_like_framework(a[0], shape(x, y), name) for x, y in zip(a, b)]


def grouped_gemm(
    a: Sequence[Any],
    b: Sequence[Any],
    sfa: Sequence[Any],
    sfb: Sequence[Any],
    c: Optional[Sequence[Any]] = None,
    alpha: Any = None,
    format: str = "nvfp4",
    scale_layout: str = "linear",
    out_dtype: Any = "float16",
    backend: Optional[str] = None,
    stream: Any = None,
) -> list:
    """C_g = alpha_g * dq(A_g) @ dq(B_g).T for every group g; returns the list of C.

    a[g]: packed e2m1 [M_g, K_g/2] (uint8 or torch.float4_e2m1fn_x2), K-contiguous; a trailing
        dimension of 1 ([M, K/2, 1], GPU MODE's ``l``) is accepted.
    b[g]: packed e2m1 [N_g, K_g/2], same rules.
    sfa[g], sfb[g]: scales of A (M_g rows) and B (N_g rows), uint8 or float8_e4m3fn (nvfp4) /
        float8_e8m0fnu (mxfp4). scale_layout='linear': [rows, K/vec] row-major;
        'blocked': the cuBLASLt / GPU MODE "reordered" layout, flat, [pad128(rows), pad4(K/vec)]
        or GPU MODE's permuted (32, 4, rest_m, 4, rest_k, l) view.
    c: outputs [M_g, N_g] of out_dtype (row stride a multiple of 8); allocated when None.
    alpha: None, a number, one number per group, or a float32 device array of G values read
        at run time (graph-friendly).
    backend: 'auto' (the fast kernel; fails clearly where there is none), 'fast', 'reference'
        (the slow GPU reference kernel); None uses fp4gemm.get_default_backend(). Host (NumPy)
        arrays always run the exact CPU reference.
    stream: None (the framework's current stream: torch / CuPy), an int cudaStream_t, or a
        stream object (torch.cuda.Stream, cupy.cuda.Stream, __cuda_stream__).

    Plans are cached (LRU) on shapes, strides, pointers, alpha, options and device, so a repeated
    call only enqueues the kernel. Raises ArgumentError (ValueError) for bad arguments and
    DeviceError (RuntimeError) for CUDA failures or a missing backend, with the library's message.
    """
    if c is None:
        c = allocate_outputs(a, b, out_dtype)
    _C.grouped_gemm(a, b, sfa, sfb, c, alpha, format, scale_layout, out_dtype, backend, stream, 0)
    return c


def dual_gemm(
    a: Sequence[Any],
    b1: Sequence[Any],
    b2: Sequence[Any],
    sfa: Sequence[Any],
    sfb1: Sequence[Any],
    sfb2: Sequence[Any],
    c: Optional[Sequence[Any]] = None,
    format: str = "nvfp4",
    scale_layout: str = "linear",
    out_dtype: Any = "float16",
    activation: str = "silu",
    swiglu_alpha: float = _C.SWIGLU_ALPHA,
    swiglu_limit: float = _C.SWIGLU_LIMIT,
    stream: Any = None,
) -> list:
    """C_g = act(dq(A_g) @ dq(B1_g).T, dq(A_g) @ dq(B2_g).T) for every group g in one call (SwiGLU:
    ``activation='silu'``, silu(gate) * up; gpt-oss: 'swigluoai'); returns the list of C.

    The arrays follow :func:`grouped_gemm`'s rules (b1 / b2 and sfb1 / sfb2 like b / sfb, sharing
    one row stride per group). Like :func:`grouped_gemm` the call goes through the library's call
    memo (the same tensor objects in the same state: no argument is read again) and plan cache, so
    a repeated call only enqueues the kernel; every run reads the scales as they are then.
    :class:`DualGemm` binds a plan to its arrays once instead (per-group alphas, device alphas).
    Host (NumPy) arrays run the exact CPU reference.
    """
    if c is None:
        c = allocate_outputs(a, b1, out_dtype)
    _C.dual_gemm(a, b1, b2, sfa, sfb1, sfb2, c, format, scale_layout, out_dtype, activation, float(swiglu_alpha),
                 float(swiglu_limit), stream, 0)
    return c


def reference_grouped_gemm(
    a: Sequence[Any],
    b: Sequence[Any],
    sfa: Sequence[Any],
    sfb: Sequence[Any],
    c: Optional[Sequence[Any]] = None,
    alpha: Any = None,
    format: str = "nvfp4",
    scale_layout: str = "linear",
    out_dtype: Any = "float16",
    threads: int = 0,
) -> list:
    """grouped_gemm with backend='reference'.

    On host arrays (NumPy) this is the exact CPU reference: exact dequantisation, float64
    accumulation, alpha in float64, one rounding to out_dtype; `threads` <= 0 uses every core.
    On CUDA arrays it runs the (slow) GPU reference kernel.
    """
    if c is None:
        c = allocate_outputs(a, b, out_dtype)
    _C.grouped_gemm(a, b, sfa, sfb, c, alpha, format, scale_layout, out_dtype, "reference", None, threads)
    return c
