"""fp4gemm: block-scaled FP4 (NVFP4 / MXFP4) grouped GEMM for Hopper.

Group g computes ``C_g[M_g, N_g] = alpha_g * dq(A_g) @ dq(B_g).T`` where A_g, B_g hold packed e2m1
(two values per byte, even k in the low nibble) and per-block scales (E4M3 per 16 for NVFP4,
UE8M0 per 32 for MXFP4). Arrays come from any DLPack producer: CUDA tensors from PyTorch, CuPy
or JAX run on the GPU; NumPy arrays run the exact CPU reference.

Main entry points: :func:`grouped_gemm`, :class:`GroupedGemm`, :class:`DualGemm` (the SwiGLU dual
GEMM), :mod:`fp4gemm.gpumode`,
:mod:`fp4gemm.moe` (the device-driven MoE grouped GEMM: expert offsets on the device),
:mod:`fp4gemm.ops` (torch custom ops, registered when torch is importable), the format helpers
(:func:`quantize`, :func:`dequantize`, :func:`linear_to_blocked`, ...) and
``python -m fp4gemm.bench``.
"""

from __future__ import annotations

import importlib.util as _importlib_util
import os as _os

from . import _fp4gemm as _C
from ._fp4gemm import (  # noqa: F401  (re-exported)
    ArgumentError,
    DeviceError,
    DualGemm,
    GroupedGemm,
    clear_plan_cache,
    device_count,
    device_info,
    get_default_backend,
    plan_cache_info,
    set_default_backend,
    set_plan_cache_capacity,
    set_plan_cache_max_bytes,
)
from . import gpumode  # noqa: F401  (no torch import at module level)
from . import moe  # noqa: F401  (no torch import at module level)
from .api import dual_gemm, grouped_gemm, reference_grouped_gemm  # noqa: F401
from .formats import (  # noqa: F401
    blocked_to_linear,
    decode_e2m1,
    decode_scales,
    dequantize,
    encode_e2m1,
    encode_scales,
    linear_to_blocked,
    pack_fp4,
    quantize,
    scale_block_size,
    scale_bytes,
    unpack_fp4,
)

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "DeviceError",
    "DualGemm",
    "GroupedGemm",
    "blocked_to_linear",
    "clear_plan_cache",
    "decode_e2m1",
    "decode_scales",
    "dequantize",
    "device_count",
    "device_info",
    "encode_e2m1",
    "encode_scales",
    "get_default_backend",
    "dual_gemm",
    "grouped_gemm",
    "linear_to_blocked",
    "pack_fp4",
    "plan_cache_info",
    "quantize",
    "reference_grouped_gemm",
    "scale_block_size",
    "scale_bytes",
    "set_default_backend",
    "set_plan_cache_capacity",
    "set_plan_cache_max_bytes",
    "unpack_fp4",
]

if _os.environ.get("FP4GEMM_BACKEND"):
    set_default_backend(_os.environ["FP4GEMM_BACKEND"])

# The torch custom op (fp4gemm::grouped_gemm) is registered whenever torch is importable, so that
# torch.ops.fp4gemm.* exists as soon as fp4gemm is imported. FP4GEMM_NO_TORCH=1 skips it.
if not _os.environ.get("FP4GEMM_NO_TORCH") and _importlib_util.find_spec("torch") is not None:
    from . import ops  # noqa: F401
