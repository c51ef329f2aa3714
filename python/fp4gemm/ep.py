"""fp4gemm.ep: expert parallelism for the MoE expert layer over a group of W ranks.

Rank r holds experts ``[r * E/W, (r + 1) * E/W)`` (E divisible by W). A forward step on each
rank's own tokens:

1. dispatch: every (token, slot) pair whose expert lives on rank d sends the token's row to d
   (pairs ordered by destination, then by pair index t * k + j: deterministic); the split sizes are
   exchanged first (an all-to-all of W counts), then the rows and their local expert ids;
2. the local experts run on the rows received, as an fp4gemm MoE layer with top-1 and weight 1
   (``fp4gemm.moe.MoeLayer``): one output row per pair, exactly the row the single-process layer
   computes for that pair (every step is per row: the activation quantisation, both GEMMs);
3. combine: the rows go back (the reverse all-to-all) and each token's k rows are summed in slot
   order with the layer's own combine (FP32 fmas, rounded once to bf16) — so the result equals the
   single-process layer's bit for bit, for any world size. Ids outside ``[0, E)`` contribute
   nothing, as in the layer.

The collectives go through a small communicator interface (``split_counts`` and ``all_to_all``):
:class:`TorchComm` runs them on ``torch.distributed`` (``all_to_all_single``; gloo on CPU tensors,
NCCL on CUDA tensors), :class:`ThreadGroup` runs W ranks as threads of one process (NumPy arrays;
the host tests use it). With a W4A4 layer the rows travel quantised (NVFP4: packed e2m1 + E4M3
scales, 4.5 bits per value, quantised at the source exactly as the layer would, so the result is
still bit-identical); W4A16 sends bf16 rows.

Not yet: CUDA-graph capture of the step (NCCL's all-to-all with host-known split sizes needs the
counts on the host: one synchronisation per step), and a run on two GPUs.
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional

import numpy as np

from . import _fp4gemm as _C
from .api import _argument_error
from . import moe

__all__ = ["ExpertParallel", "ThreadGroup", "TorchComm", "combine"]


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def combine(y: Any, topk_weights: Any, topk_ids: Any, experts: int, out: Any = None, stream: Any = None):
    """The expert layer's combine: ``out[t] = sum_j topk_weights[t, j] * y[t * k + j]`` in FP32 fmas,
    j in order, ids outside ``[0, experts)`` skipped, rounded once to bf16 (the layer's own rule).
    y: bf16 ``[T * k, H]``. Host arrays (NumPy, torch CPU): ``reference::moe_combine``; CUDA tensors:
    one kernel (``fp4gemm::moe_combine``, on ``stream`` or the current one, graph-capturable) --
    both bit for bit the layer's combine."""
    t, k = topk_ids.shape
    cuda = _is_torch(y) and y.is_cuda
    if out is None:
        if _is_torch(y):
            import torch

            out = torch.empty((t, y.shape[1]), dtype=torch.bfloat16, device=y.device)
        else:
            out = np.empty((t, y.shape[1]), dtype=y.dtype)
    weights = topk_weights
    if _is_torch(weights):
        import torch

        if not (cuda and weights.dtype == torch.bfloat16):
            weights = weights.to(torch.float32)
        weights = weights.contiguous()
    elif weights.dtype != np.float32:
        weights = np.ascontiguousarray(weights, dtype=np.float32)
    ids = topk_ids.contiguous() if _is_torch(topk_ids) else np.ascontiguousarray(topk_ids)
    _C.moe_combine(y, weights, ids, int(experts), out, stream)
    return out


# ---- communicators ---------------------------------------------------------------------------------


class ThreadGroup:
    """W ranks as threads of one process, exchanging NumPy arrays through shared mailboxes (for
    tests and single-host experiments). ``comm(r)`` is rank r's communicator; run each rank's
    steps on its own thread (:meth:`run`)."""

    def __init__(self, world: int):
        if world < 1:
            raise _argument_error("world", f"must be >= 1, got {world}")
        self.world = world
        self._barrier = threading.Barrier(world)
        self._box: List[List[Any]] = [[None] * world for _ in range(world)]

    def comm(self, rank: int) -> "_ThreadComm":
        return _ThreadComm(self, rank)

    def run(self, fn, *per_rank_args):
        """Runs ``fn(comm, *args_r)`` for every rank r on W threads; returns the W results (the
        first exception raised on any rank is re-raised)."""
        results: List[Any] = [None] * self.world
        errors: List[BaseException] = []

        def body(r):
            try:
                results[r] = fn(self.comm(r), *(a[r] for a in per_rank_args))
            except BaseException as e:  # noqa: BLE001 -- re-raised below
                errors.append(e)
                self._barrier.abort()

        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.world)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
        return results


