"""Host tier: fp4gemm.integrations.transformers imports without torch or transformers (both are
needed only when its functions run) and names bad arguments before touching either."""

from __future__ import annotations

import subprocess
import sys

import pytest

import fp4gemm


def test_import_is_light():
    code = ("import sys, fp4gemm.integrations.transformers as t; "
            "print('torch' in sys.modules, 'transformers' in sys.modules, t.IMPLEMENTATION)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "fp4gemm"], out


@pytest.mark.parametrize("kwargs,argument", [(dict(weights="int4"), "weights"),
                                             (dict(activations="fp8"), "activations"),
                                             (dict(weights="nvfp4", activations="bf16"), "activations"),
                                             (dict(weights="nvfp4", activations="fp4"), "a1_scale")])
def test_bad_arguments_named_first(kwargs, argument):
    from fp4gemm.integrations import transformers as fp4hf

    with pytest.raises(fp4gemm.ArgumentError) as err:
        fp4hf.quantize_experts(object(), **kwargs)
    assert err.value.argument == argument


def test_forward_of_an_unconverted_module_is_named():
    from fp4gemm.integrations import transformers as fp4hf

    class Experts:
        pass

    with pytest.raises(fp4gemm.ArgumentError) as err:
        fp4hf.experts_forward(Experts(), None, None, None)
    assert err.value.argument == "experts_implementation"
