"""fp4gemm inside Hugging Face transformers (v5): the ``"fp4gemm"`` experts implementation.

    import fp4gemm.integrations.transformers as fp4hf
    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16, device_map="cuda")
    fp4hf.quantize_experts(model)          # MXFP4 W4A16: every MoE block runs fp4gemm's layer

``quantize_experts`` finds the experts modules transformers v5 builds with
``@use_experts_implementation`` (Qwen2/Qwen3-MoE, Mixtral, DeepSeek-V3, gpt-oss, ...: 3-D
``gate_up_proj`` / ``down_proj`` parameters and the flags ``is_transposed``, ``is_concatenated``,
``has_bias``, ``has_gate``), quantises their weights on the GPU with ``fp4gemm.quantize``, plans one
``fp4gemm.moe.MoeLayer`` per module (held by the module), registers ``"fp4gemm"`` with
``transformers.integrations.moe.ExpertsInterface`` and switches the model to it
(``model.set_experts_implementation("fp4gemm")``). Everything else (attention, routers, shared
experts, the KV cache) stays transformers'. The routers' ``top_k_index`` / ``top_k_weights`` go to
the layer as they are; the layer never synchronises, so a CUDA graph of the decode step keeps it.

Or at load, through transformers' quantization hooks (a bf16 checkpoint; the experts are
quantised once its weights are in):

    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16, device_map="cuda",
                                                 quantization_config=fp4hf.Fp4gemmConfig())

``Fp4gemmConfig`` (``quant_method="fp4gemm"``) and its quantizer are registered with
``register_quantization_config`` / ``register_quantizer`` the first time either is named here
(``fp4hf.Fp4gemmConfig``) or ``register()`` runs.

FP4 checkpoints load without a bf16 pass over their experts (the packed weights and scales go
straight from the files into the layer):

    model = fp4hf.from_pretrained("openai/gpt-oss-120b", dtype=torch.bfloat16, device_map="cuda")
    model = fp4hf.from_pretrained(modelopt_nvfp4_checkpoint, dtype=torch.bfloat16, device_map="cuda")

gpt-oss's MXFP4 experts (``*_blocks`` / ``*_scales`` / biases) run W4A16; a ModelOpt NVFP4
checkpoint's experts (per-expert ``weight`` / ``weight_scale`` / ``weight_scale_2`` /
``input_scale``, merged by transformers' own per-architecture converters) run W4A4 NVFP4 with the
checkpoint's scales, and its other NVFP4 linears are dequantised to bf16 for transformers.
After ``register()``, a plain ``AutoModelForCausalLM.from_pretrained`` of a ModelOpt checkpoint
takes this path too (transformers itself has no ``"modelopt"`` method).

Importing this module imports neither torch nor transformers (both are needed only when called).

Not here: saving a converted model, and NVFP4 W4A4 activation scales from calibration (a bf16
checkpoint converted to NVFP4 W4A4 needs ``a1_scale`` / ``a2_scale``).
"""

from __future__ import annotations

from typing import Any, Optional

IMPLEMENTATION = "fp4gemm"
_FORMATS = {"mxfp4": 32, "nvfp4": 16}


def _argument_error(argument: str, message: str) -> Exception:
    from ..api import _argument_error

    return _argument_error(argument, message)


