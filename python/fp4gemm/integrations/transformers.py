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

Importing this module imports neither torch nor transformers (both are needed only when called).

Not yet here (issue 53): loading ModelOpt / gpt-oss checkpoints' experts without a bf16 pass, saving a
converted model, and NVFP4 W4A4 activation scales from calibration.
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
    ``quantize_experts``; its layer runs the tokens (in slices of the layer's ``max_tokens``)."""
    layer = getattr(self, "_fp4gemm_layer", None)
    if layer is None:
        raise _argument_error(
            "experts_implementation",
            f"{type(self).__name__} was not converted by fp4gemm.integrations.transformers.quantize_experts")
    x = hidden_states
    if x.dtype != layer_dtype():
        x = x.to(layer_dtype())
    ids, weights = top_k_index, top_k_weights
    t, cap = x.shape[0], self._fp4gemm_max_tokens
    if t <= cap:
        out = layer.run(x, ids, weights)
    else:
        import torch

        out = torch.empty_like(x)
        for s in range(0, t, cap):
            layer.run(x[s:s + cap], ids[s:s + cap], weights[s:s + cap], out=out[s:s + cap])
    return out if out.dtype == hidden_states.dtype else out.to(hidden_states.dtype)


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


def _check_options(weights: str, activations: str, a1_scale: Optional[float], a2_scale: Optional[float],
                   max_tokens: int, decode_tokens: int) -> None:
    if weights not in _FORMATS:
        raise _argument_error("weights", f"{weights!r} is not one of 'mxfp4', 'nvfp4'")
    if activations not in ("bf16", "fp4"):
        raise _argument_error("activations", f"{activations!r} is not one of 'bf16', 'fp4'")
    if activations == "bf16" and weights != "mxfp4":
        raise _argument_error("activations", "W4A16 (bf16 activations) runs MXFP4 weights; use weights='mxfp4'")
    if activations == "fp4" and weights == "nvfp4" and (a1_scale is None or a2_scale is None):
        raise _argument_error("a1_scale", "NVFP4 W4A4 needs the activations' global scales a1_scale and a2_scale")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise _argument_error("max_tokens", f"must be a positive int, got {max_tokens!r}")
    if not isinstance(decode_tokens, int) or not 0 <= decode_tokens <= 8:
        raise _argument_error("decode_tokens", f"must be an int in 0..8, got {decode_tokens!r}")


def _quantization_classes() -> dict:
    """Fp4gemmConfig and Fp4gemmHfQuantizer, defined (and registered with transformers) once."""
    if _CLASSES:
        return _CLASSES
    from transformers.quantizers.auto import (AUTO_QUANTIZATION_CONFIG_MAPPING, AUTO_QUANTIZER_MAPPING,
                                              register_quantization_config, register_quantizer)
    from transformers.quantizers.base import HfQuantizer
    from transformers.utils.quantization_config import QuantizationConfigMixin

    class Fp4gemmConfig(QuantizationConfigMixin):
        """transformers quantization config: the experts of a bf16 checkpoint quantised at load
        (``quantize_experts``' arguments). Everything else stays bf16."""

        def __init__(self, weights: str = "mxfp4", activations: str = "bf16", max_tokens: int = 4096,
                     a1_scale: Optional[float] = None, a2_scale: Optional[float] = None, decode_tokens: int = 3,
                     **kwargs: Any):
            _check_options(weights, activations, a1_scale, a2_scale, max_tokens, decode_tokens)
            self.quant_method = IMPLEMENTATION
            self.weights, self.activations, self.max_tokens = weights, activations, max_tokens
            self.a1_scale, self.a2_scale, self.decode_tokens = a1_scale, a2_scale, decode_tokens

    class Fp4gemmHfQuantizer(HfQuantizer):
        """Loads the bf16 checkpoint as it is, then converts the experts (quantize_experts)."""

        requires_calibration = False

        def validate_environment(self, *args: Any, **kwargs: Any) -> None:
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError("fp4gemm: quantization_config=Fp4gemmConfig needs a CUDA device (Hopper)")

        def update_dtype(self, dtype: Any) -> Any:
            import torch

            return torch.bfloat16 if dtype is None else dtype

        def _process_model_after_weight_loading(self, model: Any, **kwargs: Any) -> Any:
            c = self.quantization_config
            quantize_experts(model, weights=c.weights, activations=c.activations, max_tokens=c.max_tokens,
                             a1_scale=c.a1_scale, a2_scale=c.a2_scale, decode_tokens=c.decode_tokens)
            return model

        def is_serializable(self, *args: Any, **kwargs: Any) -> bool:
            return False  # (the FP4 experts are the layers' own; save the bf16 checkpoint instead)

        @property
        def is_trainable(self) -> bool:
            return False

    if IMPLEMENTATION not in AUTO_QUANTIZATION_CONFIG_MAPPING:
        register_quantization_config(IMPLEMENTATION)(Fp4gemmConfig)
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
                     a1_scale: Optional[float] = None, a2_scale: Optional[float] = None, decode_tokens: int = 3,
                     free_bf16: bool = True) -> int:
    """Converts every experts module of ``model`` (on a CUDA device, bf16 weights) to fp4gemm and
    switches the model to the ``"fp4gemm"`` experts implementation. Returns how many modules.

    weights: ``"mxfp4"`` (default) or ``"nvfp4"``; activations: ``"bf16"`` (W4A16, MXFP4 weights
    only: no calibration needed) or ``"fp4"`` (W4A4 in the weights' format; NVFP4 needs the
    activations' global scales ``a1_scale`` / ``a2_scale``). max_tokens: the layer's workspace (a
    call with more tokens runs in slices). free_bf16: replace the bf16 expert parameters by empty
    ones (the layer holds the FP4 copies). A module whose activation fp4gemm does not have is left
    as it is (a warning says which)."""
    _check_options(weights, activations, a1_scale, a2_scale, max_tokens, decode_tokens)
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
        if not w13.is_cuda:
            raise _argument_error("model", f"{name}: the experts' weights must be on a CUDA device")
        if getattr(m, "is_transposed", False):  # [E, H, 2I] / [E, I, H] -> [E, 2I, H] / [E, H, I]
            w13, w2 = w13.transpose(1, 2), w2.transpose(1, 2)
        w13 = w13.to(torch.bfloat16).contiguous()
        w2 = w2.to(torch.bfloat16).contiguous()
        gate_up = "stacked" if getattr(m, "is_concatenated", True) else "interleaved"
        p13, s13, g13 = _quantize_rows(w13, weights)
        p2, s2, g2 = _quantize_rows(w2, weights)
        kw = dict(max_tokens=max_tokens, topk=int(topk), act_format=act_format, activation=activation, gate_up=gate_up,
                  scale_layout="linear", decode_tokens=decode_tokens)
        if s_alpha is not None:
            kw.update(swiglu_alpha=s_alpha, swiglu_limit=s_limit)
        if g13 is not None:
            kw.update(w13_alpha=g13, w2_alpha=g2)
        if act_format == "nvfp4":
            kw.update(a1_scale=float(a1_scale), a2_scale=float(a2_scale))
        if getattr(m, "has_bias", False):
            kw.update(w13_bias=m.gate_up_proj_bias.detach().to(torch.bfloat16).contiguous(),
                      w2_bias=m.down_proj_bias.detach().to(torch.bfloat16).contiguous())
        m._fp4gemm_tensors = (p13, s13, p2, s2, g13, g2, kw.get("w13_bias"), kw.get("w2_bias"))
        m._fp4gemm_layer = MoeLayer(p13, s13, p2, s2, **kw)
        m._fp4gemm_max_tokens = max_tokens
        if free_bf16:
            for pname in ("gate_up_proj", "down_proj"):
                setattr(m, pname, torch.nn.Parameter(torch.empty(0, dtype=torch.bfloat16, device=w13.device),
                                                     requires_grad=False))
        converted += 1
    if converted:
        model.set_experts_implementation(IMPLEMENTATION)
    return converted
