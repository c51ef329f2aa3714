"""Expert parallelism on torch.distributed: W processes (gloo on CPU tensors; world sizes 2 and 4,
spawned here) each run fp4gemm.ep.ExpertParallel with TorchComm on their own tokens, and each
rank's output must equal the single-process layer's (fp4gemm.moe.MoeLayer over all experts, the
host reference path) bit for bit. Skipped, saying so, where torch is not installed; the NCCL run on
two GPUs is marked gpu and skips below two GPUs."""

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

    from fp4gemm import ep, moe
    from test_ep_host import _global, _tokens

    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast (the device tool's advice)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        fmt = "nvfp4" if act == "nvfp4" else "mxfp4"
        e, h, i, k = 8, 64, 32, 3
        w13, s13, w2, s2, (a13, a13u, a2) = _global(fmt, e, h, i, seed=world)
        kw = dict(act_format=act, scale_layout="linear")
        if act == "nvfp4":
            kw.update(a1_scale=0.05, a2_scale=0.02)
        rng = np.random.default_rng(7 + world)
        tokens = [_tokens(rng, t, h, e, k) for t in (5, 9, 1, 16)[:world]]
        local = e // world
        sl = slice(rank * local, (rank + 1) * local)
        t = lambda a: _to_torch(a, device)  # noqa: E731
        layer = ep.ExpertParallel(t(w13[sl]), t(s13[sl]), t(w2[sl]), t(s2[sl]), experts=e, comm=ep.TorchComm(),
                                  max_tokens=16, topk=k, w13_alpha=t(a13[sl]), w13_alpha_up=t(a13u[sl]),
                                  w2_alpha=t(a2[sl]), **kw)
        x, ids, wts = tokens[rank]
        got = layer(t(x), t(ids), t(wts))
        single = moe.MoeLayer(w13, s13, w2, s2, max_tokens=16, topk=k, w13_alpha=a13, w13_alpha_up=a13u, w2_alpha=a2,
                              **kw)
        want = single.run(x, ids, wts)
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
