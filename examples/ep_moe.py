"""Expert-parallel MoE layer on torch.distributed (NCCL), DeepSeek-V3-like shapes.

    torchrun --nproc-per-node W examples/ep_moe.py [--tokens 256] [--steps 20] [--act nvfp4|bf16]

Each rank holds E/W experts (random NVFP4 / MXFP4 weights), draws its own tokens and a uniform
top-k routing every step, and runs fp4gemm.ep.ExpertParallel: dispatch (all-to-all of bf16 rows),
the local experts (fp4gemm.moe.MoeLayer), combine. Prints per rank: time per step, the all-to-all
time (the two exchanges of rows and the split sizes) and the local GEMM time (CUDA events), and
the bytes it dispatched. NVLink multicast is left off (NCCL_NVLS_ENABLE=0).
"""
import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as dist

from fp4gemm import ep

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


class TimedComm(ep.TorchComm):
    """TorchComm that adds up the wall time of its collectives (they synchronise for the counts)."""

    def __init__(self):
        super().__init__()
        self.seconds = 0.0

    def split_counts(self, c):
        t0 = time.perf_counter()
        r = super().split_counts(c)
        self.seconds += time.perf_counter() - t0
        return r

    def all_to_all(self, send, sc, rc):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        r = super().all_to_all(send, sc, rc)
        torch.cuda.synchronize()
        self.seconds += time.perf_counter() - t0
        return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--inter", type=int, default=2048)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--act", default="nvfp4", choices=["nvfp4", "bf16"])
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device())
    e, h, i, k = args.experts, args.hidden, args.inter, args.topk
    local = e // world
    g = torch.Generator(device="cpu").manual_seed(1234 + rank)
    vec = 16 if args.act == "nvfp4" else 32
    code = (0x38, 0x40) if args.act == "nvfp4" else (127, 128)

    def weights(rows, cols):
        w = torch.randint(0, 256, (local, rows, cols // 2), generator=g, dtype=torch.uint8).to(dev)
        s = torch.tensor(code, dtype=torch.uint8)[torch.randint(0, 2, (local, rows, cols // vec), generator=g)].to(dev)
        return w, s

    w13, s13 = weights(2 * i, h)
    w2, s2 = weights(h, i)
    comm = TimedComm()
    layer = ep.ExpertParallel(w13, s13, w2, s2, experts=e, comm=comm, max_tokens=args.tokens, topk=k,
                              act_format=args.act, scale_layout="linear")
    x = torch.randn(args.tokens, h, generator=g).to(device=dev, dtype=torch.bfloat16)
    steps, a2a, sent = [], [], []
    for step in range(args.steps + 3):
        ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(args.tokens)]).to(dev)
        wts = torch.rand(args.tokens, k, generator=g).to(dev)
        torch.cuda.synchronize()
        comm.seconds = 0.0
        t0 = time.perf_counter()
        layer(x, ids, wts)
        torch.cuda.synchronize()
        if step >= 3:
            steps.append(time.perf_counter() - t0)
            a2a.append(comm.seconds)
            sent.append(layer.last_bytes)
    s, a = np.median(steps) * 1e6, np.median(a2a) * 1e6
    print(f"rank {rank}/{world}: {s:.0f} us per step, all-to-all {a:.0f} us, local layer + rest {s - a:.0f} us, "
          f"{np.median(sent) / 1e6:.2f} MB of bf16 rows dispatched per step "
          f"(NVFP4 would be {np.median(sent) * 4.5 / 16 / 1e6:.2f} MB)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
