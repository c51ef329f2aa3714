"""GPU tier: fp4gemm as transformers' experts implementation (fp4gemm.integrations.transformers).

Small random models of real architectures (Qwen3-MoE, Qwen2-MoE, Mixtral, DeepSeek-V3; gpt-oss with
its biases, swigluoai and interleaved, transposed experts) are converted with quantize_experts (MXFP4 W4A16) and compared
with the same model whose experts hold the dequantised FP4 weights in bf16 and run transformers'
own experts, and with that model in float32: the logits of a fixed prompt batch
(hf_models.logits_against_references), then 32 greedy tokens (reported). Qwen3-MoE and gpt-oss also
at their real layer sizes (hf_models.REAL_SIZES)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tier needs torch and a CUDA device)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fp4gemm  # noqa: E402
from fp4gemm.integrations import transformers as fp4hf  # noqa: E402


from hf_models import REAL_SIZES, _ARCHS, _dequantised_into, _experts_modules, _model, compare_with_dequantised  # noqa: E402


@pytest.mark.parametrize("arch", sorted(_ARCHS))
def test_quantize_experts_matches_the_dequantised_model(arch):
    ref = _model(arch)
    q = copy.deepcopy(ref)
    converted = fp4hf.quantize_experts(q, free_bf16=False)
    assert converted == _experts_modules(ref) > 0
    assert q.config._experts_implementation == "fp4gemm"
    assert _dequantised_into(ref, q) == converted
    compare_with_dequantised(arch, ref, q, "cuda")


@pytest.mark.parametrize("arch", sorted(REAL_SIZES))
def test_real_layer_sizes_match_the_dequantised_model(arch):
    """The same comparison at the real hidden / expert sizes of Qwen3-30B-A3B and gpt-oss-120b (32
    experts, 2 layers): the layers take the decode path for small T (the bound the layer chooses)
    and the general path beyond."""
    ref = _model(arch, "cuda", **REAL_SIZES[arch])
    q = copy.deepcopy(ref)
    assert fp4hf.quantize_experts(q, free_bf16=False) == _experts_modules(ref) > 0
    assert _dequantised_into(ref, q) == _experts_modules(ref)
    compare_with_dequantised(f"{arch} (real sizes)", ref, q, "cuda", prompts=2, length=32, generate=False)
    with torch.no_grad():  # decode steps (T 1) through generate, greedy, with the dynamic and the static cache
        prompt = torch.zeros((1, 4), dtype=torch.long, device="cuda")
        out = q.generate(prompt, max_new_tokens=4, do_sample=False)
        static = q.generate(prompt, max_new_tokens=4, do_sample=False, cache_implementation="static")
    assert out.shape == static.shape == (1, 8)


def test_from_pretrained_with_the_quantization_config(tmp_path):
    """A bf16 checkpoint (a small random Qwen3-MoE, saved) loaded with
    ``quantization_config=Fp4gemmConfig()``: its experts run fp4gemm, with the bits of
    quantize_experts on the same weights."""
    ref = _model("qwen3_moe")
    ref.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16, device_map="cuda",
                                                               quantization_config=fp4hf.Fp4gemmConfig())
    assert loaded.config._experts_implementation == "fp4gemm"
    fp4hf.quantize_experts(ref)
    pairs = [(a, b) for a, b in zip(loaded.modules(), ref.modules()) if hasattr(b, "_fp4gemm_tensors")]
    assert len(pairs) == _experts_modules(_model("qwen3_moe"))
    for a, b in pairs:  # the same FP4 experts, bit for bit
        for x, y in zip(a._fp4gemm_tensors[:4], b._fp4gemm_tensors[:4]):
            assert torch.equal(x, y)
    ids = torch.randint(0, ref.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(2)).cuda()
    with torch.no_grad():
        la, lb = loaded(ids).logits.float(), ref(ids).logits.float()
    # (not bit for bit: transformers' loading may keep other modules in another dtype or order)
    assert float((la - lb).norm() / lb.norm()) < 1e-2


def test_compiled_experts_and_cuda_graphs():
    """torch.compile(fullgraph=True) (inductor) of a converted experts module: bit for bit its eager
    output; mode="reduce-overhead" (inductor's CUDA graphs) replays it with new routings."""
    q = _model("qwen3_moe")
    fp4hf.quantize_experts(q)
    experts = next(m for m in q.modules() if hasattr(m, "_fp4gemm_layer"))
    g = torch.Generator(device="cuda").manual_seed(int(np.random.default_rng().integers(1 << 30)))
    k, h = q.config.num_experts_per_tok, q.config.hidden_size

    def batch(t):
        x = torch.randn((t, h), generator=g, device="cuda").to(torch.bfloat16)
        top = torch.stack([torch.randperm(experts.num_experts, generator=g, device="cuda")[:k] for _ in range(t)])
        w = torch.softmax(torch.randn((t, k), generator=g, device="cuda"), -1).to(torch.bfloat16)
        return x, top, w

    torch._dynamo.reset()
    with torch.no_grad():
        full = torch.compile(experts, fullgraph=True)
        graphs = torch.compile(experts, mode="reduce-overhead", fullgraph=True)
        for t in (1, 3, 3, 3, 7):
            x, top, w = batch(t)
            want = experts(x, top, w)
            assert torch.equal(full(x, top, w), want), t
            assert torch.equal(graphs(x, top, w).clone(), want), t


@pytest.mark.parametrize("arch,weights", [("qwen3_moe", "mxfp4"), ("gpt_oss", "mxfp4"), ("qwen3_moe", "nvfp4")])
def test_weight_layout_pieces_by_default_and_rows_on_request(arch, weights):
    """quantize_experts' default for W4A16 and NVFP4 W4A4 on CUDA: the experts in pieces with blocked scales, byte for byte
    fp4gemm.moe.pack_pieces of the rows weight_layout="rows" keeps (the same quantiser's output) and the library's
    blocked relayout of its scales; both layers agree on a prompt batch (general path) and on single tokens (decode
    path), each a different kernel pair; bad weight_layout values named."""
    ref = _model(arch)
    rows, pieces = copy.deepcopy(ref), copy.deepcopy(ref)
    # NVFP4: W4A4, the activations' global scales given (both layers the same)
    kw = dict(weights="nvfp4", activations="fp4", a1_scale=0.01, a2_scale=0.01) if weights == "nvfp4" else {}
    n = fp4hf.quantize_experts(rows, free_bf16=False, weight_layout="rows", **kw)
    assert fp4hf.quantize_experts(pieces, free_bf16=False, **kw) == n > 0
    pairs = [(a, b) for a, b in zip(rows.modules(), pieces.modules()) if hasattr(a, "_fp4gemm_tensors")]
    assert len(pairs) == n
    for a, b in pairs:
        assert a._fp4gemm_weight_layout == "rows" and b._fp4gemm_weight_layout == "pieces"
        assert "weights in pieces" in b._fp4gemm_layer.describe()
        assert "weights in pieces" not in a._fp4gemm_layer.describe()
        gate_up = "stacked" if getattr(a, "is_concatenated", True) else "interleaved"
        p13, s13, p2, s2 = a._fp4gemm_tensors[:4]
        q13, t13, q2, t2 = b._fp4gemm_tensors[:4]
        assert torch.equal(q13, fp4gemm.moe.pack_pieces(p13, gate_up, format=weights))
        assert torch.equal(q2, fp4gemm.moe.pack_pieces(p2, format=weights))
        for blocked, linear in ((t13, s13), (t2, s2)):
            want = np.stack([fp4gemm.linear_to_blocked(x) for x in linear.cpu().numpy()])
            assert np.array_equal(blocked.cpu().numpy(), want)
    g = torch.Generator(device="cuda").manual_seed(int(np.random.default_rng().integers(1 << 30)))
    ids = torch.randint(0, ref.config.vocab_size, (2, 16), generator=g, device="cuda")
    with torch.no_grad():
        la, lb = rows(ids).logits.float(), pieces(ids).logits.float()
    assert torch.isfinite(lb).all() and float((la - lb).norm() / la.norm()) < 1e-2
    for a, b in pairs:  # single tokens: the decode path on both
        k, h = ref.config.num_experts_per_tok, ref.config.hidden_size
        for _ in range(3):
            x = torch.randn((1, h), generator=g, device="cuda").to(torch.bfloat16)
            top = torch.randperm(a.num_experts, generator=g, device="cuda")[:k][None]
            w = torch.softmax(torch.randn((1, k), generator=g, device="cuda"), -1).to(torch.bfloat16)
            with torch.no_grad():
                ya, yb = a(x, top, w).float(), b(x, top, w).float()
            assert torch.isfinite(yb).all() and float((ya - yb).norm() / ya.norm().clamp_min(1e-30)) < 1e-2
    for bad in ("tiles", 1):
        with pytest.raises(fp4gemm.ArgumentError) as err:
            fp4hf.quantize_experts(copy.deepcopy(ref), weight_layout=bad)
        assert err.value.argument == "weight_layout"
