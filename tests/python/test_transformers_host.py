"""Host tier: fp4gemm.integrations.transformers imports without torch or transformers (both are
needed only when its functions run) and names bad arguments before touching either."""

from __future__ import annotations

import subprocess
import sys

import pytest

import fp4gemm


def test_import_is_light():
    """The integration imports nothing fp4gemm itself does not (fp4gemm registers its torch ops
    when torch is installed) and never transformers."""
    code = ("import sys, fp4gemm; torch = 'torch' in sys.modules; import fp4gemm.integrations.transformers as t; "
            "print(('torch' in sys.modules) == torch, 'transformers' in sys.modules, t.IMPLEMENTATION)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False", "fp4gemm"], out


@pytest.mark.parametrize("kwargs,argument", [(dict(weights="int4"), "weights"),
                                             (dict(activations="fp8"), "activations"),
                                             (dict(weights="nvfp4", activations="bf16"), "activations"),
                                             (dict(weights="nvfp4", activations="fp4"), "a1_scale"),
                                             (dict(weight_layout="tiles"), "weight_layout")])
def test_bad_arguments_named_first(kwargs, argument):
    from fp4gemm.integrations import transformers as fp4hf

    with pytest.raises(fp4gemm.ArgumentError) as err:
        fp4hf.quantize_experts(object(), **kwargs)
    assert err.value.argument == argument


def test_blocked_scales_are_the_librarys_blocked_layout():
    """The integration's scale relayout for weights in pieces (NumPy here; the same view / permute on torch tensors
    on the GPU tier) against fp4gemm.linear_to_blocked, expert by expert, at shapes with partial atoms."""
    import numpy as np

    from fp4gemm.integrations import transformers as fp4hf

    rng = np.random.default_rng()
    for e, rows, cols in ((3, 256, 90), (2, 200, 7), (1, 128, 4), (4, 2880, 90)):
        s = rng.integers(0, 256, (e, rows, cols), dtype=np.uint8)
        got = fp4hf._blocked_scales(s)
        want = np.stack([fp4gemm.linear_to_blocked(s[i]) for i in range(e)])
        assert got.shape == want.shape and np.array_equal(got, want), (e, rows, cols)


def test_pieces_where_they_apply():
    """weight_layout None: pieces for W4A16 and NVFP4 W4A4 on CUDA where H and I pack, rows otherwise (an FP4 checkpoint: rows unless
    asked); 'pieces' refused by name on the CPU (quantize_experts) and for shapes that do not pack."""
    from fp4gemm.integrations import transformers as fp4hf

    assert fp4hf._pieces(None, "bf16", True, 2880, 2880, weights="mxfp4")
    assert not fp4hf._pieces(None, "fp4", True, 2880, 2880, weights="mxfp4")  # MXFP4 W4A4: rows
    assert fp4hf._pieces(None, "fp4", True, 2880, 2880, weights="nvfp4")  # NVFP4 W4A4: pieces
    assert not fp4hf._pieces(None, "fp4", True, 2880, 2880, checkpoint=True, weights="nvfp4")
    assert not fp4hf._pieces(None, "bf16", False, 2880, 2880, weights="mxfp4")
    assert not fp4hf._pieces(None, "bf16", True, 2880, 2880, checkpoint=True, weights="mxfp4")
    assert not fp4hf._pieces(None, "bf16", True, 2880, 48, weights="mxfp4")
    assert fp4hf._pieces("pieces", "fp4", True, 2048, 768, checkpoint=True, weights="mxfp4")
    assert not fp4hf._pieces("pieces", "bf16", False, 2048, 768, checkpoint=True, weights="mxfp4")  # (the CPU: rows until moved)
    assert not fp4hf._pieces("rows", "bf16", True, 2048, 768, weights="mxfp4")
    for args, kw in ((("pieces", "bf16", False, 2048, 768), {"weights": "mxfp4"}),
                     (("pieces", "bf16", True, 2048, 48), {"weights": "mxfp4"})):
        with pytest.raises(fp4gemm.ArgumentError) as err:
            fp4hf._pieces(*args, **kw)
        assert err.value.argument == "weight_layout"


def test_forward_of_an_unconverted_module_is_named():
    from fp4gemm.integrations import transformers as fp4hf

    class Experts:
        pass

    with pytest.raises(fp4gemm.ArgumentError) as err:
        fp4hf.experts_forward(Experts(), None, None, None)
    assert err.value.argument == "experts_implementation"


def test_quantization_config_registers_and_round_trips():
    """Fp4gemmConfig: registered with transformers (quant_method "fp4gemm") the first time it is
    named, serialised and read back through AutoQuantizationConfig; its arguments checked by name.
    Needs transformers (not torch)."""
    pytest.importorskip("transformers", reason="transformers is not installed")
    from transformers.quantizers.auto import AUTO_QUANTIZER_MAPPING, AutoQuantizationConfig

    from fp4gemm.integrations import transformers as fp4hf

    cfg = fp4hf.Fp4gemmConfig(weights="mxfp4", activations="bf16", max_tokens=512, decode_tokens=2)
    d = cfg.to_dict()
    assert d["quant_method"] == "fp4gemm" and d["max_tokens"] == 512 and d["decode_tokens"] == 2
    back = AutoQuantizationConfig.from_dict(d)
    assert type(back) is type(cfg) and back.to_dict() == d
    assert AUTO_QUANTIZER_MAPPING["fp4gemm"] is fp4hf.Fp4gemmHfQuantizer
    q = fp4hf.Fp4gemmHfQuantizer(cfg, pre_quantized=False)
    assert q.is_trainable is False and q.is_serializable() is False
    for kwargs, argument in [(dict(weights="int8"), "weights"), (dict(max_tokens=0), "max_tokens"),
                             (dict(decode_tokens=513), "decode_tokens"), (dict(decode_tokens=-1), "decode_tokens"),
                             (dict(weights="nvfp4", activations="fp4"), "a1_scale")]:
        with pytest.raises(fp4gemm.ArgumentError) as err:
            fp4hf.Fp4gemmConfig(**kwargs)
        assert err.value.argument == argument
