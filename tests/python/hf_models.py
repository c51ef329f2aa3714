"""Small random transformers models of the architectures fp4gemm.integrations.transformers
targets, and their comparison with fp4gemm's experts (shared by the host and GPU tiers)."""

from __future__ import annotations

import numpy as np
import torch
import transformers

import fp4gemm

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


def _model(arch, device="cuda"):
    cfg_cls, model_cls, fields = _ARCHS[arch]
    cfg = getattr(transformers, cfg_cls)(**{**_COMMON, **fields})
    torch.manual_seed(0)
    return getattr(transformers, model_cls)(cfg).to(device=device, dtype=torch.bfloat16).eval()


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


def compare_with_dequantised(arch, ref, q, device, prompts=4, length=48, generate=True, max_rel=5e-2, min_top1=0.95):
    """Logits of `q` (experts on fp4gemm) against `ref` (the same FP4 weights dequantised to bf16,
    transformers' own experts): relative error, top-1 agreement (all positions, and the positions
    whose reference top-2 gap is at least a tenth of the logits' standard deviation: a random
    model's near ties flip under any rounding difference), then greedy tokens (reported)."""
    ids = torch.randint(0, ref.config.vocab_size, (prompts, length), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        lr = ref(ids).logits.float()
        lq = q(ids).logits.float()
    rel = float((lq - lr).norm() / lr.norm())
    agree = lq.argmax(-1) == lr.argmax(-1)
    top1 = float(agree.float().mean())
    # A random model's logits have near ties that any rounding difference flips (both sides round
    # in bf16, in different orders); the positions whose reference top-2 gap is at least a tenth of
    # the logits' standard deviation (a bound fixed beforehand, not from the errors seen) must agree.
    top2 = lr.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) >= 0.1 * lr.std()
    top1_clear = float(agree[clear].float().mean())
    print(f"\n{arch}: logits relative error {rel:.2e}, top-1 agreement {100 * top1:.2f} % "
          f"({100 * top1_clear:.2f} % of the {int(clear.sum())} / {clear.numel()} positions with a clear winner)")
    assert rel < max_rel and top1_clear >= 0.99 and top1 >= min_top1, (rel, top1, top1_clear)
    if not generate:
        return rel, top1, top1_clear
    with torch.no_grad():
        gr = ref.generate(ids[:1, :8], max_new_tokens=32, do_sample=False)
        gq = q.generate(ids[:1, :8], max_new_tokens=32, do_sample=False)
    same = int((gr == gq).all(-1).sum()) if gr.shape == gq.shape else 0
    agree = float((gr[:, 8:] == gq[:, 8:]).float().mean()) if gr.shape == gq.shape else 0.0
    print(f"{arch}: greedy 32 tokens: {100 * agree:.1f} % of positions agree (identical sequences: {same})")
    return rel, top1, top1_clear
