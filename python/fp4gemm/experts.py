"""MoE expert weights from checkpoints: NVIDIA ModelOpt NVFP4 and gpt-oss-style MXFP4.

:class:`ExpertWeights` holds one MoE layer's experts in the layout fp4gemm's MoE GEMM takes:
gate and up stacked as one weight ``w13 [E, 2I, H/2]`` (vLLM's w13: rows ``0..I-1`` gate,
``I..2I-1`` up; gpt-oss keeps its own interleaved order, see :meth:`ExpertWeights.from_mxfp4`),
the down projection ``w2 [E, H, I/2]``, and their scales converted once, at load, to the blocked
layout (``[E, blocked bytes]``, one flat blocked array per expert). NVFP4 keeps the per-tensor
FP32 scales of NVIDIA's recipe beside them (they fold into the GEMMs' alpha). The arrays stay
in the framework they came in (NumPy from ``safetensors.numpy``, torch from
``safetensors.torch`` — the scale conversion goes through the host either way, once). FP8 scale
tensors (ModelOpt's ``F8_E4M3``, gpt-oss's UE8M0 as ``U8``) are read as their byte codes; note
that ``safetensors.numpy`` cannot load ``F8_E4M3`` tensors: use ``safetensors.torch``.

Loading only rearranges bytes: every weight nibble and scale code is the checkpoint's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Dict, Mapping, Optional

import numpy as np

from . import formats
from .api import _argument_error as _err

__all__ = ["ExpertWeights"]


def _np(x: Any) -> np.ndarray:
    """A host NumPy view of a checkpoint tensor (torch tensors through .cpu(); float8 as bytes)."""
    if type(x).__module__.split(".")[0] == "torch":
        import torch

        if x.dtype in (torch.float8_e4m3fn, getattr(torch, "float8_e8m0fnu", None)):
            x = x.view(torch.uint8)
        elif x.dtype == torch.bfloat16:  # (gpt-oss's biases; NumPy has no bf16: exact in float32)
            x = x.float()
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _get(sd: Mapping[str, Any], key: str) -> Any:
    if key not in sd:
        raise _err("state_dict", f"has no tensor {key!r}")
    return sd[key]


def _scalar(sd: Mapping[str, Any], key: str) -> float:
    v = _np(_get(sd, key)).astype(np.float32).reshape(-1)
    if v.size != 1:
        raise _err("state_dict", f"{key!r} must hold one value (a per-tensor FP32 scale), got {v.size}")
    return float(v[0])


def _blocked_per_expert(linear: np.ndarray, argument: str) -> np.ndarray:
    """[E, rows, cols] linear scale codes -> [E, blocked bytes] (the library's blocked layout)."""
    if linear.ndim != 3:
        raise _err(argument, f"expected [experts, rows, K/vec] scales, got shape {tuple(linear.shape)}")
    return np.stack([formats.linear_to_blocked(formats._u8(linear[e])) for e in range(linear.shape[0])])


def _column(x: Any, j: int) -> Any:
    """Column j of a 2-D array, contiguous, in x's framework."""
    if type(x).__module__ == "torch":
        return x[:, j].contiguous()
    return np.ascontiguousarray(np.asarray(x)[:, j])


def _like(x: Any, like: Any):
    """`x` (NumPy) in the framework and on the device of `like`."""
    if type(like).__module__.split(".")[0] == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(x)).to(like.device)
    return x