def experts_forward(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
    """The experts implementation: ``self`` is a transformers experts module converted by
    ``quantize_experts`` (or an ``Fp4gemmExperts`` of an FP4 checkpoint); its layer runs the tokens
    (in slices of the layer's ``max_tokens``). Under ``torch.compile`` the layer runs through the
    torch op ``fp4gemm::experts_layer_run`` (no graph break; CUDA graphs of ``mode=
    "reduce-overhead"`` keep it)."""
    layer = getattr(self, "_fp4gemm_layer", None)
    options = getattr(self, "_fp4gemm_options", None)
    if options is not None and (layer is None or self._fp4gemm_device != _holder_device(self)):
        layer = _plan_holder(self, options)  # (an FP4 checkpoint's experts moved, e.g. model.to("cuda"))
    if layer is None:
        raise _argument_error(
            "experts_implementation",
            f"{type(self).__name__} was not converted by fp4gemm.integrations.transformers.quantize_experts")
    import torch

    if torch.compiler.is_compiling():
        out = torch.ops.fp4gemm.experts_layer_run(hidden_states, top_k_index, top_k_weights, self._fp4gemm_handle)
    else:
        out = _run_layer(layer, self._fp4gemm_max_tokens, hidden_states, top_k_index, top_k_weights)
    return out if out.dtype == hidden_states.dtype else out.to(hidden_states.dtype)


def _run_layer(layer: Any, cap: int, hidden_states: Any, ids: Any, weights: Any) -> Any:
    """bf16 [T, H] out of the layer for any T (slices of `cap` tokens)."""
    if layer.on_host:  # (a checkpoint loaded on the CPU: fp4gemm's host reference, exact and slow)
        import torch

        t = hidden_states.shape[0]
        parts = [_run_on_host(layer, hidden_states[s:s + cap], ids[s:s + cap], weights[s:s + cap])
                 for s in range(0, max(t, 1), cap)]
        return parts[0] if len(parts) == 1 else torch.cat(parts)
    x = hidden_states
    if x.dtype != layer_dtype():
        x = x.to(layer_dtype())
    t = x.shape[0]
    if t <= cap:
        return layer.run(x, ids, weights)
    import torch

    out = torch.empty_like(x)
    for s in range(0, t, cap):
        layer.run(x[s:s + cap], ids[s:s + cap], weights[s:s + cap], out=out[s:s + cap])
    return out


# torch.compile's view of a layer: the op fp4gemm::experts_layer_run(x, ids, weights, layer) with
# `layer` an int handle into this table (a module's handle is a constant to the compiled graph).
_HANDLES: dict = {}  # handle -> weak reference to the experts module (its layer is looked up at each call)
_OP: list = []


def _register_handle(m: Any) -> None:
    import weakref

    _compile_op()
    h = getattr(m, "_fp4gemm_handle", None)
    if h is None:
        h = m._fp4gemm_handle = len(_HANDLES) + 1
    _HANDLES[h] = weakref.ref(m)


def _compile_op() -> None:
    """Defines fp4gemm::experts_layer_run once (torch imported by then)."""
    if _OP:
        return
    import torch

    lib = torch.library.Library("fp4gemm", "FRAGMENT")
    lib.define("experts_layer_run(Tensor hidden_states, Tensor top_k_index, Tensor top_k_weights, int layer) -> Tensor")

    def run(hidden_states, top_k_index, top_k_weights, layer):
        ref = _HANDLES.get(layer)
        m = ref() if ref is not None else None
        if m is None:
            raise _argument_error("layer", f"no fp4gemm experts module with handle {layer} is alive")
        return _run_layer(m._fp4gemm_layer, m._fp4gemm_max_tokens, hidden_states, top_k_index, top_k_weights)

    def fake(hidden_states, top_k_index, top_k_weights, layer):
        return hidden_states.new_empty(hidden_states.shape, dtype=torch.bfloat16)

    lib.impl("experts_layer_run", run, "CompositeExplicitAutograd")
    torch.library.register_fake("fp4gemm::experts_layer_run", fake, lib=lib)
    _OP.append(lib)  # (the library object keeps the registration alive)


def _run_on_host(layer: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
    import ml_dtypes
    import numpy as np
    import torch

    x = hidden_states.detach().float().numpy().astype(ml_dtypes.bfloat16)
    out = layer.run(x, top_k_index.detach().numpy(), top_k_weights.detach().float().numpy())
    return torch.from_numpy(np.asarray(out, dtype=np.float32)).to(hidden_states.dtype)


def layer_dtype() -> Any:
    import torch

    return torch.bfloat16


def register() -> None:
    """Registers ``"fp4gemm"`` with transformers' ``ExpertsInterface`` and its quantization config
    and quantizer (idempotent)."""
    try:
        from transformers.integrations.moe import ExpertsInterface
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("fp4gemm.integrations.transformers needs transformers >= 5 "
                          "(transformers.integrations.moe.ExpertsInterface)") from e
    ExpertsInterface.register(IMPLEMENTATION, experts_forward)
    _quantization_classes()


_CLASSES: dict = {}


# checkpoint -> (weights, activations) by default
_CHECKPOINTS = {"bf16": ("mxfp4", "bf16"), "mxfp4": ("mxfp4", "bf16"), "nvfp4": ("nvfp4", "fp4")}


def _check_options(weights: str, activations: str, a1_scale: Optional[float], a2_scale: Optional[float],
                   max_tokens: int, decode_tokens: Optional[int], a1_from_checkpoint: bool = False,
                   weight_layout: Optional[str] = None) -> None:
    if weights not in _FORMATS:
        raise _argument_error("weights", f"{weights!r} is not one of 'mxfp4', 'nvfp4'")
    if activations not in ("bf16", "fp4"):
        raise _argument_error("activations", f"{activations!r} is not one of 'bf16', 'fp4'")
    if activations == "bf16" and weights != "mxfp4":
        raise _argument_error("activations", "W4A16 (bf16 activations) runs MXFP4 weights; use weights='mxfp4'")
    if activations == "fp4" and weights == "nvfp4" and not a1_from_checkpoint and (a1_scale is None or a2_scale is None):
        raise _argument_error("a1_scale", "NVFP4 W4A4 needs the activations' global scales a1_scale and a2_scale")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise _argument_error("max_tokens", f"must be a positive int, got {max_tokens!r}")
    if decode_tokens is not None and (isinstance(decode_tokens, bool) or not isinstance(decode_tokens, int)
                                      or not 0 <= decode_tokens <= 512):
        raise _argument_error("decode_tokens", f"must be None (by the layer) or an int in 0..512, got {decode_tokens!r}")
    if weight_layout not in (None, "rows", "pieces"):
        raise _argument_error("weight_layout", f"{weight_layout!r} is not one of None (by the layer), 'rows', 'pieces'")


def _pieces(weight_layout: Optional[str], activations: str, on_cuda: bool, hidden: int, inter: int, *, weights: str,
            checkpoint: bool = False) -> bool:
    """Whether a layer of `weights` ('mxfp4' / 'nvfp4') runs on weights in pieces (fp4gemm.moe.pack_pieces; blocked
    scales). None: where it measured faster or level at every token count on an H200 (docs/PERF.md, layer suites,
    pieces / rows: W4A16 0.85..1.00, median 0.94; NVFP4 W4A4 0.91..1.00, median 0.965): W4A16 and NVFP4 W4A4 on CUDA,
    for experts fp4gemm quantised itself (an FP4 checkpoint's experts stay the checkpoint's tensors unless asked:
    pieces are a second copy), where the shapes pack (H and I multiples of 32)."""
    packable = hidden % 32 == 0 and inter % 32 == 0
    if weight_layout == "pieces" and not on_cuda and not checkpoint:
        raise _argument_error("weight_layout", "weights in pieces run on CUDA devices only (the host reference reads "
                                               "rows): use weight_layout='rows' on the CPU")
    if weight_layout == "pieces" and not packable:
        raise _argument_error("weight_layout", f"weights in pieces need the hidden size ({hidden}) and the experts' "
                                               f"intermediate size ({inter}) to be multiples of 32")
    if weight_layout is None:
        return on_cuda and (activations == "bf16" or weights == "nvfp4") and not checkpoint and packable
    return weight_layout == "pieces" and on_cuda


def _blocked_scales(s: Any) -> Any:
    """[E, rows, cols] linear scale codes (uint8; torch on any device, or NumPy) -> [E, blocked bytes], each expert's
    codes in the library's blocked layout (formats.linear_to_blocked: byte (R, C, a, b, d) of 512-byte atoms holds
    row 128 R + 32 b + a, column 4 C + d; padding 0)."""
    e, rows, cols = s.shape
    rr, rc = -(-rows // 128), -(-cols // 4)
    if type(s).__module__.split(".")[0] == "torch":
        p = s.new_zeros((e, rr * 128, rc * 4))
    else:
        import numpy as np

        p = np.zeros((e, rr * 128, rc * 4), np.uint8)
    p[:, :rows, :cols] = s
    v = p.reshape(e, rr, 4, 32, rc, 4)  # [E][R][b][a][C][d] -> [E][R][C][a][b][d] (formats.blocked_view's shim)
    order = (0, 1, 4, 3, 2, 5)
    return (v.permute(*order) if hasattr(v, "permute") else v.transpose(order)).reshape(e, -1)


def _packed(w13: Any, s13: Any, w2: Any, s2: Any, gate_up: str, format: str):
    """Packed rows and linear scales -> (w13, w13 scales, w2, w2 scales) in pieces (for `format`'s layers) with
    blocked scales."""
    from ..moe import pack_pieces

    return (pack_pieces(w13, gate_up, format=format), _blocked_scales(s13), pack_pieces(w2, format=format),
            _blocked_scales(s2))


def _quantization_classes() -> dict:
    """Fp4gemmConfig and Fp4gemmHfQuantizer, defined (and registered with transformers) once."""
    if _CLASSES:
        return _CLASSES
    from transformers.quantizers.auto import (AUTO_QUANTIZATION_CONFIG_MAPPING, AUTO_QUANTIZER_MAPPING,
                                              register_quantization_config, register_quantizer)
    from transformers.quantizers.base import HfQuantizer
    from transformers.utils.quantization_config import QuantizationConfigMixin

    class Fp4gemmConfig(QuantizationConfigMixin):
        """transformers quantization config: the experts run fp4gemm (``quantize_experts``'
        arguments); everything else stays transformers'. ``checkpoint``: ``"bf16"`` (the experts
        are quantised on the GPU once loaded), ``"mxfp4"`` (gpt-oss's MXFP4 experts, loaded as they
        are) or ``"nvfp4"`` (ModelOpt's NVFP4 experts, loaded as they are). Built from a ModelOpt
        checkpoint's own ``quantization_config`` (``quant_method="modelopt"``) it reads
        ``checkpoint="nvfp4"``, W4A4. ``weight_layout``: as ``from_pretrained``'s."""

        def __init__(self, weights: Optional[str] = None, activations: Optional[str] = None, max_tokens: int = 4096,
                     a1_scale: Optional[float] = None, a2_scale: Optional[float] = None, decode_tokens: Optional[int] = None,
                     checkpoint: str = "bf16", quant_method: Optional[str] = None,
                     weight_layout: Optional[str] = None, **kwargs: Any):
            if quant_method == "modelopt":  # a ModelOpt checkpoint's own config
                algo = str(kwargs.get("quant_algo", "")).upper()
                if algo != "NVFP4":
                    raise _argument_error("quantization_config", f"ModelOpt quant_algo {algo!r}: fp4gemm loads NVFP4")
                checkpoint = "nvfp4"
            if checkpoint not in _CHECKPOINTS:
                raise _argument_error("checkpoint", f"{checkpoint!r} is not one of {sorted(_CHECKPOINTS)}")
            weights = weights or _CHECKPOINTS[checkpoint][0]
            activations = activations or _CHECKPOINTS[checkpoint][1]
            if checkpoint != "bf16" and weights != checkpoint:
                raise _argument_error("weights", f"a {checkpoint} checkpoint's experts stay {checkpoint}, got {weights!r}")
            _check_options(weights, activations, a1_scale, a2_scale, max_tokens, decode_tokens,
                           a1_from_checkpoint=checkpoint == "nvfp4", weight_layout=weight_layout)
            self.quant_method = IMPLEMENTATION
            self.checkpoint = checkpoint
            self.weights, self.activations, self.max_tokens = weights, activations, max_tokens
            self.a1_scale, self.a2_scale, self.decode_tokens = a1_scale, a2_scale, decode_tokens
            self.weight_layout = weight_layout

    class Fp4gemmHfQuantizer(HfQuantizer):
        """A bf16 checkpoint: loaded as it is, then the experts converted (quantize_experts). An
        FP4 checkpoint: each experts module replaced before loading by one holding the
        checkpoint's packed weights and scales (``Fp4gemmExperts``), its layer planned after."""

        requires_calibration = False

        def __init__(self, quantization_config: Any, **kwargs: Any):
            if getattr(quantization_config, "checkpoint", "bf16") != "bf16":
                kwargs["pre_quantized"] = True  # (also when the config came from the arguments)
            super().__init__(quantization_config, **kwargs)

        def validate_environment(self, *args: Any, **kwargs: Any) -> None:
            import torch

            # (an FP4 checkpoint also loads on the CPU, its experts on fp4gemm's host reference)
            if self.quantization_config.checkpoint == "bf16" and not torch.cuda.is_available():
                raise RuntimeError("fp4gemm: quantising a bf16 checkpoint's experts needs a CUDA device (Hopper)")

        def update_dtype(self, dtype: Any) -> Any:
            import torch

            return torch.bfloat16 if dtype is None else dtype

        def _process_model_before_weight_loading(self, model: Any, **kwargs: Any) -> Any:
            if self.quantization_config.checkpoint != "bf16":
                _replace_experts(model, self.quantization_config.checkpoint)
            return model

        def update_weight_conversions(self, weight_conversions: Any) -> Any:
            if self.quantization_config.checkpoint != "nvfp4":
                return weight_conversions
            return _nvfp4_conversions(weight_conversions)

        def _process_model_after_weight_loading(self, model: Any, **kwargs: Any) -> Any:
            c = self.quantization_config
            if c.checkpoint == "bf16":
                quantize_experts(model, weights=c.weights, activations=c.activations, max_tokens=c.max_tokens,
                                 a1_scale=c.a1_scale, a2_scale=c.a2_scale, decode_tokens=c.decode_tokens,
                                 weight_layout=getattr(c, "weight_layout", None))
            else:
                _plan_loaded_experts(model, c)
            return model

        def is_serializable(self, *args: Any, **kwargs: Any) -> bool:
            return False  # (the FP4 experts are the layers' own; save the bf16 checkpoint instead)

        @property
        def is_trainable(self) -> bool:
            return False

    if IMPLEMENTATION not in AUTO_QUANTIZATION_CONFIG_MAPPING:
        register_quantization_config(IMPLEMENTATION)(Fp4gemmConfig)
    if "modelopt" not in AUTO_QUANTIZATION_CONFIG_MAPPING:  # (transformers 5.17 has none: ModelOpt NVFP4 is ours)
        register_quantization_config("modelopt")(Fp4gemmConfig)
    if IMPLEMENTATION not in AUTO_QUANTIZER_MAPPING:
        register_quantizer(IMPLEMENTATION)(Fp4gemmHfQuantizer)
    _CLASSES.update(Fp4gemmConfig=AUTO_QUANTIZATION_CONFIG_MAPPING[IMPLEMENTATION],
                    Fp4gemmHfQuantizer=AUTO_QUANTIZER_MAPPING[IMPLEMENTATION])
    return _CLASSES


def __getattr__(name: str) -> Any:  # Fp4gemmConfig / Fp4gemmHfQuantizer, imported on first use
    if name in ("Fp4gemmConfig", "Fp4gemmHfQuantizer"):
        return _quantization_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _is_experts(m: Any) -> bool:
    return all(hasattr(m, a) for a in ("gate_up_proj", "down_proj", "num_experts")) and getattr(m, "has_gate", True)


def _activation(m: Any, config: Any):
    """(activation, swiglu_alpha, swiglu_limit) of an experts module, or None where fp4gemm has none."""
    if hasattr(m, "alpha") and hasattr(m, "limit") and type(m).__name__.startswith("GptOss"):
        return "swigluoai", float(m.alpha), float(m.limit)
    act = getattr(config, "hidden_act", None)
    if act in ("silu", "swish"):
        return "silu", None, None
    return None


def _quantize_rows(w: Any, fmt: str):
    """[E, N, K] bf16 rows -> packed [E, N, K/2] uint8, linear scales [E, N, K/vec] uint8 and (NVFP4)
    the per-expert global scale [E] float32 (ModelOpt's weight_scale_2 rule: amax / (6 * 448))."""
    import torch

    from .. import quantize

    e, n, k = w.shape
    if not w.is_cuda:  # (the CPU: fp4gemm's host quantiser and reference; NumPy arrays)
        import numpy as np

        if fmt == "mxfp4":
            packed, scales = quantize(w.reshape(e * n, k), "mxfp4")
            return packed.reshape(e, n, k // 2), scales.reshape(e, n, k // 32), None
        amax = w.float().abs().amax(dim=(1, 2)).numpy()
        gs = np.where(amax > 0, amax / (6.0 * 448.0), 1.0).astype(np.float32)
        parts = [quantize(w[i], "nvfp4", global_scale=float(gs[i])) for i in range(e)]
        return (np.stack([p.reshape(n, k // 2) for p, _ in parts]), np.stack([s.reshape(n, k // 16) for _, s in parts]),
                gs)
    if fmt == "mxfp4":
        packed, scales = quantize(w.reshape(e * n, k).contiguous(), "mxfp4")
        return packed.view(e, n, k // 2), scales.view(e, n, k // 32), None
    amax = w.float().abs().amax(dim=(1, 2))
    gs = torch.where(amax > 0, amax / (6.0 * 448.0), torch.ones_like(amax)).to(torch.float32)
    packed = torch.empty((e, n, k // 2), dtype=torch.uint8, device=w.device)
    scales = torch.empty((e, n, k // 16), dtype=torch.uint8, device=w.device)
    for i in range(e):  # (one global scale per expert)
        p, s = quantize(w[i].contiguous(), "nvfp4", global_scale=float(gs[i]))
        packed[i].copy_(p.view(n, k // 2))
        scales[i].copy_(s.view(n, k // 16))
    return packed, scales, gs


def quantize_experts(model: Any, weights: str = "mxfp4", activations: str = "bf16", *, max_tokens: int = 4096,
                     a1_scale: Optional[float] = None, a2_scale: Optional[float] = None, decode_tokens: Optional[int] = None,
                     free_bf16: bool = True, weight_layout: Optional[str] = None) -> int:
    """Converts every experts module of ``model`` (bf16 weights on a CUDA device; on the CPU the
    layers are fp4gemm's host reference, exact and slow) to fp4gemm and switches the model to the
    ``"fp4gemm"`` experts implementation. Returns how many modules.

    weights: ``"mxfp4"`` (default) or ``"nvfp4"``; activations: ``"bf16"`` (W4A16, MXFP4 weights
    only: no calibration needed) or ``"fp4"`` (W4A4 in the weights' format; NVFP4 needs the
    activations' global scales ``a1_scale`` / ``a2_scale``). max_tokens: the layer's workspace (a
    call with more tokens runs in slices). free_bf16: replace the bf16 expert parameters by empty
    ones (the layer holds the FP4 copies). weight_layout: the FP4 experts as the layer reads them,
    ``"rows"`` or ``"pieces"`` (``fp4gemm.moe.pack_pieces`` with blocked scales: W4A16 layers median 6 %
    faster than rows, up to 15 %, docs/PERF.md; CUDA only); None (default): pieces for W4A16 and NVFP4 W4A4 on
    CUDA, where they measured faster or level at every token count, rows otherwise. A module whose activation
    fp4gemm does not have is left as it is (a warning says which)."""
    _check_options(weights, activations, a1_scale, a2_scale, max_tokens, decode_tokens, weight_layout=weight_layout)
    act_format = "bf16" if activations == "bf16" else weights
    import warnings

    import torch

    from ..moe import MoeLayer

    register()
    config = model.config
    topk = getattr(config, "num_experts_per_tok", None)
    converted = 0
    for name, m in model.named_modules():
        if not _is_experts(m):
            continue
        act = _activation(m, config)
        if act is None:
            warnings.warn(f"fp4gemm: {name} ({type(m).__name__}) keeps transformers' experts: activation "
                          f"{getattr(config, 'hidden_act', None)!r} is not one fp4gemm runs")
            continue
        activation, s_alpha, s_limit = act
        w13, w2 = m.gate_up_proj.detach(), m.down_proj.detach()
        if getattr(m, "is_transposed", False):  # [E, H, 2I] / [E, I, H] -> [E, 2I, H] / [E, H, I]
            w13, w2 = w13.transpose(1, 2), w2.transpose(1, 2)
        w13 = w13.to(torch.bfloat16).contiguous()
        w2 = w2.to(torch.bfloat16).contiguous()
        gate_up = "stacked" if getattr(m, "is_concatenated", True) else "interleaved"
        p13, s13, g13 = _quantize_rows(w13, weights)
        p2, s2, g2 = _quantize_rows(w2, weights)
        kw = dict(max_tokens=max_tokens, topk=int(topk), act_format=act_format, activation=activation, gate_up=gate_up,
                  scale_layout="linear", decode_tokens=decode_tokens)
        if _pieces(weight_layout, activations, w13.is_cuda, w2.shape[1], w2.shape[2], weights=weights):  # (replace the rows)
            p13, s13, p2, s2 = _packed(p13, s13, p2, s2, gate_up, weights)
            kw.update(scale_layout="blocked", weight_layout="pieces")
        if s_alpha is not None:
            kw.update(swiglu_alpha=s_alpha, swiglu_limit=s_limit)
        if g13 is not None:
            kw.update(w13_alpha=g13, w2_alpha=g2)
        if act_format == "nvfp4":
            kw.update(a1_scale=float(a1_scale), a2_scale=float(a2_scale))
        if getattr(m, "has_bias", False):
            kw.update(w13_bias=m.gate_up_proj_bias.detach().to(torch.bfloat16).contiguous(),
                      w2_bias=m.down_proj_bias.detach().to(torch.bfloat16).contiguous())
            if not w13.is_cuda:  # (host layer: NumPy float32, exact for bf16)
                kw.update(w13_bias=kw["w13_bias"].float().numpy(), w2_bias=kw["w2_bias"].float().numpy())
        m._fp4gemm_tensors = (p13, s13, p2, s2, g13, g2, kw.get("w13_bias"), kw.get("w2_bias"))
        m._fp4gemm_weight_layout = kw.get("weight_layout", "rows")
        m._fp4gemm_weight_format = weights
        m._fp4gemm_layer = MoeLayer(p13, s13, p2, s2, **kw)
        m._fp4gemm_max_tokens = max_tokens
        _register_handle(m)
        if free_bf16:
            for pname in ("gate_up_proj", "down_proj"):
                setattr(m, pname, torch.nn.Parameter(torch.empty(0, dtype=torch.bfloat16, device=w13.device),
                                                     requires_grad=False))
        converted += 1
    if converted:
        model.set_experts_implementation(IMPLEMENTATION)
    return converted


# ---- FP4 checkpoints loaded as they are ---------------------------------------------------------


def _dims(m: Any):
    """(experts, hidden, intermediate) of a transformers experts module (on meta or not)."""
    e, a, b = m.gate_up_proj.shape
    if getattr(m, "is_transposed", False):  # [E, H, 2I]
        return e, a, b // 2
    return e, b, a // 2


_LOADING: dict = {}


def _loading_classes() -> dict:
    """Fp4gemmExperts and the NVFP4 conversion ops (torch and transformers imported on first use)."""
    if _LOADING:
        return _LOADING
    import torch
    from transformers.core_model_loading import ConversionOps

    class Fp4gemmExperts(torch.nn.Module):
        """An experts module holding an FP4 checkpoint's tensors under the names transformers
        loads them to, and fp4gemm's layer planned on them (``experts_forward``).

        mxfp4 (gpt-oss): ``gate_up_proj_blocks [E, 2I, H/32, 16]`` / ``_scales [E, 2I, H/32]`` /
        ``_bias [E, 2I]``, the same for ``down_proj`` (the checkpoint's names). nvfp4 (ModelOpt,
        merged by transformers' converters): ``gate_up_proj [E, 2I, H/2]`` uint8 (gate rows, then
        up), ``gate_up_proj_scale [E, 2I, H/16]`` E4M3, ``gate_up_proj_scale_2 [E, 2]`` /
        ``gate_up_proj_input_scale [E, 2]`` (gate, up), ``down_proj`` likewise with ``[E]``."""

        def __init__(self, fmt: str, experts: int, hidden: int, inter: int, has_bias: bool,
                     swiglu: Optional[tuple] = None):
            super().__init__()
            e, h, i = experts, hidden, inter
            self.num_experts, self.hidden_dim, self.intermediate_dim = e, h, i
            self.fp4gemm_format, self.swiglu = fmt, swiglu
            u8, f32 = torch.uint8, torch.float32

            def param(name: str, shape, dtype):
                setattr(self, name, torch.nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False))

            if fmt == "mxfp4":
                param("gate_up_proj_blocks", (e, 2 * i, h // 32, 16), u8)
                self.register_buffer("gate_up_proj_scales", torch.empty((e, 2 * i, h // 32), dtype=u8))
                param("down_proj_blocks", (e, h, i // 32, 16), u8)
                self.register_buffer("down_proj_scales", torch.empty((e, h, i // 32), dtype=u8))
                if has_bias:
                    param("gate_up_proj_bias", (e, 2 * i), torch.bfloat16)
                    param("down_proj_bias", (e, h), torch.bfloat16)
            else:
                param("gate_up_proj", (e, 2 * i, h // 2), u8)
                self.register_buffer("gate_up_proj_scale", torch.empty((e, 2 * i, h // 16), dtype=torch.float8_e4m3fn))
                self.register_buffer("gate_up_proj_scale_2", torch.empty((e, 2), dtype=f32))
                self.register_buffer("gate_up_proj_input_scale", torch.empty((e, 2), dtype=f32))
                param("down_proj", (e, h, i // 2), u8)
                self.register_buffer("down_proj_scale", torch.empty((e, h, i // 16), dtype=torch.float8_e4m3fn))
                self.register_buffer("down_proj_scale_2", torch.empty((e,), dtype=f32))
                self.register_buffer("down_proj_input_scale", torch.empty((e,), dtype=f32))

        def forward(self, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
            return experts_forward(self, hidden_states, top_k_index, top_k_weights)

    class PerExpertScalars(ConversionOps):
        """ModelOpt's per-expert scalars (0-d or [1]) as [1] each, for MergeModulelist (-> [E, 1])
        and Concatenate (gate, up -> [E, 2]) or Flatten (down -> [E])."""

        def convert(self, input_dict: Any, source_patterns: Any = None, target_patterns: Any = None, **kw: Any):
            return {k: [t.reshape(1) for t in (v if isinstance(v, list) else [v])] for k, v in input_dict.items()}

    class Flatten(ConversionOps):
        def convert(self, input_dict: Any, source_patterns: Any = None, target_patterns: Any = None, **kw: Any):
            ((_, v),) = input_dict.items()
            v = v[0] if isinstance(v, list) else v
            return {target_patterns[0]: v.reshape(-1)}

    class DequantizeNvfp4Linear(ConversionOps):
        """A ModelOpt NVFP4 linear outside the experts (attention, shared experts, dense MLPs):
        ``weight`` + ``weight_scale`` + ``weight_scale_2`` -> the bf16 weight transformers runs
        (the ``input_scale`` dropped); any other ``*weight`` passes through."""

        def convert(self, input_dict: Any, source_patterns: Any = None, target_patterns: Any = None,
                    full_layer_name: Any = None, **kw: Any):
            def get(pattern):
                v = input_dict.get(pattern)
                return v[0] if isinstance(v, list) else v

            w, sc, s2 = get("weight$"), get("weight_scale$"), get("weight_scale_2$")
            if sc is None:
                return {full_layer_name: w}
            lut = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], device=w.device)
            w = w.view(torch.uint8)
            v = torch.stack([lut[(w & 0xF).long()], lut[(w >> 4).long()]], -1).reshape(w.shape[0], -1)
            v = v.view(w.shape[0], -1, 16) * sc.float()[..., None]
            return {full_layer_name: (v.reshape(w.shape[0], -1) * s2.float()).to(torch.bfloat16)}

    _LOADING.update(Fp4gemmExperts=Fp4gemmExperts, PerExpertScalars=PerExpertScalars, Flatten=Flatten,
                    DequantizeNvfp4Linear=DequantizeNvfp4Linear)
    return _LOADING


def _replace_experts(model: Any, fmt: str) -> int:
    """Every experts module of the (meta) model replaced by an Fp4gemmExperts for a `fmt` checkpoint."""
    import torch

    cls = _loading_classes()["Fp4gemmExperts"]
    n = 0
    for name, m in list(model.named_modules()):
        if not _is_experts(m):
            continue
        e, h, i = _dims(m)
        act = _activation(m, model.config)
        if fmt == "mxfp4" and (act is None or act[0] != "swigluoai"):
            raise _argument_error("checkpoint", f"{name} ({type(m).__name__}): fp4gemm loads MXFP4 checkpoints in "
                                                "gpt-oss's convention (swigluoai, interleaved gate / up)")
        if fmt == "nvfp4" and (act is None or act[0] != "silu"):
            raise _argument_error("checkpoint", f"{name} ({type(m).__name__}): a ModelOpt NVFP4 checkpoint's experts "
                                                f"need SiLU, the model has {getattr(model.config, 'hidden_act', None)!r}")
        with torch.device("meta"):
            holder = cls(fmt, e, h, i, bool(getattr(m, "has_bias", False)), swiglu=act[1:] if act[1] is not None else None)
        model.set_submodule(name, holder)
        n += 1
    if n == 0:
        raise _argument_error("checkpoint", f"{type(model).__name__} has no experts module fp4gemm knows")
    return n


def _nvfp4_conversions(conversions: list) -> list:
    """transformers' converters for a ModelOpt NVFP4 checkpoint: the architecture's own expert
    converters (they merge the per-expert ``weight`` and, by the same pattern, ``weight_scale``
    into [E, ...]) preceded by converters for the per-expert ``weight_scale_2`` / ``input_scale``
    scalars, and followed by one that dequantises the NVFP4 linears outside the experts."""
    from transformers.core_model_loading import Concatenate, MergeModulelist, WeightConverter

    c = _loading_classes()
    extra = []
    for conv in conversions:
        if not isinstance(conv, WeightConverter) or not any(isinstance(o, MergeModulelist) for o in conv.operations):
            continue
        sources = [q for q in conv._original_source_patterns if q.endswith(".weight")]
        if not sources:
            continue
        target = conv._original_target_patterns[0]
        for suffix, new in (("weight_scale_2", "_scale_2"), ("input_scale", "_input_scale")):
            src = [q[: -len("weight")] + suffix for q in sources]
            ops = [c["PerExpertScalars"](), MergeModulelist(dim=0)]
            ops.append(Concatenate(dim=1) if len(src) > 1 else c["Flatten"]())
            extra.append(WeightConverter(source_patterns=src, target_patterns=target + new, operations=ops))
    rest = WeightConverter(source_patterns=["weight$", "weight_scale$", "weight_scale_2$", "input_scale$"],
                           target_patterns="weight", operations=[c["DequantizeNvfp4Linear"]()])
    return extra + list(conversions) + [rest]


def _holder_device(m: Any) -> Any:
    return (m.gate_up_proj_blocks if m.fp4gemm_format == "mxfp4" else m.gate_up_proj).device


def _plan_holder(m: Any, c: Any) -> Any:
    """The fp4gemm layer on the tensors an Fp4gemmExperts holds, where they are now (CUDA: the
    device's kernels; CPU: the host reference)."""
    import torch

    from ..moe import MoeLayer

    e, h, i = m.num_experts, m.hidden_dim, m.intermediate_dim
    # transformers skips its shape check when a quantizer loads: what the checkpoint put here is
    # checked now (a bf16 expert excluded from quantisation, a different layout, a truncated file)
    vec = 32 if m.fp4gemm_format == "mxfp4" else 16
    want = ({"gate_up_proj_blocks": ((e, 2 * i, h // 32, 16), torch.uint8), "gate_up_proj_scales": ((e, 2 * i, h // 32), torch.uint8),
             "down_proj_blocks": ((e, h, i // 32, 16), torch.uint8), "down_proj_scales": ((e, h, i // 32), torch.uint8)}
            if m.fp4gemm_format == "mxfp4" else
            {"gate_up_proj": ((e, 2 * i, h // 2), torch.uint8), "gate_up_proj_scale": ((e, 2 * i, h // vec), None),
             "down_proj": ((e, h, i // 2), torch.uint8), "down_proj_scale": ((e, h, i // vec), None),
             "gate_up_proj_scale_2": ((e, 2), None), "down_proj_scale_2": ((e,), None)})
    for tname, (shape, dtype) in want.items():
        got = getattr(m, tname)
        if tuple(got.shape) != shape or (dtype is not None and got.dtype != dtype):
            raise _argument_error("pretrained_model_name_or_path",
                                  f"{m.fp4gemm_name}.{tname}: the checkpoint gave {got.dtype} {tuple(got.shape)}, expected "
                                  f"{dtype or 'float'} {shape} (packed {m.fp4gemm_format.upper()} experts)")
    kw = dict(max_tokens=c.max_tokens, topk=m.fp4gemm_topk, scale_layout="linear", decode_tokens=c.decode_tokens)
    if m.fp4gemm_format == "mxfp4":
        w13, s13 = m.gate_up_proj_blocks.view(e, 2 * i, h // 2), m.gate_up_proj_scales
        w2, s2 = m.down_proj_blocks.view(e, h, i // 2), m.down_proj_scales
        kw.update(act_format="bf16" if c.activations == "bf16" else "mxfp4", activation="swigluoai",
                  gate_up="interleaved")
        if m.swiglu is not None:
            kw.update(swiglu_alpha=m.swiglu[0], swiglu_limit=m.swiglu[1])
        if hasattr(m, "gate_up_proj_bias"):
            kw.update(w13_bias=m.gate_up_proj_bias.detach(), w2_bias=m.down_proj_bias.detach())
    else:
        for b in ("gate_up_proj_scale", "down_proj_scale"):
            if getattr(m, b).dtype != torch.float8_e4m3fn:
                raise _argument_error("model", f"{m.fp4gemm_name}.{b} is {getattr(m, b).dtype}, not the checkpoint's "
                                               "float8_e4m3fn (a model.to(dtype) casts it): move the model with "
                                               "model.to(device) only")
        w13, s13 = m.gate_up_proj, m.gate_up_proj_scale.view(torch.uint8)
        w2, s2 = m.down_proj, m.down_proj_scale.view(torch.uint8)
        kw.update(act_format="nvfp4", activation="silu", gate_up="stacked",
                  w13_alpha=m.gate_up_proj_scale_2[:, 0].float().contiguous(),
                  w13_alpha_up=m.gate_up_proj_scale_2[:, 1].float().contiguous(),
                  w2_alpha=m.down_proj_scale_2.float().contiguous())
        for key, given, scales in (("a1_scale", c.a1_scale, m.gate_up_proj_input_scale),
                                   ("a2_scale", c.a2_scale, m.down_proj_input_scale)):
            # the experts' largest input_scale: the one global scale every expert's tokens share
            v = float(scales.float().nan_to_num(nan=float("-inf")).max()) if given is None else float(given)
            if not v > 0:
                raise _argument_error(key, f"{m.fp4gemm_name}: the checkpoint has no input_scale; pass {key}= "
                                           "(Fp4gemmConfig / from_pretrained)")
            kw[key] = v
    arrays = [a.detach().contiguous() for a in (w13, s13, w2, s2)]
    m._fp4gemm_packed = None
    if _pieces(getattr(c, "weight_layout", None), c.activations, w13.is_cuda, h, i, weights=m.fp4gemm_format,
               checkpoint=True):
        # a second copy of the experts, in pieces with blocked scales (the module keeps the checkpoint's tensors)
        arrays = m._fp4gemm_packed = list(_packed(*arrays, kw["gate_up"], m.fp4gemm_format))
        kw.update(scale_layout="blocked", weight_layout="pieces")
    if not w13.is_cuda:  # on the CPU: the layer is fp4gemm's host reference (NumPy arrays)
        arrays = [a.numpy() for a in arrays]
        for k in ("w13_alpha", "w13_alpha_up", "w2_alpha", "w13_bias", "w2_bias"):
            if kw.get(k) is not None:
                kw[k] = kw[k].float().numpy()
    m._fp4gemm_layer = MoeLayer(*arrays, **kw)
    m._fp4gemm_max_tokens = c.max_tokens
    m._fp4gemm_device = w13.device
    _register_handle(m)
    return m._fp4gemm_layer


def _plan_loaded_experts(model: Any, c: Any) -> int:
    """One fp4gemm layer per Fp4gemmExperts module, on the tensors transformers loaded into it
    (planned again by its first call after the model moved to another device)."""
    cls = _loading_classes()["Fp4gemmExperts"]
    n = 0
    for name, m in model.named_modules():
        if isinstance(m, cls):
            m.fp4gemm_topk, m.fp4gemm_name = int(getattr(model.config, "num_experts_per_tok")), name
            m._fp4gemm_options = c
            _plan_holder(m, c)
            n += 1
    return n


def _checkpoint_of(qc: Any) -> str:
    """The fp4gemm checkpoint kind of a checkpoint's quantization_config (dict or object)."""
    d = qc if isinstance(qc, dict) else qc.to_dict()
    method = d.get("quant_method")
    if method == "mxfp4":
        return "mxfp4"
    if method == "modelopt" and str(d.get("quant_algo", "")).upper() == "NVFP4":
        return "nvfp4"
    if method == IMPLEMENTATION:
        return d.get("checkpoint", "bf16")
    raise _argument_error("pretrained_model_name_or_path",
                          f"the checkpoint is quantised with {method!r} ({d.get('quant_algo', '')}); fp4gemm loads "
                          "bf16, gpt-oss MXFP4 and ModelOpt NVFP4 checkpoints")


def from_pretrained(pretrained_model_name_or_path: Any, *args: Any, weights: Optional[str] = None,
                    activations: Optional[str] = None, max_tokens: int = 4096, a1_scale: Optional[float] = None,
                    a2_scale: Optional[float] = None, decode_tokens: Optional[int] = None,
                    weight_layout: Optional[str] = None, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` with the experts on fp4gemm: a gpt-oss MXFP4 or
    ModelOpt NVFP4 checkpoint's experts loaded as they are (no bf16 pass), a bf16 checkpoint's
    quantised on the GPU after loading (``weights`` / ``activations`` / ``weight_layout`` as for
    ``quantize_experts``; an FP4 checkpoint's experts run on its own tensors unless
    ``weight_layout="pieces"``, which packs a second copy on CUDA: W4A16 layers median 6 % faster).
    Other arguments go to transformers (``dtype=torch.bfloat16, device_map="cuda"`` are usual)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    register()
    if "quantization_config" in kwargs:
        raise _argument_error("quantization_config", "fp4gemm.integrations.transformers.from_pretrained makes its own; "
                                                     "use AutoModelForCausalLM.from_pretrained to pass one")
    config = kwargs.pop("config", None)
    if config is None:
        hub = {k: kwargs[k] for k in ("revision", "token", "cache_dir", "trust_remote_code", "local_files_only")
               if k in kwargs}
        config = AutoConfig.from_pretrained(pretrained_model_name_or_path, **hub)
    qc = getattr(config, "quantization_config", None)
    checkpoint = "bf16" if qc is None else _checkpoint_of(qc)
    ours = _quantization_classes()["Fp4gemmConfig"](
        weights=weights, activations=activations, max_tokens=max_tokens, a1_scale=a1_scale, a2_scale=a2_scale,
        decode_tokens=decode_tokens, checkpoint=checkpoint, weight_layout=weight_layout)
    if qc is None:
        kwargs["quantization_config"] = ours
    else:  # (transformers refuses a second config class beside the checkpoint's: replace it)
        config.quantization_config = ours.to_dict()
    return AutoModelForCausalLM.from_pretrained(pretrained_model_name_or_path, *args, config=config, **kwargs)
