"""FP4 checkpoints through transformers' from_pretrained (fp4gemm.integrations.transformers):
synthetic gpt-oss MXFP4 and ModelOpt NVFP4 (Qwen3-MoE, Mixtral) checkpoints written with
safetensors -- random nibbles, scales in the normal range, fresh each run -- loaded with
``fp4hf.from_pretrained`` (and, for ModelOpt, a plain ``AutoModelForCausalLM.from_pretrained``).

Checked: the experts land in fp4gemm's layers as the files hold them (byte for byte), the logits
equal, bit for bit, those of the same model whose layers are built by fp4gemm's own loaders
(``ExpertWeights.from_mxfp4`` / ``from_modelopt`` reading the safetensors directly), and they
agree with transformers running the experts dequantised to bf16 (gpt-oss W4A16: relative error
and top-1; ModelOpt W4A4: top-1, the activations being quantised too).

Host tier on the CPU (the layers on fp4gemm's host reference) wherever torch and transformers are
installed; the same on CUDA in the GPU tier."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (transformers' models need it)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
safetensors_torch = pytest.importorskip("safetensors.torch", reason="safetensors is not installed")

import fp4gemm  # noqa: E402
from fp4gemm.experts import ExpertWeights  # noqa: E402
from fp4gemm.integrations import transformers as fp4hf  # noqa: E402
from hf_models import _ARCHS, _COMMON, logits_against_references  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
try:
    import accelerate  # noqa: F401  (transformers' device_map needs it)

    HAS_ACCELERATE = True
except ImportError:
    HAS_ACCELERATE = False


def _load(load, path, device):
    """`load(path, dtype=bf16)` onto `device`: with device_map where accelerate is installed (the
    layers planned at load), else loaded on the CPU and moved (planned again by their first call)."""
    if HAS_ACCELERATE:
        return load(path, dtype=torch.bfloat16, device_map=device)
    return load(path, dtype=torch.bfloat16).to(device)
_E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def _unpack(p: np.ndarray) -> np.ndarray:
    """[..., K/2] uint8 -> [..., K] e2m1 values (the lower index in the low nibble)."""
    return np.stack([_E2M1[p & 0xF], _E2M1[p >> 4]], -1).reshape(*p.shape[:-1], -1)


def _save(model, path, replace, qc):
    """model.save_pretrained, then its tensors edited by replace(state_dict) and config.json given
    `qc` as its quantization_config."""
    model.save_pretrained(path)
    sd = {}
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            sd.update(safetensors_torch.load_file(os.path.join(path, f)))
            os.remove(os.path.join(path, f))
    if os.path.exists(os.path.join(path, "model.safetensors.index.json")):
        os.remove(os.path.join(path, "model.safetensors.index.json"))
    sd = replace(sd)
    safetensors_torch.save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = qc
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    return sd


def _gpt_oss(tmp_path, rng):
    cfg = transformers.GptOssConfig(vocab_size=256, hidden_size=256, intermediate_size=128, num_local_experts=8,
                                    num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=64, sliding_window=32)
    torch.manual_seed(int(rng.integers(1 << 30)))
    ref = transformers.GptOssForCausalLM(cfg).to(torch.bfloat16).eval()
    e, h, i = 8, 256, 128

    def replace(sd):
        out = {}
        for k, v in sd.items():
            if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
                n, kk = (2 * i, h) if k.endswith("gate_up_proj") else (h, i)
                out[k + "_blocks"] = torch.from_numpy(rng.integers(0, 256, (e, n, kk // 32, 16), dtype=np.uint8))
                out[k + "_scales"] = torch.from_numpy(rng.integers(118, 129, (e, n, kk // 32), dtype=np.uint8))
            elif k.endswith("_bias") and ".experts." in k:
                out[k] = (torch.from_numpy(rng.standard_normal(tuple(v.shape)).astype(np.float32)) * 0.5).to(torch.bfloat16)
            else:
                out[k] = v
        return out

    path = str(tmp_path / "gpt-oss")
    sd = _save(ref, path, replace, {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
                                                                                       "model.layers.*.mlp.router",
                                                                                       "model.embed_tokens", "lm_head"]})
    # the reference: the same model, its experts the checkpoint's values dequantised (exact in bf16)
    with torch.no_grad():
        for li, layer in enumerate(ref.model.layers):
            p = f"model.layers.{li}.mlp.experts."
            for name in ("gate_up_proj", "down_proj"):
                b, s = sd[p + name + "_blocks"].numpy(), sd[p + name + "_scales"].numpy()
                v = _unpack(b.reshape(*b.shape[:2], -1)).reshape(*s.shape, 32) * np.exp2(s.astype(np.float32) - 127)[..., None]
                w = torch.from_numpy(v.reshape(*b.shape[:2], -1)).transpose(1, 2)  # [E, K, N]: gpt-oss's layout
                getattr(layer.mlp.experts, name).copy_(w.to(torch.bfloat16))
                getattr(layer.mlp.experts, name + "_bias").copy_(sd[p + name + "_bias"])
    return path, sd, ref


# the SiLU architectures of the GPU test's small models (gpt-oss's experts are MXFP4 in its own format)
_MODELOPT_ARCHS = {arch: spec for arch, spec in _ARCHS.items() if arch != "gpt_oss"}
_EXPERT_KEY = re.compile(r"^(.*\.)experts\.(\d+)\.(\w+)\.weight$")


def _dequant_nvfp4(w, s, s2) -> np.ndarray:
    v = _unpack(w.numpy())
    return (v.reshape(v.shape[0], -1, 16) * s.float().numpy()[..., None]).reshape(v.shape) * float(s2)


def _modelopt(tmp_path, rng, arch):
    """A ModelOpt NVFP4 checkpoint of a small random `arch` model (the per-expert linears and every
    attention o_proj in NVFP4, as ModelOpt writes them), and the reference: the same model with
    those weights dequantised to bf16. Returns (path, tensors, reference, experts prefixes, names)."""
    cfg_cls, model_cls, fields = _MODELOPT_ARCHS[arch]
    cfg = getattr(transformers, cfg_cls)(**{**_COMMON, **fields})
    torch.manual_seed(int(rng.integers(1 << 30)))
    ref = getattr(transformers, model_cls)(cfg).to(torch.bfloat16).eval()

    def linear(n, k):
        w = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8))
        codes = rng.integers(0x28, 0x40, (n, k // 16), dtype=np.uint8)  # E4M3 scales in the normal range
        return w, torch.from_numpy(codes).view(torch.float8_e4m3fn), torch.tensor(float(rng.uniform(0.5, 2.0)) / 64)

    found = {}

    def replace(sd):
        out, inputs = {}, {}
        for k, v in sd.items():
            m = _EXPERT_KEY.match(k)
            if m is None and not k.endswith("self_attn.o_proj.weight"):
                out[k] = v
                continue
            n, kk = v.shape
            base = k[: -len("weight")]
            w, sc, s2 = linear(n, kk)
            out[base + "weight"], out[base + "weight_scale"], out[base + "weight_scale_2"] = w, sc, s2.float()
            # (gate and up of an expert read the same tokens: ModelOpt gives them one input_scale)
            key = (m.group(1), m.group(2), m.group(3) in ("down_proj", "w2")) if m else k
            inputs.setdefault(key, float(rng.uniform(0.01, 0.05)))
            out[base + "input_scale"] = torch.tensor(inputs[key], dtype=torch.float32)
            if m:
                found.setdefault(m.group(1), set()).add(m.group(3))
        return out

    path = str(tmp_path / arch)
    sd = _save(ref, path, replace, {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                                    "exclude_modules": ["lm_head"]})
    prefixes = sorted(found, key=lambda q: int(q.split(".layers.")[1].split(".")[0]))
    names = ("gate_proj", "up_proj", "down_proj") if "gate_proj" in found[prefixes[0]] else ("w1", "w3", "w2")
    e = getattr(cfg, "num_local_experts", None) or cfg.num_experts
    with torch.no_grad():
        for li, layer in enumerate(ref.model.layers):
            o = f"model.layers.{li}.self_attn.o_proj."
            layer.self_attn.o_proj.weight.copy_(torch.from_numpy(
                _dequant_nvfp4(sd[o + "weight"], sd[o + "weight_scale"], sd[o + "weight_scale_2"])).to(torch.bfloat16))
            p = next((q for q in prefixes if f".layers.{li}." in q), None)
            if p is None:
                continue  # (DeepSeek-V3's dense first layer)
            mods = [np.stack([_dequant_nvfp4(sd[f"{p}experts.{ex}.{nm}.weight"], sd[f"{p}experts.{ex}.{nm}.weight_scale"],
                                             sd[f"{p}experts.{ex}.{nm}.weight_scale_2"]) for ex in range(e)])
                    for nm in names]
            layer.mlp.experts.gate_up_proj.copy_(torch.from_numpy(np.concatenate(mods[:2], axis=1)).to(torch.bfloat16))
            layer.mlp.experts.down_proj.copy_(torch.from_numpy(mods[2]).to(torch.bfloat16))
    return path, sd, ref, prefixes, names


def _holders(model):
    cls = fp4hf._loading_classes()["Fp4gemmExperts"]
    return [m for m in model.modules() if isinstance(m, cls)]


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits.float()


def _compare(loaded, own_layers, ref, device, layer_rel, faithful):
    """Logits of `loaded`, then with its layers swapped for `own_layers` (bit for bit on the CPU);
    each experts module against the reference's (the checkpoint dequantised to bf16, transformers'
    own experts) on the same tokens and routing (relative error < layer_rel); the logits against
    the reference and its float32 copy (hf_models.logits_against_references; `faithful`: W4A16)."""
    ids = torch.randint(0, loaded.config.vocab_size, (8, 48), generator=torch.Generator().manual_seed(3)).to(device)
    got = _logits(loaded, ids)
    assert torch.isfinite(got).all()
    holders = _holders(loaded)
    assert len(holders) == len(own_layers)
    saved = [m._fp4gemm_layer for m in holders]
    for m, layer in zip(holders, own_layers):
        m._fp4gemm_layer = layer
    try:
        own = _logits(loaded, ids)
    finally:
        for m, layer in zip(holders, saved):
            m._fp4gemm_layer = layer
    if device == "cpu":
        assert torch.equal(got, own), "the loaded layers differ from fp4gemm's own loader's"
    else:  # (the linear-scale and blocked-scale plans may take different kernels)
        assert float((got - own).norm() / own.norm()) < 1e-2
    ref = ref.to(device)
    ref_experts = [m for m in ref.modules() if hasattr(m, "gate_up_proj") and hasattr(m, "num_experts")]
    g = torch.Generator().manual_seed(4)
    for m, r in zip(holders, ref_experts):
        t, k, e = 24, loaded.config.num_experts_per_tok, m.num_experts
        x = (torch.randn((t, m.hidden_dim), generator=g) * 0.5).to(torch.bfloat16).to(device)
        top = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)]).to(device)
        w = torch.softmax(torch.randn((t, k), generator=g), -1).to(torch.bfloat16).to(device)
        with torch.no_grad():
            a, b = m(x, top, w).float(), r(x, top, w).float()
        rel = float((a - b).norm() / b.norm())
        print(f"\n{type(r).__name__}: experts output vs the dequantised bf16 experts: relative error {rel:.2e}")
        assert torch.isfinite(a).all() and rel < layer_rel, rel
    logits_against_references(ref, got, ids, max_rel=0.1 if faithful else 0.5, faithful=faithful, tag="checkpoint")


@pytest.mark.parametrize("device,layout", [(d, None) for d in DEVICES] + [(d, "pieces") for d in DEVICES if d == "cuda"])
def test_gpt_oss_mxfp4_checkpoint_loads_as_it_is(tmp_path, device, layout):
    """layout 'pieces' (from_pretrained(weight_layout="pieces")): the module keeps the checkpoint's tensors, its layer
    runs on a packed copy (pieces, blocked scales) whose bytes are fp4gemm.moe.pack_pieces' of those tensors."""
    rng = np.random.default_rng()
    path, sd, ref = _gpt_oss(tmp_path, rng)
    load = fp4hf.from_pretrained if layout is None else (lambda *a, **k: fp4hf.from_pretrained(*a, weight_layout=layout, **k))
    loaded = _load(load, path, device)
    holders = _holders(loaded)
    assert len(holders) == 2
    for li, m in enumerate(holders):
        p = f"model.layers.{li}.mlp.experts."
        for name in ("gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales",
                     "gate_up_proj_bias", "down_proj_bias"):
            assert torch.equal(getattr(m, name).cpu(), sd[p + name]), name
        assert "swigluoai" in m._fp4gemm_layer.describe() or m._fp4gemm_layer.on_host
        assert ("weights in pieces" in m._fp4gemm_layer.describe()) == (layout == "pieces")
        if layout == "pieces":
            e, i2, h = m.num_experts, 2 * m.intermediate_dim, m.hidden_dim
            w13, s13, w2, s2 = m._fp4gemm_packed
            assert torch.equal(w13, fp4gemm.moe.pack_pieces(m.gate_up_proj_blocks.view(e, i2, h // 2), "interleaved",
                                                            format="mxfp4"))
            assert torch.equal(w2, fp4gemm.moe.pack_pieces(m.down_proj_blocks.view(e, h, i2 // 4), format="mxfp4"))
            for blocked, linear in ((s13, m.gate_up_proj_scales), (s2, m.down_proj_scales)):
                want = np.stack([fp4gemm.linear_to_blocked(x) for x in linear.cpu().numpy()])
                assert np.array_equal(blocked.cpu().numpy(), want)
    own = []
    for li in range(2):
        tensors = {k: (v.to(device) if device == "cuda" else v.numpy() if v.dtype != torch.bfloat16 else v.float().numpy())
                   for k, v in sd.items() if k.startswith(f"model.layers.{li}.mlp.experts.")}
        own.append(ExpertWeights.from_mxfp4(tensors, f"model.layers.{li}.mlp.").layer(max_tokens=512, topk=2))
    _compare(loaded, own, ref, device, layer_rel=2e-2, faithful=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", sorted(_MODELOPT_ARCHS))
def test_modelopt_nvfp4_checkpoint_loads_as_it_is(tmp_path, device, arch):
    rng = np.random.default_rng()
    path, sd, ref, prefixes, names = _modelopt(tmp_path, rng, arch)
    fp4hf.register()  # a plain from_pretrained of a ModelOpt checkpoint then takes fp4gemm's path
    loaded = _load(transformers.AutoModelForCausalLM.from_pretrained, path, device)
    holders = _holders(loaded)
    assert len(holders) == len(prefixes) > 0
    for m, p in zip(holders, prefixes):
        for ex in (0, m.num_experts - 1):
            b = f"{p}experts.{ex}."
            assert torch.equal(m.gate_up_proj[ex].cpu(), torch.cat([sd[b + names[0] + ".weight"], sd[b + names[1] + ".weight"]]))
            assert torch.equal(m.gate_up_proj_scale[ex].cpu().view(torch.uint8),
                               torch.cat([sd[b + names[0] + ".weight_scale"], sd[b + names[1] + ".weight_scale"]]).view(torch.uint8))
            assert torch.equal(m.down_proj[ex].cpu(), sd[b + names[2] + ".weight"])
            assert m.gate_up_proj_scale_2[ex, 0] == sd[b + names[0] + ".weight_scale_2"]
            assert m.gate_up_proj_scale_2[ex, 1] == sd[b + names[1] + ".weight_scale_2"]
            assert m.down_proj_scale_2[ex] == sd[b + names[2] + ".weight_scale_2"]
    for li, layer in enumerate(loaded.model.layers):  # the NVFP4 o_proj dequantised for transformers, exactly
        assert torch.equal(layer.self_attn.o_proj.weight.cpu(), ref.model.layers[li].self_attn.o_proj.weight), li
    own = []
    for p in prefixes:
        tensors = {k: (v.to(device) if device == "cuda" else (v.view(torch.uint8) if v.dtype == torch.float8_e4m3fn else v).numpy())
                   for k, v in sd.items() if k.startswith(p + "experts.")}
        own.append(ExpertWeights.from_modelopt(tensors, p).layer(max_tokens=512, topk=loaded.config.num_experts_per_tok))
    # (W4A4 against bf16 experts: the activations' quantisation noise (~16 % per layer) flips a random
    # model's near-tie logits freely; the top-1 figures are reported, not bounded)
    _compare(loaded, own, ref, device, layer_rel=0.2, faithful=False)


def test_from_pretrained_names_what_it_cannot_load(tmp_path):
    rng = np.random.default_rng()
    path, _, _ = _gpt_oss(tmp_path, rng)
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    with pytest.raises(fp4gemm.ArgumentError, match="pretrained_model_name_or_path.*awq"):
        fp4hf.from_pretrained(path)
    with pytest.raises(fp4gemm.ArgumentError, match="quantization_config"):
        fp4hf.from_pretrained(path, quantization_config=object())
    with pytest.raises(fp4gemm.ArgumentError, match="weights"):
        fp4hf.Fp4gemmConfig(checkpoint="mxfp4", weights="nvfp4")
    with pytest.raises(fp4gemm.ArgumentError, match="checkpoint"):
        fp4hf.Fp4gemmConfig(checkpoint="int4")
    with pytest.raises(fp4gemm.ArgumentError, match="quantization_config.*FP8"):
        fp4hf.Fp4gemmConfig(quant_method="modelopt", quant_algo="FP8")


@pytest.mark.parametrize("device", DEVICES)
def test_experts_compile_without_graph_breaks(tmp_path, device):
    """torch.compile(fullgraph=True) of a loaded experts module and of a whole MoE decoder layer:
    the layer runs through fp4gemm::experts_layer_run, bit for bit the eager result."""
    rng = np.random.default_rng()
    path, _, _ = _gpt_oss(tmp_path, rng)
    loaded = _load(fp4hf.from_pretrained, path, device)
    experts = _holders(loaded)[0]
    g = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    t, k = 5, loaded.config.num_experts_per_tok
    x = torch.randn((t, experts.hidden_dim), generator=g).to(torch.bfloat16).to(device)
    top = torch.stack([torch.randperm(experts.num_experts, generator=g)[:k] for _ in range(t)]).to(device)
    w = torch.softmax(torch.randn((t, k), generator=g), -1).to(torch.bfloat16).to(device)
    torch._dynamo.reset()
    with torch.no_grad():
        want = experts(x, top, w)
        got = torch.compile(experts, fullgraph=True, backend="aot_eager")(x, top, w)
        assert torch.equal(got, want)
        block = loaded.model.layers[0].mlp  # router + experts
        h = torch.randn((1, t, experts.hidden_dim), generator=g).to(torch.bfloat16).to(device)
        want_b = block(h)[0]
        got_b = torch.compile(block, fullgraph=True, backend="aot_eager")(h)[0]
        assert torch.equal(got_b, want_b)


def test_a_checkpoint_tensor_of_the_wrong_shape_is_named(tmp_path):
    """transformers does not check shapes when a quantizer loads: fp4gemm checks what landed in its
    experts before planning and names the tensor."""
    rng = np.random.default_rng()
    path, sd, _ = _gpt_oss(tmp_path, rng)
    f = os.path.join(path, "model.safetensors")
    tensors = safetensors_torch.load_file(f)
    key = "model.layers.1.mlp.experts.down_proj_blocks"
    tensors[key] = tensors[key][:, :-32].contiguous()  # a row block short
    safetensors_torch.save_file(tensors, f)
    with pytest.raises(fp4gemm.ArgumentError, match="down_proj_blocks"):
        fp4hf.from_pretrained(path, dtype=torch.bfloat16)
