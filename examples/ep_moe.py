"""Expert-parallel MoE layer on W GPUs (torch.distributed), DeepSeek-V3 layer shapes by default.

    torchrun --nproc-per-node W examples/ep_moe.py [--tokens 128] [--act nvfp4|bf16] [--path device|host]
             [--steps 50] [--check] [--json FILE]

Each rank holds E/W experts (random weights: NVFP4 for --act nvfp4, W4A4; MXFP4 for --act bf16,
W4A16), draws its own tokens and a new uniform top-k routing every step, and runs
fp4gemm.ep.ExpertParallel:

* --path device (default): SymmetricMemoryComm -- the fp4gemm::EpExchange kernels write rows
  straight into the other GPUs' buffers (NVLink), a token once per rank holding one of its experts,
  split sizes on the device, W4A4 rows quantised inside the dispatch and sent as NVFP4; each origin
  sums its pairs' rows in place from the experts' ranks; the whole step is captured once in a CUDA
  graph and replayed with a new routing every step;
* --path host: TorchComm -- NCCL all_to_all_single with the split sizes read on the host.

Prints per rank: the step time (median and range over the steps; graph replays for the device
path), the dispatch and combine times (CUDA events around the phases of eager steps, barriers
included), the bytes this rank sent to other ranks and the GB/s that makes, a plain NCCL
all-to-all of the same bytes measured in the same run, and (rank 0) the same layer on one GPU for
all W x T tokens. --check: every rank also runs the one-GPU layer (all experts, the same global
weights, batch_invariant=True as the EP local layer) on its own tokens for every timed routing and
reports how many steps were bit-identical. (The one-GPU timing uses the default, faster layer.)
NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1).
"""
import argparse
import json
import os

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from fp4gemm import ep, moe  # noqa: E402


