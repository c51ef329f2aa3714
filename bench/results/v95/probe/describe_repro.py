"""v95: MoeLayer.describe() segfaulted inside tk_layer_pieces.py (gpt-oss-120b shape, pieces, max_tokens 4096) on
main 3ba0fef built by CMake on the GPU machine. Usage: python3 describe_repro.py LAYOUT E H I TOPK MAXT"""
import sys
import torch
import fp4gemm.moe as moe
from fp4gemm.integrations.transformers import _packed

layout, E, H, I, k, maxt = sys.argv[1], *map(int, sys.argv[2:7])
dev = "cuda"
p13 = torch.randint(0, 256, (E, 2 * I, H // 2), dtype=torch.uint8, device=dev)
s13 = torch.randint(118, 128, (E, 2 * I, H // 32), dtype=torch.uint8, device=dev)
p2 = torch.randint(0, 256, (E, H, I // 2), dtype=torch.uint8, device=dev)
s2 = torch.randint(118, 128, (E, H, I // 32), dtype=torch.uint8, device=dev)
kw = dict(activation="swigluoai", act_format="bf16", gate_up="interleaved", scale_layout="linear")
if layout == "pieces":
    p13, s13, p2, s2 = _packed(p13, s13, p2, s2, "interleaved", "mxfp4")
    kw.update(scale_layout="blocked", weight_layout="pieces")
layer = moe.MoeLayer(p13, s13, p2, s2, max_tokens=maxt, topk=k, **kw)
print("built", flush=True)
print(layer.describe(), flush=True)
print("describe ok", flush=True)
