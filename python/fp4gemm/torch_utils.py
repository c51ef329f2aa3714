"""torch helpers (GPU or CPU tensors): dequantise, scale layouts, GPU MODE-style data.

Used by the GPU tests and the benchmark; independent of the C++ library, so they also serve as
a second opinion on it.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
FLOAT4_X2 = getattr(torch, "float4_e2m1fn_x2", None)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The same memory as uint8 (packed FP4, float8 scales)."""
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """[rows, K/2] bytes -> [rows, K] nibbles (int64), even k in the low nibble."""
    p = as_bytes(packed)
    return torch.stack([p & 0xF, p >> 4], dim=-1).reshape(p.shape[0], -1).long()


def decode_scales(codes: torch.Tensor, format: str = "nvfp4") -> torch.Tensor:
    """Scale codes -> float32: E4M3 (nvfp4) or UE8M0 (mxfp4, 0xFF is NaN)."""
    c = as_bytes(codes)
    if format == "nvfp4":
        return c.view(torch.float8_e4m3fn).float()
    v = torch.exp2(c.float() - 127.0)
    return torch.where(c == 0xFF, torch.full_like(v, float("nan")), v)


def blocked_to_linear(blocked: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Blocked-layout scales (flat, in memory order) -> linear [rows, cols]."""
    rest_r, rest_c = (rows + 127) // 128, (cols + 3) // 4
    atoms = as_bytes(blocked).reshape(rest_r, rest_c, 32, 4, 4)  # (row block, col block, r%32, (r%128)/32, c%4)
    return atoms.permute(0, 3, 2, 1, 4).reshape(rest_r * 128, rest_c * 4)[:rows, :cols]


def linear_to_blocked(linear: torch.Tensor, pad_value: int = 0) -> torch.Tensor:
    """Linear [rows, cols] scales -> the blocked layout, flat (padding = pad_value)."""
    lin = as_bytes(linear)
    rows, cols = lin.shape
    rest_r, rest_c = (rows + 127) // 128, (cols + 3) // 4
    padded = torch.full((rest_r * 128, rest_c * 4), pad_value, dtype=torch.uint8, device=lin.device)
    padded[:rows, :cols] = lin
    atoms = padded.reshape(rest_r, 4, 32, rest_c, 4).permute(0, 3, 2, 1, 4)
    return atoms.contiguous().reshape(-1)


def blocked_view(blocked_flat: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """GPU MODE's (32, 4, rest_rows, 4, rest_cols, 1) permuted view of flat blocked scales."""
    rest_r, rest_c = (rows + 127) // 128, (cols + 3) // 4
    return blocked_flat.reshape(1, rest_r, rest_c, 32, 4, 4).permute(3, 4, 1, 5, 2, 0)


def blocked_flat(view: torch.Tensor) -> torch.Tensor:
    """Inverse of blocked_view (no copy for such a view)."""
    if view.dim() == 5:
        view = view.unsqueeze(-1)
    return view.permute(5, 2, 4, 0, 1, 3).reshape(-1)


def dequantize(
    packed: torch.Tensor,
    scales: torch.Tensor,
    format: str = "nvfp4",
    scale_layout: str = "linear",
) -> torch.Tensor:
    """Exact float32 [rows, K] of packed FP4 [rows, K/2] ([rows, K/2, 1] accepted)."""
    if packed.dim() == 3:
        packed = packed[:, :, 0]
    rows, k = packed.shape[0], 2 * packed.shape[1]
    vec = 16 if format == "nvfp4" else 32
    cols = k // vec
    if scale_layout == "linear":
        s = as_bytes(scales).reshape(rows, cols)
    else:
        s = blocked_to_linear(blocked_flat(scales) if scales.dim() >= 5 else scales, rows, cols)
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=packed.device)
    values = table[unpack_fp4(packed)]
    return values * decode_scales(s.to(packed.device), format).repeat_interleave(vec, dim=1)


def reference_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    sfa: torch.Tensor,
    sfb: torch.Tensor,
    format: str = "nvfp4",
    scale_layout: str = "linear",
    alpha: float = 1.0,
    out_dtype: torch.dtype = torch.float16,
) -> torch.Tensor:
    """alpha * dq(A) @ dq(B).T in float64 on the tensors' device, rounded once to out_dtype."""
    da = dequantize(a, sfa, format, scale_layout).double()
    db = dequantize(b, sfb, format, scale_layout).double()
    return ((da @ db.T) * float(alpha)).to(out_dtype)


# ---- GPU MODE nvfp4_group_gemm-style inputs -----------------------------------------------------