def weights(g, dev, experts, rows, cols, fmt):
    vec, code = (16, (0x38, 0x40)) if fmt == "nvfp4" else (32, (127, 128))
    w = torch.randint(0, 256, (experts, rows, cols // 2), generator=g, dtype=torch.uint8, device=dev)
    pick = torch.randint(0, 2, (experts, rows, cols // vec), generator=g, device=dev)
    s = torch.where(pick == 0, code[0], code[1]).to(torch.uint8)
    return w, s


def routings(g, dev, n, t, e, k):
    """n uniform top-k routings of t tokens (distinct experts per token) and their weights."""
    ids = torch.rand((n, t, e), generator=g, device=dev).topk(k, dim=-1).indices.to(torch.int32)
    return ids.contiguous(), torch.rand((n, t, k), generator=g, device=dev)


def timed(fn, reps, before=None, skip=0):
    """Median, min and max of CUDA-event timings of fn() (µs) over `reps` calls, the first `skip`
    left out; before(n), when given, runs ahead of call n outside the timed window."""
    out = []
    for n in range(reps):
        if before is not None:
            before(n)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        if n >= skip:
            out.append(a.elapsed_time(b) * 1e3)
    return float(np.median(out)), float(np.min(out)), float(np.max(out))


def nccl_a2a_us(nbytes, world, dev, reps=20):
    """A plain NCCL all_to_all_single moving `nbytes` from this rank to the others (equal splits).
    Every rank must pass the same size (all_to_all_single with equal splits needs equal tensors:
    the callers take the largest rank's bytes)."""
    per = max(1, nbytes // max(1, world - 1))
    send = torch.empty(per * world, dtype=torch.uint8, device=dev)
    recv = torch.empty_like(send)
    for _ in range(3):
        dist.all_to_all_single(recv, send)
    return timed(lambda: dist.all_to_all_single(recv, send), reps)[0]


def progress(rank, what, t0=[None]):
    """A line on stderr from rank 0 with the seconds since the start (long runs show where they are)."""
    import sys
    import time

    if t0[0] is None:
        t0[0] = time.perf_counter()
    if rank == 0:
        print(f"[{time.perf_counter() - t0[0]:7.1f} s] {what}", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--inter", type=int, default=2048)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128, help="tokens per rank per step")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--act", default="nvfp4", choices=["nvfp4", "bf16"])
    ap.add_argument("--path", default="device", choices=["device", "host"])
    ap.add_argument("--single", default="auto", choices=["auto", "off"], help="time the one-GPU layer on rank 0")
    ap.add_argument("--check", action="store_true",
                    help="every rank also runs the one-GPU layer (all experts) on its tokens: outputs must be equal, "
                         "bit for bit, for every timed routing")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    e, h, i, k, t = args.experts, args.hidden, args.inter, args.topk, args.tokens
    fmt = "nvfp4" if args.act == "nvfp4" else "mxfp4"
    # The global weights, the same on every rank (one seed); rank r keeps its slice of experts. With
    # --check every rank also keeps the whole set, for the one-GPU layer its outputs must equal.
    gw = torch.Generator(device=dev).manual_seed(1234)
    local = e // world
    sl = slice(rank * local, (rank + 1) * local)
    full = [weights(gw, dev, e, 2 * i, h, fmt), weights(gw, dev, e, h, i, fmt)]
    w13, s13 = (a[sl].clone() for a in full[0])
    w2, s2 = (a[sl].clone() for a in full[1])
    if not (args.check or (rank == 0 and args.single == "auto")):
        del full
        torch.cuda.empty_cache()
    g = torch.Generator(device=dev).manual_seed(5678 + rank)
    comm = ep.SymmetricMemoryComm() if args.path == "device" else ep.TorchComm()
    layer = ep.ExpertParallel(w13, s13, w2, s2, experts=e, comm=comm, max_tokens=t, topk=k, act_format=args.act,
                              scale_layout="linear")
    progress(rank, f"rank 0 of {world}: ExpertParallel built ({layer.capacity if args.path == 'device' else '-'} rows "
                   f"receive capacity)")
    steps = args.steps
    x = (torch.randn((t, h), generator=g, device=dev) * 0.5).to(torch.bfloat16)
    bank_ids, bank_w = routings(g, dev, steps + 3, t, e, k)
    ids, wts = bank_ids[0].clone(), bank_w[0].clone()
    out = torch.empty((t, h), dtype=torch.bfloat16, device=dev)

    def new_routing(n):
        ids.copy_(bank_ids[n % len(bank_ids)])
        wts.copy_(bank_w[n % len(bank_w)])

    moved = [layer.dispatch_bytes(bank_ids[n]) for n in range(steps)]
    progress(rank, "routings drawn")
    disp_bytes = float(np.mean([m["dispatch_bytes"] for m in moved]))
    comb_bytes = float(np.mean([m["combine_bytes"] for m in moved]))
    report = {"rank": rank, "world": world, "tokens_per_rank": t, "act": args.act, "path": args.path,
              "shape": {"experts": e, "hidden": h, "inter": i, "topk": k},
              "gpu": torch.cuda.get_device_name(dev), "dispatch_bytes": disp_bytes, "combine_bytes": comb_bytes}

    if args.path == "device":
        # Phase times on eager steps (CUDA events between the phases; barriers included).
        ph = {"dispatch": [], "local": [], "combine": []}
        for n in range(steps + 3):
            new_routing(n)
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            dist.barrier(device_ids=[local_rank])
            torch.cuda.synchronize()
            ev[0].record()
            layer._phase_counts(ids)
            comm.barrier()
            layer._phase_rows(x, ids)
            comm.barrier()
            ev[1].record()
            layer._phase_local()
            ev[2].record()
            comm.barrier()
            layer._phase_combine(ids, wts, out)
            ev[3].record()
            ev[3].synchronize()
            if n >= 3:
                ph["dispatch"].append(ev[0].elapsed_time(ev[1]) * 1e3)
                ph["local"].append(ev[1].elapsed_time(ev[2]) * 1e3)
                ph["combine"].append(ev[2].elapsed_time(ev[3]) * 1e3)
        for key, v in ph.items():
            report[key + "_us"] = float(np.median(v))
        progress(rank, f"{steps + 3} eager steps timed by phase")
        # The step as one CUDA graph, replayed with a new routing each time.
        graph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
            layer(x, ids, wts, out=out)
        torch.cuda.current_stream().wait_stream(s)
        report["step_us"] = list(timed(graph.replay, steps + 3, before=new_routing, skip=3))
        report["step_kind"] = "graph replay"
        progress(rank, f"{steps + 3} graph replays timed")
    else:
        def before(n):
            new_routing(n)
            dist.barrier(device_ids=[local_rank])

        report["step_us"] = list(timed(lambda: layer(x, ids, wts), steps + 3, before=before, skip=3))
        report["step_kind"] = "eager (host split sizes)"

    if args.check:  # every timed routing again, eager, against the one-GPU layer on this rank
        single = moe.MoeLayer(*full[0], *full[1], max_tokens=t, topk=k, act_format=args.act, scale_layout="linear",
                              batch_invariant=True)
        bad = 0
        for n in range(steps):
            new_routing(n)
            got = layer(x, ids, wts)
            want = single.run(x, ids, wts)
            bad += int(not torch.equal(got.view(torch.int16), want.view(torch.int16)))
        report["check"] = f"{steps - bad} of {steps} steps bit-identical to the one-GPU layer (batch_invariant)"
        progress(rank, report["check"])
        del single
    dist.barrier(device_ids=[local_rank])
    progress(rank, "NCCL all-to-all baseline")
    # The same bytes on every rank (the largest rank's): equal-split all-to-alls of unequal tensors hang.
    sizes = torch.tensor([disp_bytes, comb_bytes], dtype=torch.float64, device=dev)
    dist.all_reduce(sizes, op=dist.ReduceOp.MAX)
    nd, nc = int(sizes[0].item()), int(sizes[1].item())
    report["nccl_bytes"] = [nd, nc]
    report["nccl_dispatch_us"] = nccl_a2a_us(nd, world, dev)
    report["nccl_combine_us"] = nccl_a2a_us(nc, world, dev)
    nccl_gbs = (nd + nc) / (report["nccl_dispatch_us"] + report["nccl_combine_us"]) / 1e3
    report["nccl_gbs"] = nccl_gbs
    if args.path == "device":
        ours = (disp_bytes + comb_bytes) / (report["dispatch_us"] + report["combine_us"]) / 1e3
        report["exchange_gbs"] = ours
        report["exchange_vs_nccl"] = ours / nccl_gbs
    dist.barrier(device_ids=[local_rank])
    del layer, comm
    torch.cuda.empty_cache()

    progress(rank, "the one-GPU layer" if args.single == "auto" else "done")
    if rank == 0 and args.single == "auto":
        try:  # the same layer on one GPU for all W x T tokens (where it fits)
            (gw13, gs13), (gw2, gs2) = full
            one = moe.MoeLayer(gw13, gs13, gw2, gs2, max_tokens=world * t, topk=k, act_format=args.act,
                               scale_layout="linear")
            xs = (torch.randn((world * t, h), generator=g, device=dev) * 0.5).to(torch.bfloat16)
            bi, bw = routings(g, dev, 8, world * t, e, k)
            o = torch.empty((world * t, h), dtype=torch.bfloat16, device=dev)
            n = [0]

            def run_one():
                one.run(xs, bi[n[0] % 8], bw[n[0] % 8], out=o)
                n[0] += 1

            for _ in range(16):
                run_one()
            report["single_gpu_us"] = list(timed(run_one, steps))
            report["ep_vs_single"] = report["step_us"][0] / report["single_gpu_us"][0]
        except Exception as err:  # noqa: BLE001 -- reported, not fatal
            report["single_gpu_us"] = f"did not run: {err}"

    rows = [None] * world
    dist.all_gather_object(rows, report)
    if rank == 0:
        for r in rows:
            line = (f"rank {r['rank']}/{world} {r['act']} {r['path']}: step {r['step_us'][0]:.0f} us "
                    f"[{r['step_us'][1]:.0f}, {r['step_us'][2]:.0f}] ({r['step_kind']}), ")
            if "dispatch_us" in r:
                line += (f"dispatch {r['dispatch_us']:.0f} us + local {r['local_us']:.0f} + combine "
                         f"{r['combine_us']:.0f}; sent {r['dispatch_bytes'] / 1e6:.2f} + {r['combine_bytes'] / 1e6:.2f} MB "
                         f"= {r['exchange_gbs']:.0f} GB/s, ")
            line += f"NCCL all-to-all of the same bytes {r['nccl_gbs']:.0f} GB/s"
            if "exchange_vs_nccl" in r:
                line += f" (ours {r['exchange_vs_nccl']:.2f}x)"
            print(line, flush=True)
        for r in rows:
            if "check" in r:
                print(f"rank {r['rank']}: {r['check']}", flush=True)
        one = rows[0].get("single_gpu_us")
        if isinstance(one, list):
            print(f"one GPU, {world * t} tokens: {one[0]:.0f} us [{one[1]:.0f}, {one[2]:.0f}]; "
                  f"EP step / one GPU = {rows[0]['ep_vs_single']:.2f}", flush=True)
        elif one is not None:
            print(f"one GPU: {one}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
