"""Host tier (where torch and transformers are installed; no GPU): fp4gemm as transformers'
experts implementation on the CPU, the layers on fp4gemm's host reference (exact, slow).

Each architecture's small random model converted with quantize_experts (MXFP4 W4A16) against the
same model whose experts hold the dequantised FP4 weights (logits, top-1), generate(), and
torch.compile(fullgraph=True) of an experts module (the layer behind the torch op
fp4gemm::experts_layer_run: no graph break), bit for bit its eager output."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (transformers' models need it)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

from fp4gemm.integrations import transformers as fp4hf  # noqa: E402
from hf_models import _ARCHS, _dequantised_into, _experts_modules, _model, compare_with_dequantised  # noqa: E402


@pytest.mark.parametrize("arch", sorted(_ARCHS))
def test_quantize_experts_on_the_cpu(arch):
    ref = _model(arch, "cpu")
    q = copy.deepcopy(ref)
    converted = fp4hf.quantize_experts(q, free_bf16=False)
    assert converted == _experts_modules(ref) > 0
    assert q.config._experts_implementation == "fp4gemm"
    assert _dequantised_into(ref, q) == converted
    compare_with_dequantised(arch, ref, q, "cpu", prompts=2, length=24, generate=False, max_rel=0.1)
    with torch.no_grad():  # generate() runs (8 greedy tokens)
        out = q.generate(torch.zeros((1, 4), dtype=torch.long), max_new_tokens=8, do_sample=False)
    assert out.shape == (1, 12)
    # torch.compile(fullgraph=True) of one converted experts module: bit for bit eager
    experts = next(m for m in q.modules() if hasattr(m, "_fp4gemm_layer"))
    g = torch.Generator().manual_seed(5)
    t, k = 6, q.config.num_experts_per_tok
    h = q.config.hidden_size
    x = torch.randn((t, h), generator=g).to(torch.bfloat16)
    top = torch.stack([torch.randperm(experts.num_experts, generator=g)[:k] for _ in range(t)])
    w = torch.softmax(torch.randn((t, k), generator=g), -1).to(torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():
        want = experts(x, top, w)
        got = torch.compile(experts, fullgraph=True, backend="aot_eager")(x, top, w)
    assert torch.equal(got, want)