def _gpumode_fp4(rows: int, k: int, gen: torch.Generator, device) -> torch.Tensor:
    # [l=1, rows, K/2] bytes keeping each nibble's sign and two low bits ({0, +-0.5, +-1, +-1.5}),
    # permuted to [rows, K/2, l] as GPU MODE does.
    raw = torch.randint(0, 256, (1, rows, k // 2), dtype=torch.uint8, generator=gen, device="cpu") & 0b1011_1011
    t = raw.to(device).permute(1, 2, 0)
    return t.view(FLOAT4_X2) if FLOAT4_X2 is not None else t


def _gpumode_scales(rows: int, cols: int, gen: torch.Generator) -> torch.Tensor:
    codes = torch.randint(1, 3, (1, rows, cols), dtype=torch.int8, generator=gen)  # 1 or 2
    return codes.to(torch.float8_e4m3fn).permute(1, 2, 0)  # [rows, cols, l] on the CPU


def _gpumode_reordered(linear: torch.Tensor, gen: torch.Generator, device) -> torch.Tensor:
    # Padding positions hold random scales (1 or 2) too, as in GPU MODE's generator.
    rows, cols = linear.shape[0], linear.shape[1]
    rest_r, rest_c = (rows + 127) // 128, (cols + 3) // 4
    padded = torch.randint(1, 3, (rest_r * 128, rest_c * 4), dtype=torch.int8, generator=gen)
    padded = padded.to(torch.float8_e4m3fn).view(torch.uint8)
    padded[:rows, :cols] = linear[:, :, 0].view(torch.uint8)
    flat = padded.reshape(rest_r, 4, 32, rest_c, 4).permute(0, 3, 2, 1, 4).contiguous().reshape(-1)
    return blocked_view(flat.to(device), rows, cols).view(torch.float8_e4m3fn)


def gpumode_input(
    ms: Sequence[int], ns: Sequence[int], ks: Sequence[int], seed: int = 1111, device="cuda"
) -> Tuple[list, list, list, list]:
    """Data shaped exactly like GPU MODE's nvfp4_group_gemm generate_input (l = 1):

    (abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes) with
    a [m, k/2, 1] / b [n, k/2, 1] float4_e2m1fn_x2, c [m, n, 1] float16 (random), sfa [m, k/16, 1]
    / sfb float8_e4m3fn on the CPU, and the reordered (32, 4, rest, 4, rest_k, 1) views on `device`.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    abc, sf, sf_re, sizes = [], [], [], []
    for m, n, k in zip(ms, ns, ks):
        a = _gpumode_fp4(m, k, gen, device)
        b = _gpumode_fp4(n, k, gen, device)
        c = torch.randn((1, m, n), generator=gen).to(torch.float16).to(device).permute(1, 2, 0)
        sfa = _gpumode_scales(m, k // 16, gen)
        sfb = _gpumode_scales(n, k // 16, gen)
        abc.append((a, b, c))
        sf.append((sfa, sfb))
        sf_re.append((_gpumode_reordered(sfa, gen, device), _gpumode_reordered(sfb, gen, device)))
        sizes.append((m, n, k, 1))
    return abc, sf, sf_re, sizes


def gpumode_reference(data) -> List[torch.Tensor]:
    """Dequantise-then-matmul (float64) of GPU MODE data, rounded once to float16: [m, n, 1] each."""
    abc, sf, _, sizes = data
    out = []
    for (a, b, _c), (sfa, sfb), _size in zip(abc, sf, sizes):
        dev = a.device
        r = reference_matmul(a, b, sfa[:, :, 0].to(dev), sfb[:, :, 0].to(dev), "nvfp4", "linear")
        out.append(r.unsqueeze(-1))
    return out


def clone_data(data):
    """GPU MODE's _clone_data: clone every tensor (keeping strides), recursively."""
    if isinstance(data, tuple):
        return tuple(clone_data(x) for x in data)
    if isinstance(data, list):
        return [clone_data(x) for x in data]
    if isinstance(data, torch.Tensor):
        return data.clone()
    return data


def flatten_groups(data) -> Tuple[list, list, list, list, list]:
    """(a, b, sfa_reordered, sfb_reordered, c) lists of GPU MODE data."""
    abc, _, sf_re, _ = data
    return ([x[0] for x in abc], [x[1] for x in abc], [s[0] for s in sf_re], [s[1] for s in sf_re],
            [x[2] for x in abc])


def l2_flush_buffer(device=None, megabytes: Optional[int] = None) -> torch.Tensor:
    """A buffer larger than the L2 (4x), to be overwritten between timed repetitions."""
    if megabytes is None:
        props = torch.cuda.get_device_properties(device)
        megabytes = max(64, 4 * props.L2_cache_size // (1 << 20))
    return torch.empty(megabytes << 20, dtype=torch.uint8, device=device)
