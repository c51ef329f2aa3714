"""Expert parallelism on torch.distributed: W processes (gloo on CPU tensors; world sizes 2 and 4,
spawned here) each run fp4gemm.ep.ExpertParallel with TorchComm on their own tokens, and each
rank's output must equal the single-process layer's (fp4gemm.moe.MoeLayer over all experts, the
host reference path) bit for bit. Skipped, saying so, where torch is not installed; the NCCL run on
two GPUs is marked gpu and skips below two GPUs, as does the device path (SymmetricMemory) on 2 and
4 GPUs."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch.distributed tests need torch)")
ml_dtypes = pytest.importorskip("ml_dtypes")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _to_torch(a, device="cpu"):
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def _worker(rank, world, port, backend, act):
    import torch.distributed as dist

    from fp4gemm import ep
    from test_ep_host import EpCase

    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast (the device tool's advice)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        c = EpCase(world, act)
        weights, alphas = c.rank_weights(rank, lambda a: _to_torch(a, device))
        layer = ep.ExpertParallel(*weights, experts=c.e, comm=ep.TorchComm(), max_tokens=16, topk=c.k, **alphas,
                                  **c.kw)
        x, ids, wts = c.tokens[rank]
        got = layer(_to_torch(x, device), _to_torch(ids, device), _to_torch(wts, device))
        want = c.single().run(x, ids, wts)
        got_bits = got.cpu().view(torch.int16).numpy()
        if backend == "gloo":
            assert np.array_equal(got_bits, want.view(np.int16)), f"rank {rank} differs from the single-process layer"
        else:  # CUDA combine in torch: within one bf16 ulp of the layer's
            g = got.float().cpu().numpy()
            assert np.allclose(g, want.astype(np.float32), rtol=2.0**-7, atol=1e-6), f"rank {rank}"
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("act", ["nvfp4", "bf16"])
def test_gloo_equals_the_single_process_layer(world, act):
    import torch.multiprocessing as mp

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("this torch has no gloo backend")
    os.environ["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])
    mp.spawn(_worker, args=(world, _free_port(), "gloo", act), nprocs=world, join=True)


@pytest.mark.gpu
def test_nccl_two_gpus():
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip(f"needs two CUDA devices ({torch.cuda.device_count() if torch.cuda.is_available() else 0} visible)")
    import torch.multiprocessing as mp

    os.environ["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])
    mp.spawn(_worker, args=(2, _free_port(), "nccl", "nvfp4"), nprocs=2, join=True)


def _symm_worker(rank, world, port, act, replays):
    """One rank of the device path across GPUs: PyTorch SymmetricMemory buffers, NCCL group."""
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ.setdefault(k, v)
    import torch.distributed as dist

    from fp4gemm import ep, moe
    from test_ep_host import EpCase

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=dev)
    try:
        c = EpCase(world, act)
        cuda = lambda a: _to_torch(a, dev)  # noqa: E731
        weights, alphas = c.rank_weights(rank, cuda)
        layer = ep.ExpertParallel(*weights, experts=c.e, comm=ep.SymmetricMemoryComm(), max_tokens=16, topk=c.k,
                                  **alphas, **c.kw)
        single = moe.MoeLayer(*(cuda(a) for a in (c.w13, c.s13, c.w2, c.s2)), max_tokens=16, topk=c.k, batch_invariant=True,
                              w13_alpha=cuda(c.a13), w13_alpha_up=cuda(c.a13u), w2_alpha=cuda(c.a2), **c.kw)
        bits = lambda t: t.view(torch.int16).cpu().numpy()  # noqa: E731
        x, ids, wts = (cuda(a) for a in c.tokens[rank])
        got = layer(x, ids, wts)
        assert np.array_equal(bits(got), bits(single.run(x, ids, wts))), f"rank {rank}: eager step"

        # One graph of the whole step, replayed with a new routing and new tokens each time.
        rng = np.random.default_rng(1000 + rank)
        t = 16
        gx = torch.empty((t, c.h), dtype=torch.bfloat16, device=dev)
        gids = torch.empty((t, c.k), dtype=torch.int32, device=dev)
        gw = torch.empty((t, c.k), dtype=torch.float32, device=dev)
        gout = torch.empty((t, c.h), dtype=torch.bfloat16, device=dev)

        def fill():
            xv = rng.standard_normal((t, c.h)).astype(np.float32) * np.exp2(rng.integers(-8, 8, (t, 1)))
            iv = np.array([rng.permutation(c.e)[:c.k] for _ in range(t)], np.int32)
            iv[rng.random((t, c.k)) < 0.1] = -1
            gx.copy_(torch.from_numpy(xv).to(dev, torch.bfloat16))
            gids.copy_(torch.from_numpy(iv).to(dev))
            gw.copy_(torch.from_numpy(rng.uniform(0.05, 1, (t, c.k)).astype(np.float32)).to(dev))

        fill()
        layer(gx, gids, gw, out=gout)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
            layer(gx, gids, gw, out=gout)
        torch.cuda.current_stream().wait_stream(s)
        for replay in range(replays):
            fill()
            gout.fill_(float("nan"))
            graph.replay()
            want = single.run(gx, gids, gw)
            assert np.array_equal(bits(gout), bits(want)), f"rank {rank}: replay {replay}"
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("act", ["nvfp4", "bf16"])
def test_device_path_across_gpus(world, act):
    """The device path on W GPUs (SymmetricMemory + NCCL): bit for bit the single-GPU layer, eager
    and over 100 replays of one captured step with new routings."""
    if not torch.cuda.is_available() or torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} CUDA devices ({torch.cuda.device_count() if torch.cuda.is_available() else 0} visible)")
    import torch.multiprocessing as mp

    os.environ["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])
    mp.spawn(_symm_worker, args=(world, _free_port(), act, 100), nprocs=world, join=True)
