"""torch custom ops: ``torch.ops.fp4gemm.grouped_gemm`` and ``torch.ops.fp4gemm.grouped_gemm_out``.

Registered through torch.library with fake (meta) implementations, so they trace under
``torch.compile(fullgraph=True)`` and can be captured in CUDA graphs (the binding builds plans
outside the graph — also when first seen during a capture — and keeps plans used by a captured
graph alive). Both run on the stream torch considers current.

    c = fp4gemm.ops.grouped_gemm(a, b, sfa, sfb, scale_layout="blocked")      # allocates C
    fp4gemm.ops.grouped_gemm_out(a, b, sfa, sfb, c, scale_layout="blocked")   # writes C

Packed FP4 may be uint8 or float4_e2m1fn_x2, scales uint8 / float8_e4m3fn / float8_e8m0fnu.
`alpha` is a list of floats (baked into the graph) or, via `alpha_tensor`, a float32 CUDA
tensor of one value per group read at run time.
"""

# No `from __future__ import annotations`: torch.library infers the op schemas from live annotations.
from typing import List, Optional, Sequence

import torch

from . import _fp4gemm as _C

Tensor = torch.Tensor


def _out_shape(a: Tensor, b: Tensor) -> List[int]:
    return [a.shape[0], b.shape[0], 1] if a.dim() == 3 else [a.shape[0], b.shape[0]]


def _alpha_arg(alpha: Optional[List[float]], alpha_tensor: Optional[Tensor]):
    if alpha_tensor is not None:
        if alpha is not None:
            raise _C.ArgumentError("fp4gemm: alpha: pass either alpha or alpha_tensor, not both")
        return alpha_tensor
    return alpha


@torch.library.custom_op("fp4gemm::grouped_gemm", mutates_args=())
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
    c = [torch.empty(_out_shape(x, y), dtype=out_dtype, device=x.device) for x, y in zip(a, b)]
    _C.grouped_gemm(a, b, sfa, sfb, c, _alpha_arg(alpha, alpha_tensor), format, scale_layout, out_dtype,
                    backend or None, None, 0)
    return c


@_grouped_gemm.register_fake
def _grouped_gemm_fake(a, b, sfa, sfb, alpha, alpha_tensor, format, scale_layout, out_dtype, backend):
    if len(a) != len(b):
        raise _C.ArgumentError(f"fp4gemm: b: has {len(b)} entries but a has {len(a)}")
    return [x.new_empty(_out_shape(x, y), dtype=out_dtype) for x, y in zip(a, b)]


@torch.library.custom_op("fp4gemm::grouped_gemm_out", mutates_args=("c",))
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
    out_dtype = c[0].dtype if len(c) else torch.float16
    _C.grouped_gemm(a, b, sfa, sfb, c, _alpha_arg(alpha, alpha_tensor), format, scale_layout, out_dtype,
                    backend or None, None, 0)


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
