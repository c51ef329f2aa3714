"""v59 c10 (prepared for the next session): Qwen3 T 1 / 4 / 8 through MoeLayer.run, one package per process: linear
scales (tk_layer) vs blocked (the CLI), gate_up interleaved + swigluoai (tk_layer) vs stacked + silu, ids sorted per
token (tk_layer) vs not. Eager, L2 written before each rep, 60 reps, median us. Question: which of tk_layer's settings
makes the cp.async ring slower at Qwen3 T 4 / 8 (tk_layer: +8 / +12 %) when the CLI measured it faster (-5 / -4 %)."""
import statistics, sys, torch
import fp4gemm, fp4gemm.moe as FMOE
E, H, I, K = 128, 2048, 768, 8
g = torch.Generator(device="cuda").manual_seed(1)
w13 = (torch.randn(E * 2 * I, H, device="cuda", generator=g) * 0.05).to(torch.bfloat16)
w2 = (torch.randn(E * H, I, device="cuda", generator=g) * 0.05).to(torch.bfloat16)
p13, s13 = fp4gemm.quantize(w13, "mxfp4", "linear")
p2, s2 = fp4gemm.quantize(w2, "mxfp4", "linear")
p13, s13 = p13.view(E, 2 * I, H // 2), s13.view(E, 2 * I, H // 32)
p2, s2 = p2.view(E, H, I // 2), s2.view(E, H, I // 32)
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
def blocked(s, rows, cols):  # per expert: linear [rows, cols] -> the blocked layout, flat
    return torch.stack([torch.from_numpy(fp4gemm.linear_to_blocked(s[e].cpu().numpy())) for e in range(E)]).cuda()
try:
    sb = (blocked(s13, 2 * I, H // 32), blocked(s2, H, I // 32))
except Exception as e:  # noqa: BLE001
    print("blocked conversion failed:", e); sb = None
cases = [(a, g_, "linear") for a, g_ in (("swigluoai", "interleaved"), ("silu", "stacked"))]
if sb is not None:
    cases += [("swigluoai", "interleaved", "blocked"), ("silu", "stacked", "blocked")]
for act, gu, sl in cases:
    try:
        layer = FMOE.MoeLayer(p13, s13 if sl == "linear" else sb[0], p2, s2 if sl == "linear" else sb[1], max_tokens=4096,
                              topk=K, activation=act, act_format="bf16", gate_up=gu, scale_layout=sl)
    except Exception as e:  # noqa: BLE001
        print(f"{sys.argv[1]} {act} {gu} {sl}: plan failed: {e}", flush=True); continue
    for T in (1, 4, 8):
        for srt in (True, False):
            logits = torch.randn(T, E, device="cuda", generator=g)
            vals, idx = torch.topk(logits, K, dim=1)
            if srt:
                idx, _ = torch.sort(idx, dim=1)
            ids = idx.to(torch.int32).contiguous()
            wts = torch.softmax(vals, dim=1).float().contiguous()
            x = (torch.randn(T, H, device="cuda", generator=g) * 0.5).to(torch.bfloat16)
            out = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
            ts = []
            for r in range(70):
                flush.fill_(r & 255)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); layer.run(x, ids, wts, out=out); b.record(); b.synchronize()
                if r >= 10: ts.append(a.elapsed_time(b) * 1000)
            print(f"{sys.argv[1]} {act:9s} {gu:11s} {sl:7s} T {T} sorted {int(srt)}: {statistics.median(ts):7.2f} us",
                  flush=True)
