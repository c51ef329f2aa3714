"""Small random transformers models of the architectures fp4gemm.integrations.transformers
targets, and their comparison with fp4gemm's experts (shared by the host and GPU tiers)."""

from __future__ import annotations

import copy

import numpy as np
import torch
import transformers

import fp4gemm
from pieces_layout import rows_of_pieces

_COMMON = dict(vocab_size=512, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)

# arch -> (config class, model class, config fields): tiny random models of each architecture the
# integration targets (Qwen2-MoE: a shared expert; DeepSeek-V3: grouped routing, a shared expert, a
# dense first layer and routed_scaling_factor; gpt-oss: biases, swigluoai, interleaved transposed experts)
_ARCHS = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(intermediate_size=512, moe_intermediate_size=128, num_experts=16, num_experts_per_tok=4)),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  dict(intermediate_size=512, moe_intermediate_size=128, shared_expert_intermediate_size=256,
                       num_experts=16, num_experts_per_tok=4)),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(intermediate_size=128, num_local_experts=8, num_experts_per_tok=2)),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    dict(num_hidden_layers=3, first_k_dense_replace=1, intermediate_size=512, moe_intermediate_size=128,
                         n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2, n_shared_experts=1,
                         kv_lora_rank=64, q_lora_rank=96, qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=64,
                         num_key_value_heads=4)),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                dict(intermediate_size=256, num_local_experts=16, num_experts_per_tok=4, head_dim=64, sliding_window=64)),
}


def _model(arch, device="cuda", **sizes):
    """A random model of `arch` (`sizes` override its config: real hidden sizes; such a model is
    built on `device` directly rather than in float32 on the host first)."""
    cfg_cls, model_cls, fields = _ARCHS[arch]
    cfg = getattr(transformers, cfg_cls)(**{**_COMMON, **fields, **sizes})
    torch.manual_seed(0)
    if not sizes:
        return getattr(transformers, model_cls)(cfg).to(device=device, dtype=torch.bfloat16).eval()
    with torch.device(device):
        return getattr(transformers, model_cls)(cfg).to(dtype=torch.bfloat16).eval()


# Real layer sizes (hidden, expert intermediate, heads) of the two models the benchmarks use, with
# 32 experts and 2 layers: Qwen3-30B-A3B and gpt-oss-120b.
REAL_SIZES = {
    "qwen3_moe": dict(hidden_size=2048, moe_intermediate_size=768, intermediate_size=6144, num_experts=32,
                      num_experts_per_tok=8, num_attention_heads=32, num_key_value_heads=4, head_dim=128),
    "gpt_oss": dict(hidden_size=2880, intermediate_size=2880, num_local_experts=32, num_experts_per_tok=4,
                    num_attention_heads=64, num_key_value_heads=8, head_dim=64, sliding_window=128),
}


def _experts_modules(model):
    return sum(1 for m in model.modules() if hasattr(m, "gate_up_proj") and hasattr(m, "num_experts"))


