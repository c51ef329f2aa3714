"""Greedy generation with a Hugging Face transformers MoE model whose experts run fp4gemm.

    python examples/hf_generate.py [--model NAME_OR_PATH] [--weights mxfp4|nvfp4] [--tokens 64]

Without --model a small random Qwen3-MoE (real layer shape, 4 layers) is built, so the example runs
offline; with one, the checkpoint is loaded by ``fp4hf.from_pretrained``: a bf16 checkpoint's
experts quantised on the GPU, a gpt-oss MXFP4 or ModelOpt NVFP4 checkpoint's loaded as they are.
Prints the text (or token ids) and the decode rate with fp4gemm's experts (--compare: also with
transformers' bf16 experts, loading the model a second time).
"""

from __future__ import annotations

import argparse
import time

import torch
import transformers

from fp4gemm.integrations import transformers as fp4hf


def small_qwen3_moe() -> transformers.PreTrainedModel:
    cfg = transformers.Qwen3MoeConfig(vocab_size=32000, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                                      num_experts=128, num_experts_per_tok=8, num_hidden_layers=4,
                                      num_attention_heads=32, num_key_value_heads=4)
    torch.manual_seed(0)
    return transformers.Qwen3MoeForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()


def decode_rate(model, ids, tokens):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    torch.cuda.synchronize()
    return out, tokens / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--weights", default=None, choices=["mxfp4", "nvfp4"],
                    help="the experts' format for a bf16 model (default mxfp4, W4A16; nvfp4: W4A4 with unit "
                         "activation scales, random model only); an FP4 checkpoint keeps its own")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--compare", action="store_true", help="also time transformers' bf16 experts (--model)")
    args = ap.parse_args()
    weights = args.weights or "mxfp4"
    activations = "bf16" if weights == "mxfp4" else "fp4"
    if args.model is None:
        base = small_qwen3_moe()
        ids = torch.randint(0, base.config.vocab_size, (1, 16), device="cuda")
        _, rate_bf16 = decode_rate(base, ids, args.tokens)
        fp4hf.quantize_experts(base, weights=weights, activations=activations, a1_scale=1.0, a2_scale=1.0)
        out, rate = decode_rate(base, ids, args.tokens)
        print("token ids:", out[0, ids.shape[1]:].tolist())
    else:
        tok = transformers.AutoTokenizer.from_pretrained(args.model)
        ids = tok("The expert layers of a mixture-of-experts model", return_tensors="pt").input_ids.cuda()
        rate_bf16 = None
        if args.compare:
            base = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, device_map="cuda")
            _, rate_bf16 = decode_rate(base, ids, args.tokens)
            del base
            torch.cuda.empty_cache()
        # (an FP4 checkpoint keeps its own format: weights / activations only choose for a bf16 one)
        if args.weights == "nvfp4":
            ap.error("--weights nvfp4 with --model: a bf16 checkpoint's W4A4 NVFP4 needs calibrated activation "
                     "scales (quantize_experts' a1_scale / a2_scale); a ModelOpt NVFP4 checkpoint needs no --weights")
        model = fp4hf.from_pretrained(args.model, dtype=torch.bfloat16, device_map="cuda", weights=args.weights)
        out, rate = decode_rate(model, ids, args.tokens)
        print(tok.decode(out[0, ids.shape[1]:]))
    line = f"decode, batch 1: {rate:.1f} tokens/s with fp4gemm experts"
    if rate_bf16 is not None:
        line += f", {rate_bf16:.1f} with transformers' bf16 experts"
    print(f"{line} ({torch.cuda.get_device_name()})")


if __name__ == "__main__":
    main()