class _ThreadComm:
    def __init__(self, group: ThreadGroup, rank: int):
        self.group, self.rank, self.world = group, rank, group.world

    def _exchange(self, parts: List[Any]) -> List[Any]:
        g = self.group
        for d in range(self.world):
            g._box[self.rank][d] = parts[d]
        g._barrier.wait()
        got = [g._box[s][self.rank] for s in range(self.world)]
        g._barrier.wait()
        return got

    def split_counts(self, send_counts: np.ndarray) -> np.ndarray:
        return np.array([int(c) for c in self._exchange([int(c) for c in send_counts])], np.int64)

    def all_to_all(self, send: Any, send_counts, recv_counts):
        bounds = np.concatenate([[0], np.cumsum(send_counts)]).astype(np.int64)
        parts = [np.array(send[bounds[d]:bounds[d + 1]]) for d in range(self.world)]
        got = self._exchange(parts)
        return np.concatenate(got) if got else send[:0]


class TorchComm:
    """torch.distributed as the communicator (``group`` None: the default group). Tensors are sent
    as they are (bf16 rows as their bytes, which every backend moves); the split sizes are exchanged
    with an all-to-all of W int64 counts on the tensors' device and read back on the host (one
    synchronisation per step: ``all_to_all_single`` takes host split sizes)."""

    def __init__(self, group: Any = None, device: Any = None):
        import torch
        import torch.distributed as dist

        self.dist, self.group = dist, group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        if device is None:  # NCCL exchanges CUDA tensors only
            nccl = str(dist.get_backend(group)).lower() == "nccl"
            device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        self.device = device

    def split_counts(self, send_counts):
        import torch

        send = torch.as_tensor(np.asarray(send_counts.cpu() if _is_torch(send_counts) else send_counts),
                               dtype=torch.int64).to(self.device)
        recv = torch.empty_like(send)
        self.dist.all_to_all_single(recv, send, group=self.group)
        return recv.cpu().numpy()

    def all_to_all(self, send, send_counts, recv_counts):
        import torch

        # bf16 rows travel as their bytes (every backend moves uint8; gloo has no bf16 / int16)
        bits = send.contiguous().view(torch.uint8) if send.dtype == torch.bfloat16 else send.contiguous()
        recv = torch.empty((int(np.sum(recv_counts)),) + tuple(bits.shape[1:]), dtype=bits.dtype, device=bits.device)
        self.dist.all_to_all_single(recv, bits, [int(c) for c in recv_counts], [int(c) for c in send_counts],
                                    group=self.group)
        return recv.view(torch.bfloat16) if send.dtype == torch.bfloat16 else recv


# ---- the expert-parallel layer ----------------------------------------------------------------------