def _dequantised_into(ref, q):
    """The FP4 weights the fp4gemm layers hold, dequantised (exactly: e2m1 x 2^e is a bf16), into
    ref's experts in transformers' own layout."""
    n = 0
    for (name, mq), (_, mr) in zip(q.named_modules(), ref.named_modules()):
        t = getattr(mq, "_fp4gemm_tensors", None)
        if t is None:
            continue
        p13, s13, p2, s2 = (x.cpu().numpy() if hasattr(x, "cpu") else x for x in t[:4])
        e = p13.shape[0]
        if getattr(mq, "_fp4gemm_weight_layout", "rows") == "pieces":  # back to rows and linear scales
            h = p2.shape[1] * 16
            i = p13.shape[1] * 8
            gate_up = "stacked" if getattr(mq, "is_concatenated", True) else "interleaved"
            f = mq._fp4gemm_weight_format
            p13, p2 = rows_of_pieces(p13, 2 * i, h, gate_up, f), rows_of_pieces(p2, h, i, None, f)
            s13 = np.stack([fp4gemm.blocked_to_linear(s13[x], 2 * i, h // 32) for x in range(e)])
            s2 = np.stack([fp4gemm.blocked_to_linear(s2[x], h, i // 32) for x in range(e)])

        def dq(p, s):
            rows, half = p.shape[1], p.shape[2]
            d = np.stack([fp4gemm.dequantize(p[i], s[i], "mxfp4", "linear", 2 * half) for i in range(e)])
            return torch.from_numpy(d).to(torch.bfloat16).to(mr.gate_up_proj.device)

        w13, w2 = dq(p13, s13), dq(p2, s2)
        if getattr(mr, "is_transposed", False):
            w13, w2 = w13.transpose(1, 2).contiguous(), w2.transpose(1, 2).contiguous()
        with torch.no_grad():
            mr.gate_up_proj.copy_(w13)
            mr.down_proj.copy_(w2)
        n += 1
    return n


def logits_against_references(ref, got, ids, max_rel, faithful=True, tag=""):
    """`got` (a model's logits on `ids`, experts on fp4gemm) against `ref` (the same FP4 weights
    dequantised to bf16, transformers' own experts) and against `ref` in float32 (the exact model).

    A random model's logits have near ties that any rounding flips: transformers' own bf16 experts
    agree with the float32 model on top-1 at only ~94-98 % of positions, and a routing decision
    flipped on a near tie moves that position's logits a lot -- enough that the bf16 model's
    whole-tensor relative error to the float32 model reaches 0.08-0.19 on the gpt-oss checkpoints
    (measured, 12 draws). So the errors are taken per position and checked by quantile: the median
    relative error to the bf16 model < max_rel and its 90th percentile < 2 max_rel. `faithful`
    (W4A16) asks fp4gemm to be about as close to the float32 model as the bf16 experts are: the
    median and the 90th percentile of its per-position relative error within 1.5x of theirs
    (+1e-3); top-1 flips against float32 at most theirs plus 5 % of the positions (or three), and
    on the positions with a clear float32 winner (a top-2 gap of at least a tenth of the logits'
    std) at most theirs plus 5 % of those (or three). A routing flip can move even a clear winner,
    in either model: on 15 gpt-oss MXFP4 checkpoints of 96 positions (~70 clear) fp4gemm's host
    path flipped 0-4 clear winners and the bf16 experts 0-4 (fp4gemm minus bf16: -2 … +2); on 14
    of 384 positions (~290 clear) -2 … +2 clear and -5 … +7 in all. Its median and 90th percentile
    errors against float32 were 0.95-1.03x the bf16 experts'. (W4A4 NVFP4 checkpoints, 56 draws:
    median up to 0.26, 90th percentile up to 0.75 against the bf16 model -- the activations'
    quantisation, compounded over the layers.) A lost bias or scale, or a wrong tenth of the
    positions, fails these (a lost bias or scale flips tens of percent of the top-1s). The
    whole-tensor relative error is reported, not checked."""
    with torch.no_grad():
        lr = ref(ids).logits.float()
        l32 = copy.deepcopy(ref).float()(ids).logits.float()

    def rel(a, b):
        return float((a - b).norm() / b.norm())

    def per_position(a, b):  # relative error of each position's logits
        return ((a - b).norm(dim=-1) / b.norm(dim=-1)).flatten()

    def q(x, p):
        return float(torch.quantile(x, p))

    def flips(a, b, where=None):
        d = a.argmax(-1) != b.argmax(-1)
        return int(d[where].sum()) if where is not None else int(d.sum())

    n = got.shape[0] * got.shape[1]
    top2 = l32.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) >= 0.1 * l32.std()
    e, e32, e32_bf16 = per_position(got, lr), per_position(got, l32), per_position(lr, l32)
    r = dict(rel=rel(got, lr), med=q(e, 0.5), q90=q(e, 0.9), top1=1 - flips(got, lr) / n, n=n,
             clear=int(clear.sum()), clear_flips=flips(got, l32, clear), clear_flips_bf16=flips(lr, l32, clear),
             rel32=q(e32, 0.5), rel32_bf16=q(e32_bf16, 0.5), q90_32=q(e32, 0.9), q90_32_bf16=q(e32_bf16, 0.9),
             flips32=flips(got, l32), flips32_bf16=flips(lr, l32))
    print(f"\n{tag}: logits vs the dequantised bf16 model: per-position relative error median {r['med']:.2e}, "
          f"90th percentile {r['q90']:.2e} (whole tensor {r['rel']:.2e}), top-1 agreement {100 * r['top1']:.2f} %; "
          f"vs the float32 model: top-1 kept at {r['clear'] - r['clear_flips']} / {r['clear']} positions with a clear "
          f"winner (bf16 experts {r['clear'] - r['clear_flips_bf16']}), median {r['rel32']:.2e} / 90th percentile "
          f"{r['q90_32']:.2e} (transformers' bf16 experts {r['rel32_bf16']:.2e} / {r['q90_32_bf16']:.2e}), "
          f"top-1 {100 * (1 - r['flips32'] / n):.2f} % "
          f"(bf16 experts {100 * (1 - r['flips32_bf16'] / n):.2f} %) of {n}")
    assert torch.isfinite(got).all() and r["med"] < max_rel and r["q90"] < 2 * max_rel, r
    if faithful:
        assert r["clear_flips"] <= r["clear_flips_bf16"] + max(3, r["clear"] // 20), r
        assert r["rel32"] <= 1.5 * r["rel32_bf16"] + 1e-3, r
        assert r["q90_32"] <= 1.5 * r["q90_32_bf16"] + 1e-3, r
        assert r["flips32"] <= r["flips32_bf16"] + max(3, n // 20), r
    return r


def compare_with_dequantised(arch, ref, q, device, prompts=4, length=48, generate=True, max_rel=5e-2):
    """Logits of `q` (experts on fp4gemm) against `ref` (the same FP4 weights dequantised to bf16,
    transformers' own experts) and its float32 copy (logits_against_references), then greedy
    tokens (reported)."""
    ids = torch.randint(0, ref.config.vocab_size, (prompts, length), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        lq = q(ids).logits.float()
    r = logits_against_references(ref, lq, ids, max_rel, tag=arch)
    if not generate:
        return r
    with torch.no_grad():
        gr = ref.generate(ids[:1, :8], max_new_tokens=32, do_sample=False)
        gq = q.generate(ids[:1, :8], max_new_tokens=32, do_sample=False)
    same = int((gr == gq).all(-1).sum()) if gr.shape == gq.shape else 0
    agree = float((gr[:, 8:] == gq[:, 8:]).float().mean()) if gr.shape == gq.shape else 0.0
    print(f"{arch}: greedy 32 tokens: {100 * agree:.1f} % of positions agree (identical sequences: {same})")
    return r