@dataclass
class ExpertWeights:
    """One MoE layer's expert weights in fp4gemm's layout (see the module docstring).

    format: "nvfp4" or "mxfp4". w13: ``[E, 2I, H/2]`` packed e2m1; w13_scales: ``[E, blocked]``
    uint8 (blocked layout of ``2I`` rows x ``H/vec`` columns); w2 / w2_scales: the same for
    ``[E, H, I/2]``. NVFP4 only: ``w13_global`` ``[E, 2]`` float32 (weight_scale_2 of gate and up:
    ModelOpt stores one per linear, and they may differ), ``w2_global`` ``[E]``, and the
    activations' per-tensor ``input_scale`` of the two GEMMs (``w13_input_scale``,
    ``w2_input_scale``; ``[E]``, NaN where the checkpoint has none). MXFP4 (gpt-oss): optional
    biases ``w13_bias [E, 2I]`` and ``w2_bias [E, H]`` (float32), and ``interleaved`` True: w13's
    rows alternate gate, up (gpt-oss's order, the ``swigluoai`` activation's). ``weight_layout``:
    "rows" as loaded, or "pieces" after :meth:`pack_pieces` (w13 and w2 then in the kernels' read order).
    """

    format: str
    experts: int
    hidden: int
    intermediate: int
    w13: Any
    w13_scales: Any
    w2: Any
    w2_scales: Any
    w13_global: Optional[Any] = None
    w2_global: Optional[Any] = None
    w13_input_scale: Optional[Any] = None
    w2_input_scale: Optional[Any] = None
    w13_bias: Optional[Any] = None
    w2_bias: Optional[Any] = None
    interleaved: bool = False
    source: Dict[str, str] = field(default_factory=dict)
    weight_layout: str = "rows"

    def pack_pieces(self) -> "ExpertWeights":
        """These weights with w13 and w2 packed once into the order the kernels read them
        (``fp4gemm.moe.pack_pieces``; w13 with its gate / up order): a new ExpertWeights, ``weight_layout``
        "pieces", whose :meth:`layer` runs on them (W4A16 layer suite: median 6 % faster than rows, up to 15 %; H200, docs/PERF.md).
        MXFP4 and NVFP4 weights (every layer) on CUDA torch tensors; the scales, globals and biases
        are shared with this one. After changing the rows in place, pack them again into the new arrays:
        ``moe.pack_pieces(rows_w13, gate_up, format=weights.format, out=packed.w13)``.
        """
        if self.weight_layout != "rows":
            raise _err("weight_layout", f"these weights are already in {self.weight_layout!r}")
        if not (type(self.w13).__module__.split(".")[0] == "torch" and self.w13.is_cuda):
            raise _err("w13", "pack_pieces packs CUDA torch tensors on their device (load the checkpoint with "
                              "safetensors.torch and move it to the GPU first)")
        from .moe import pack_pieces

        gate_up = "interleaved" if self.interleaved else "stacked"
        f = self.format
        return replace(self, w13=pack_pieces(self.w13, gate_up, format=f), w2=pack_pieces(self.w2, format=f),
                       weight_layout="pieces")

    # ---- the layer ----------------------------------------------------------------------------

    def layer(self, *, max_tokens: int, topk: int, act_format: Optional[str] = None, **options: Any):
        """The whole expert layer planned for these weights: ``fp4gemm.moe.MoeLayer``, with what the
        checkpoint says filled in (any of it can be overridden through ``options``).

        MXFP4 (gpt-oss): W4A16 by default (``act_format="bf16"``; ``"mxfp4"`` for W4A4); gate and up
        interleaved with the ``swigluoai`` activation when ``interleaved``, else stacked with
        ``silu``; the biases when present. NVFP4 (ModelOpt): W4A4 (``"nvfp4"``); ``w13_global``'s
        gate and up columns and ``w2_global`` as the per-expert alphas; the activations' global
        scales ``a1_scale`` / ``a2_scale`` from the experts' ``input_scale`` (their maximum, the
        value every expert's tokens share; an ArgumentError naming it when the checkpoint has none
        and ``options`` gives none). The arrays stay on their device (CUDA: the layer plans there;
        NumPy: the host reference).
        """
        from .moe import MoeLayer

        kw = dict(options)
        kw.setdefault("weight_layout", self.weight_layout)
        if self.format == "mxfp4":
            act_format = act_format or "bf16"
            kw.setdefault("activation", "swigluoai" if self.interleaved else "silu")
            kw.setdefault("gate_up", "interleaved" if self.interleaved else "stacked")
            if self.w13_bias is not None:
                kw.setdefault("w13_bias", self.w13_bias)
            if self.w2_bias is not None:
                kw.setdefault("w2_bias", self.w2_bias)
        else:
            act_format = act_format or "nvfp4"
            kw.setdefault("gate_up", "interleaved" if self.interleaved else "stacked")
            if self.w13_global is not None:
                kw.setdefault("w13_alpha", _column(self.w13_global, 0))
                kw.setdefault("w13_alpha_up", _column(self.w13_global, 1))
            if self.w2_global is not None:
                kw.setdefault("w2_alpha", self.w2_global)
            if act_format == "nvfp4":
                for name, scales, key in (("w13_input_scale", self.w13_input_scale, "a1_scale"),
                                          ("w2_input_scale", self.w2_input_scale, "a2_scale")):
                    if key in kw:
                        continue
                    v = np.asarray(_np(scales), dtype=np.float32) if scales is not None else np.array([np.nan])
                    if not np.isfinite(v).any():
                        raise _err(name, f"the checkpoint has no input_scale for W4A4 NVFP4; pass {key}=")
                    kw[key] = float(np.nanmax(v))
        return MoeLayer(self.w13, self.w13_scales, self.w2, self.w2_scales, max_tokens=max_tokens, topk=topk,
                        act_format=act_format, scale_layout="blocked", **kw)

    # ---- NVIDIA ModelOpt NVFP4 ---------------------------------------------------------------

    @classmethod
    def from_modelopt(cls, state_dict: Mapping[str, Any], prefix: str, experts: Optional[int] = None) -> "ExpertWeights":
        """An NVFP4 MoE layer in NVIDIA ModelOpt's convention.

        Per expert e, under ``{prefix}experts.{e}.``: ``{name}.weight`` uint8 ``[N, K/2]`` (two e2m1
        per byte, the lower K index in the low nibble), ``{name}.weight_scale`` E4M3 ``[N, K/16]``
        (float8_e4m3fn or uint8 codes), ``{name}.weight_scale_2`` FP32 (one value) and optionally
        ``{name}.input_scale`` FP32 (one value). Gate / up / down are named ``w1`` / ``w3`` /
        ``w2`` (Mixtral), ``gate_proj`` / ``up_proj`` / ``down_proj`` (DeepSeek, Qwen), or gate
        and up fused as ``gate_up_proj`` (rows gate then up; then w13_global holds its one
        weight_scale_2 twice). `prefix` is the layer's, e.g. ``"model.layers.3.mlp."``; `experts`
        None counts them from the keys.
        """
        p = prefix
        if experts is None:
            experts = 0
            while any(k.startswith(f"{p}experts.{experts}.") for k in state_dict):
                experts += 1
        if experts < 1:
            raise _err("state_dict", f"has no experts under {p!r}experts.<e>. (looked for {p}experts.0.*)")
        e0 = f"{p}experts.0."
        names = None
        for gate, up, down in (("w1", "w3", "w2"), ("gate_proj", "up_proj", "down_proj"), ("gate_up_proj", None, "down_proj")):
            if f"{e0}{gate}.weight" in state_dict and f"{e0}{down}.weight" in state_dict and (up is None or f"{e0}{up}.weight" in state_dict):
                names = (gate, up, down)
                break
        if names is None:
            raise _err("state_dict", f"expert 0 under {e0!r} has none of w1/w3/w2, gate_proj/up_proj/down_proj or "
                                     "gate_up_proj/down_proj weights")
        gate, up, down = names
        like = _get(state_dict, f"{e0}{gate}.weight")

        def linear(e: int, name: str):
            base = f"{p}experts.{e}.{name}"
            w = formats._u8(_np(_get(state_dict, f"{base}.weight")))
            s = formats._u8(_np(_get(state_dict, f"{base}.weight_scale")))
            if w.ndim != 2 or s.ndim != 2 or s.shape[0] != w.shape[0] or s.shape[1] * 8 != w.shape[1]:
                raise _err("state_dict", f"{base}: weight {tuple(w.shape)} and weight_scale {tuple(s.shape)} do not "
                                         "match NVFP4's [N, K/2] and [N, K/16]")
            g = _scalar(state_dict, f"{base}.weight_scale_2")
            key = f"{base}.input_scale"
            inp = _scalar(state_dict, key) if key in state_dict else float("nan")
            return w, s, g, inp

        w13, s13, g13, i13, w2, s2, g2, i2 = [], [], [], [], [], [], [], []
        for e in range(experts):
            wg, sg, gg, ig = linear(e, gate)
            if up is not None:
                wu, su, gu, iu = linear(e, up)
                if wu.shape != wg.shape:
                    raise _err("state_dict", f"expert {e}: {up} {tuple(wu.shape)} and {gate} {tuple(wg.shape)} differ")
                if not (np.isnan(ig) and np.isnan(iu)) and ig != iu:
                    raise _err("state_dict", f"expert {e}: {gate}.input_scale {ig} != {up}.input_scale {iu}: gate and "
                                             "up read the same activations, quantised once")
                wg, sg, gpair = np.concatenate([wg, wu]), np.concatenate([sg, su]), (gg, gu)
            else:
                gpair = (gg, gg)
            wd, sd_, gd, idn = linear(e, down)
            w13.append(wg), s13.append(sg), g13.append(gpair), i13.append(ig)
            w2.append(wd), s2.append(sd_), g2.append(gd), i2.append(idn)
        shapes13, shapes2 = {w.shape for w in w13}, {w.shape for w in w2}
        if len(shapes13) != 1 or len(shapes2) != 1:
            raise _err("state_dict", f"experts' weights differ in shape: gate/up {sorted(shapes13)}, down {sorted(shapes2)}")
        two_i, half_h = w13[0].shape
        hidden, inter = 2 * half_h, two_i // 2
        if w2[0].shape != (hidden, inter // 2):
            raise _err("state_dict", f"down projection {w2[0].shape} does not match gate/up's hidden {hidden} and "
                                     f"intermediate {inter}: expected ({hidden}, {inter // 2})")
        return cls(
            format="nvfp4", experts=experts, hidden=hidden, intermediate=inter,
            w13=_like(np.stack(w13), like), w13_scales=_like(_blocked_per_expert(np.stack(s13), "w13 scales"), like),
            w2=_like(np.stack(w2), like), w2_scales=_like(_blocked_per_expert(np.stack(s2), "w2 scales"), like),
            w13_global=_like(np.asarray(g13, dtype=np.float32), like), w2_global=_like(np.asarray(g2, dtype=np.float32), like),
            w13_input_scale=_like(np.asarray(i13, dtype=np.float32), like),
            w2_input_scale=_like(np.asarray(i2, dtype=np.float32), like),
            source={"convention": "modelopt", "gate": gate, "up": up or "(fused)", "down": down, "prefix": p},
        )

    # ---- gpt-oss MXFP4 -------------------------------------------------------------------------

    @classmethod
    def from_mxfp4(cls, state_dict: Mapping[str, Any], prefix: str) -> "ExpertWeights":
        """An MXFP4 MoE layer in gpt-oss's convention, all experts in one tensor each, under
        ``{prefix}experts.``: ``gate_up_proj_blocks`` ``[E, 2I, H/32, 16]`` uint8 (32 e2m1 per
        block, the lower index in the low nibble), ``gate_up_proj_scales`` ``[E, 2I, H/32]`` UE8M0,
        ``down_proj_blocks`` ``[E, H, I/32, 16]``, ``down_proj_scales`` ``[E, H, I/32]``, and
        optionally ``gate_up_proj_bias`` ``[E, 2I]`` / ``down_proj_bias`` ``[E, H]``. gpt-oss's
        gate and up rows alternate (gate, up, gate, ...): kept as they are (``interleaved``), the
        order its ``swigluoai`` activation reads.
        """
        p = f"{prefix}experts."
        like = _get(state_dict, f"{p}gate_up_proj_blocks")

        def blocks(name: str):
            b = formats._u8(_np(_get(state_dict, f"{p}{name}_blocks")))
            s = formats._u8(_np(_get(state_dict, f"{p}{name}_scales")))
            if b.ndim != 4 or b.shape[3] != 16 or s.shape != b.shape[:3]:
                raise _err("state_dict", f"{p}{name}: blocks {tuple(b.shape)} / scales {tuple(s.shape)} are not "
                                         "[E, N, K/32, 16] / [E, N, K/32]")
            return b.reshape(b.shape[0], b.shape[1], -1), s

        w13, s13 = blocks("gate_up_proj")
        w2, s2 = blocks("down_proj")
        experts, two_i, half_h = w13.shape
        hidden, inter = 2 * half_h, two_i // 2
        if w2.shape != (experts, hidden, inter // 2):
            raise _err("state_dict", f"down_proj {tuple(w2.shape)} does not match gate_up_proj's experts {experts}, "
                                     f"hidden {hidden}, intermediate {inter}")

        def bias(name: str, shape):
            key = f"{p}{name}_bias"
            if key not in state_dict:
                return None
            b = _np(state_dict[key]).astype(np.float32)
            if b.shape != shape:
                raise _err("state_dict", f"{key} has shape {tuple(b.shape)}, expected {shape}")
            return _like(b, like)

        return cls(
            format="mxfp4", experts=experts, hidden=hidden, intermediate=inter,
            w13=_like(w13, like), w13_scales=_like(_blocked_per_expert(s13, "gate_up_proj_scales"), like),
            w2=_like(w2, like), w2_scales=_like(_blocked_per_expert(s2, "down_proj_scales"), like),
            w13_bias=bias("gate_up_proj", (experts, two_i)), w2_bias=bias("down_proj", (experts, hidden)),
            interleaved=True, source={"convention": "gpt-oss mxfp4", "prefix": prefix},
        )