class ExpertParallel:
    """One rank's part of an expert-parallel MoE layer.

    w13, w13_scales, w2, w2_scales (and the per-expert alphas): **this rank's** E/W experts, as for
    :class:`fp4gemm.moe.MoeLayer`. experts: E, the global count (ids are global). comm: a
    communicator (:class:`TorchComm`, or :meth:`ThreadGroup.comm`). max_tokens: the most tokens one
    rank brings to a step; the local layer is planned for every pair of every rank reaching this
    rank (``world * max_tokens * topk`` rows). dispatch: 'auto' (W4A4 layers send the rows as FP4:
    packed e2m1 + scales, 4.5 bits per NVFP4 value, quantised at the source exactly as the layer
    would; W4A16 sends bf16), 'fp4' or 'bf16'. Other keyword arguments (act_format, activation,
    a1_scale, ...) go to the local layer.
    """

    def __init__(self, w13: Any, w13_scales: Any, w2: Any, w2_scales: Any, *, experts: int, comm: Any,
                 max_tokens: int, topk: int, dispatch: str = "auto", **layer_kwargs):
        self.comm, self.world, self.rank = comm, comm.world, comm.rank
        if experts % self.world != 0:
            raise _argument_error("experts", f"E = {experts} is not divisible by the world size {self.world}")
        self.experts, self.local = experts, experts // self.world
        if w13.shape[0] != self.local:
            raise _argument_error("w13", f"holds {w13.shape[0]} experts; rank {self.rank} of {self.world} holds "
                                         f"E / W = {self.local}")
        self.topk, self.max_tokens = topk, max_tokens
        act = layer_kwargs.get("act_format", "nvfp4")
        if dispatch not in ("auto", "fp4", "bf16"):
            raise _argument_error("dispatch", f"{dispatch!r} is not one of 'auto', 'fp4', 'bf16'")
        if dispatch == "fp4" and act == "bf16":
            raise _argument_error("dispatch", "FP4 dispatch needs FP4 activations (act_format nvfp4 / mxfp4)")
        # W4A4: rows travel quantised as the layer would quantise them (bit-identical results).
        self.fp4 = act != "bf16" and dispatch != "bf16"
        self.format = "nvfp4" if act == "nvfp4" else "mxfp4"
        self.a1 = float(layer_kwargs.get("a1_scale", 1.0))
        self.layer = moe.MoeLayer(w13, w13_scales, w2, w2_scales, max_tokens=self.world * max_tokens * topk, topk=1,
                                  **layer_kwargs)
        self.last_bytes = 0  # activation bytes this rank sent in the last step's dispatch

    def forward(self, hidden_states: Any, topk_ids: Any, topk_weights: Any):
        """This rank's tokens -> their layer output, bf16 ``[T, H]`` (the single-process layer's bits)."""
        t, k = topk_ids.shape
        if k != self.topk:
            raise _argument_error("topk_ids", f"has {k} ids per token; this layer was built for top-{self.topk}")
        if t > self.max_tokens:
            raise _argument_error("hidden_states", f"{t} tokens; this layer was planned for at most {self.max_tokens}")
        torch_in = _is_torch(hidden_states)
        ids = (topk_ids.reshape(-1).cpu().numpy() if torch_in else np.asarray(topk_ids).reshape(-1)).astype(np.int64)
        valid = (ids >= 0) & (ids < self.experts)
        dest = np.where(valid, ids // self.local, self.world)
        order = np.argsort(dest, kind="stable")  # by destination rank, then pair index
        pairs = order[: int(valid.sum())]
        send_counts = np.bincount(dest[pairs], minlength=self.world).astype(np.int64)
        local_ids = (ids[pairs] - dest[pairs] * self.local).astype(np.int32)
        recv_counts = self.comm.split_counts(send_counts)
        h = hidden_states.shape[1]
        src = hidden_states
        if self.fp4:  # each token quantised once, as the layer's step 2 would
            packed, scales = self._quantize(hidden_states)
        if torch_in:
            import torch

            idx = torch.as_tensor(pairs // k, device=hidden_states.device)
            send = [packed.index_select(0, idx), scales.index_select(0, idx)] if self.fp4 else [src.index_select(0, idx)]
            send_e = torch.as_tensor(local_ids, device=hidden_states.device)
        else:
            send = [np.ascontiguousarray(packed[pairs // k]), np.ascontiguousarray(scales[pairs // k])] if self.fp4 \
                else [np.ascontiguousarray(src[pairs // k])]
            send_e = local_ids
        self.last_bytes = sum(int(a.shape[0]) * int(a.shape[1]) * (1 if self.fp4 else 2) for a in send)
        recv = [self.comm.all_to_all(a, send_counts, recv_counts) for a in send]
        recv_e = self.comm.all_to_all(send_e, send_counts, recv_counts)
        rows = int(np.sum(recv_counts))
        if rows:
            if torch_in:
                import torch

                ones = torch.ones((rows, 1), dtype=torch.float32, device=recv_e.device)
                e1 = recv_e.reshape(rows, 1).contiguous()
                y = (self.layer.run(None, e1, ones, hidden_fp4=(recv[0].contiguous(), recv[1].contiguous())) if self.fp4
                     else self.layer.run(recv[0].contiguous(), e1, ones))
            else:
                ones = np.ones((rows, 1), np.float32)
                e1 = np.ascontiguousarray(recv_e.reshape(rows, 1))
                y = (self.layer.run(None, e1, ones, hidden_fp4=(np.ascontiguousarray(recv[0]), np.ascontiguousarray(recv[1])))
                     if self.fp4 else self.layer.run(np.ascontiguousarray(recv[0]), e1, ones))
        else:
            y = hidden_states[:0]
        y_back = self.comm.all_to_all(y, recv_counts, send_counts)
        if torch_in:
            import torch

            y_pairs = torch.zeros((t * k, h), dtype=torch.bfloat16, device=hidden_states.device)
            if len(pairs):
                y_pairs.index_copy_(0, torch.as_tensor(pairs, device=hidden_states.device), y_back)
        else:
            y_pairs = np.zeros((t * k, h), dtype=hidden_states.dtype)
            y_pairs[pairs] = y_back
        return combine(y_pairs, topk_weights, topk_ids, self.experts)

    __call__ = forward

    def _quantize(self, x):
        """The tokens as the layer quantises them (fp4gemm.quantize: the same rule on the host and the
        GPU): packed uint8 [T, H/2] and linear scales [T, H/vec] on x's framework and device."""
        from .formats import quantize

        if _is_torch(x) and not x.is_cuda:
            import torch

            p, s = quantize(x.float().numpy(), self.format, global_scale=self.a1 if self.format == "nvfp4" else 1.0)
            return torch.from_numpy(p), torch.from_numpy(s)
        if not _is_torch(x):
            x = np.asarray(x, dtype=np.float32)
        return quantize(x, self.format, global_scale=self.a1 if self.format == "nvfp4" else 1.0)
