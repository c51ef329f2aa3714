"""End to end in Hugging Face transformers: decode and prefill of MoE models whose experts run
fp4gemm, against the same model with transformers' own bf16 experts (grouped_mm, batched_mm), in
one run.

    python bench/hf_e2e.py [--models gpt-oss,qwen3] [--layers 4] [--batches 1,8,64,256] [--prefill 2048]
                           [--reps 50] [--json FILE] [--layouts default|rows,pieces] [--peers 1|0]

Models: gpt-oss-120b and Qwen3-30B-A3B layer shapes (hidden, experts, top-k, heads as the real
models), a few layers, random weights (bf16; fp4gemm quantises the experts to MXFP4, W4A16).
Decode: one step at a context of 512 tokens with a static KV cache, captured once in a CUDA graph
and replayed (--reps, median of 5 rounds): tokens/s = batch / step time. Prefill: one forward of
--prefill tokens (batch 1), CUDA events, median of 5. The share of a decode step spent in the
experts is 1 - t(null experts) / t(step), where "null" is an experts implementation that returns
zeros (everything else of the step unchanged). Prints a table and the GPU; --json writes it.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import transformers
from transformers.integrations.moe import ExpertsInterface

from fp4gemm.integrations import transformers as fp4hf


def null_experts(self, hidden_states, top_k_index, top_k_weights):
    return torch.zeros_like(hidden_states)


ExpertsInterface.register("null", null_experts)


def build(name: str, layers: int):
    if name == "gpt-oss":
        cfg = transformers.GptOssConfig(num_hidden_layers=layers, num_local_experts=128, num_experts_per_tok=4,
                                        hidden_size=2880, intermediate_size=2880, head_dim=64, num_attention_heads=64,
                                        num_key_value_heads=8, vocab_size=32000)
        cls = transformers.GptOssForCausalLM
    else:
        cfg = transformers.Qwen3MoeConfig(num_hidden_layers=layers, num_experts=128, num_experts_per_tok=8,
                                          hidden_size=2048, moe_intermediate_size=768, intermediate_size=6144,
                                          num_attention_heads=32, num_key_value_heads=4, vocab_size=32000)
        cls = transformers.Qwen3MoeForCausalLM
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = cls(cfg).to(torch.bfloat16).eval()
    return model


def static_masks(model, batch: int, cache_len: int):
    """gpt-oss builds its attention masks with a host-to-device copy that a CUDA graph cannot
    capture; it takes them prepared instead (as generate() may pass them). All positions visible:
    the same work per step as the real masks."""
    cfg = model.config
    if cfg.model_type != "gpt_oss":
        return None
    z = lambda n: torch.zeros((batch, 1, 1, n), dtype=torch.bfloat16, device="cuda")  # noqa: E731
    return {"full_attention": z(cache_len), "sliding_attention": z(min(cache_len, cfg.sliding_window))}


def decode_step_us(model, batch: int, context: int, reps: int) -> float:
    """One decode step (batch tokens at position `context`) in a CUDA graph, replayed."""
    # Every replay appends one position (the cache's own device counter), so the cache holds all of
    # them: 3 warm-up calls and 5 rounds of reps replays.
    # (a sliding-window layer's static cache holds only its window: the replays must not outrun it)
    window = getattr(model.config, "sliding_window", None) or (1 << 30)
    reps = max(1, min(reps, (min(window, context) - 8) // 5))
    cache_len = max(context, 5 * reps + 3) + 8
    cache = transformers.StaticCache(config=model.config, max_cache_len=cache_len)
    masks = static_masks(model, batch, cache_len)
    # (the cache is not filled first: its contents do not change the step's work, and a prefill of
    # batch x context tokens through batched_mm would gather a weight matrix per token and pair)
    with torch.no_grad():
        step_ids = torch.randint(0, model.config.vocab_size, (batch, 1), device="cuda")
        pos = torch.tensor([context], device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(step_ids, past_key_values=cache, cache_position=pos, attention_mask=masks, use_cache=True)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(step_ids, past_key_values=cache, cache_position=pos, attention_mask=masks, use_cache=True)
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000 / reps)
    return statistics.median(times)


def prefill_ms(model, tokens: int) -> float:
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), device="cuda")
    times = []
    with torch.no_grad():
        model(ids)
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            model(ids)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt-oss,qwen3")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batches", default="1,8,64,256")
    ap.add_argument("--prefill", type=int, default=2048)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json", default=None)
    ap.add_argument("--layouts", default="default",
                    help="fp4gemm's weight_layout, one run each: 'default' (quantize_experts' choice) or a list of "
                         "rows / pieces (e.g. rows,pieces: the same quantised experts in both layouts)")
    ap.add_argument("--peers", type=int, default=1, help="0: skip transformers' own experts (and the null run)")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    results = {"gpu": torch.cuda.get_device_name(), "layers": args.layers, "context": args.context, "models": {}}
    for name in args.models.split(","):
        model = build(name, args.layers)
        row = {}
        for impl in ("grouped_mm", "batched_mm", "null") if args.peers else ():
            model.set_experts_implementation(impl)
            for b in batches:
                if impl == "batched_mm" and b > 64:  # (a weight matrix gathered per token and pair: GBs)
                    continue
                print(f"{name} {impl} decode batch {b} ...", flush=True)
                row[f"{impl}_decode_us_b{b}"] = decode_step_us(model, b, args.context, args.reps)
            if impl == "grouped_mm":  # (batched_mm gathers a weight matrix per token and pair: no prefill)
                row[f"{impl}_prefill_ms"] = prefill_ms(model, args.prefill)
        layouts = args.layouts.split(",")
        for li, layout in enumerate(layouts):  # MXFP4 W4A16, the bf16 expert weights freed after the last
            n = fp4hf.quantize_experts(model, free_bf16=li == len(layouts) - 1,
                                       weight_layout=None if layout == "default" else layout)
            tag = "fp4gemm" if layout == "default" else f"fp4gemm_{layout}"
            tag += f"_{li}" if layouts.count(layout) > 1 else ""  # (rows,pieces,rows,pieces: alternating rounds)
            print(f"{name}: {n} experts modules converted to fp4gemm ({layout})", flush=True)
            for b in batches:
                row[f"{tag}_decode_us_b{b}"] = decode_step_us(model, b, args.context, args.reps)
            row[f"{tag}_prefill_ms"] = prefill_ms(model, args.prefill)
        results["models"][name] = row
        del model
        torch.cuda.empty_cache()
        print(f"\n== {name}, {args.layers} layers, {results['gpu']} ==")
        print(f"{'experts':14s}" + "".join(f"  decode b{b} tok/s" for b in batches) + f"  prefill {args.prefill} ms"
              + "".join(f"  experts share b{b}" for b in batches))
        tags = [("fp4gemm" if x == "default" else f"fp4gemm_{x}") + (f"_{i}" if layouts.count(x) > 1 else "")
                for i, x in enumerate(layouts)]
        for impl in tags + ["grouped_mm", "batched_mm"]:
            if f"{impl}_decode_us_b{batches[0]}" not in row:
                continue
            line = f"{impl:14s}"
            for b in batches:
                us = row.get(f"{impl}_decode_us_b{b}")
                line += f"  {b / us * 1e6:17.0f}" if us else f"  {'-':>17s}"
            pre = row.get(f"{impl}_prefill_ms")
            line += f"  {pre:16.2f}" if pre is not None else f"  {'-':>16s}"
            for b in batches:
                us = row.get(f"{impl}_decode_us_b{b}")
                null = row.get(f"null_decode_us_b{b}")
                line += f"  {1 - null / us:17.2f}" if us and null else f"  {'-':>17s}"
            print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
