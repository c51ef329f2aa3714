"""fp4gemm.ep: expert parallelism for the MoE expert layer over a group of W ranks.

Rank r holds experts ``[r * E/W, (r + 1) * E/W)`` (E divisible by W). A forward step on each
rank's own tokens:

1. dispatch (as the host path does it; the device path below sends a token once per rank
   instead): every (token, slot) pair whose expert lives on rank d sends the token's row to d
   (pairs ordered by destination, then by pair index t * k + j: deterministic); the split sizes are
   exchanged first (an all-to-all of W counts), then the rows and their local expert ids;
2. the local experts run on the rows received, as an fp4gemm MoE layer (host path: top-1 and weight
   1 over the pairs; device path: top-k over the tokens, stopped before its combine): one output
   row per pair, exactly the row the single-process layer computes for that pair (every step is
   per row: the activation quantisation, both GEMMs);
3. combine: each token's k rows (the host path sends them back with the reverse all-to-all; the
   device path reads them in place from the experts' ranks) are summed in slot order with the
   layer's own combine (FP32 fmas, rounded once to bf16) — so the result equals the
   single-process layer's bit for bit, for any world size. Ids outside ``[0, E)`` contribute
   nothing, as in the layer.

The collectives go through a small communicator interface (``split_counts`` and ``all_to_all``):
:class:`TorchComm` runs them on ``torch.distributed`` (``all_to_all_single``; gloo on CPU tensors,
NCCL on CUDA tensors), :class:`ThreadGroup` runs W ranks as threads of one process (NumPy arrays;
the host tests use it). With a W4A4 layer the rows travel quantised (NVFP4: packed e2m1 + E4M3
scales, 4.5 bits per value, quantised at the source exactly as the layer would, so the result is
still bit-identical); W4A16 sends bf16 rows.

Two paths, chosen by the communicator:

* **The device path** (:class:`SymmetricMemoryComm` on torch.distributed, or :class:`LocalGroup`:
  W ranks on one GPU): ``fp4gemm::EpExchange`` kernels write the rows straight into the other
  ranks' buffers (PyTorch SymmetricMemory, peer-mapped over NVLink), with every split size on the
  device: no host synchronisation, and the whole step (dispatch -> local layer -> combine) can be
  captured once in a CUDA graph and replayed with a new routing every step. W4A4 rows are quantised
  inside the dispatch kernel (the layer's rule, bit for bit) and travel as packed e2m1 + scales.
  A token travels once to each rank holding one of its experts (not once per pair: on 2 ranks with
  top-8, ~4x fewer bytes), with its k slots as local ids (-1 where the expert is elsewhere); the
  local layer runs top-k on them and stops before its combine (``expert_rows`` / ``row_of``), and
  each origin's combine reads the pairs' rows in place from the experts' ranks. Three barriers per
  step (SymmetricMemory's, on the stream).
* **The host path** (:class:`TorchComm`: NCCL or gloo ``all_to_all_single``; :class:`ThreadGroup`:
  NumPy ranks as threads): the split sizes go through the host (one synchronisation per step), no
  graph capture. The fallback where peer memory is not available (CPU, gloo, no NVLink / P2P).
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional

import numpy as np

from . import _fp4gemm as _C
from .api import _argument_error
from . import moe

__all__ = ["ExpertParallel", "LocalGroup", "SymmetricMemoryComm", "ThreadGroup", "TorchComm", "combine"]


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


# ---- device-path communicators ----------------------------------------------------------------------


class SymmetricMemoryComm:
    """The device path on torch.distributed: each rank's exchange buffer is PyTorch SymmetricMemory
    (``torch.distributed._symmetric_memory``, CUDA backend: peer-mapped device memory, NVLink on
    H100 / H200 nodes) and the barriers between the phases are its ``barrier()`` -- a kernel on
    the current stream, so the step stays free of host synchronisation and capturable in a CUDA
    graph. One GPU per rank (``torch.cuda.current_device()``); the group must be intra-node with
    peer access. NVLink multicast is not used: this sets ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` (and
    ``NCCL_NVLS_ENABLE=0``, ``NVSHMEM_DISABLE_NVLS=1``) unless the environment already says."""

    device_path = True

    def __init__(self, group: Any = None):
        import os

        import torch
        import torch.distributed as dist

        for k, v in (("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NCCL_NVLS_ENABLE", "0"), ("NVSHMEM_DISABLE_NVLS", "1")):
            os.environ.setdefault(k, v)
        self.group = group if group is not None else dist.group.WORLD
        self.rank = dist.get_rank(self.group)
        self.world = dist.get_world_size(self.group)
        self.device = torch.device("cuda", torch.cuda.current_device())
        self._handle = None
        self._handles: List[Any] = []

    def buffers(self, nbytes: int):
        """This rank's exchange buffer (a uint8 tensor) and every rank's buffer address here (a
        collective: every rank calls it with the same size)."""
        import torch
        import torch.distributed._symmetric_memory as symm_mem

        buf = symm_mem.empty(int(nbytes), dtype=torch.uint8, device=self.device)
        self._handle = symm_mem.rendezvous(buf, self.group.group_name)
        self._handles.append(self._handle)  # every layer's peer mappings stay while this comm lives
        return buf, [int(p) for p in self._handle.buffer_ptrs]

    def barrier(self) -> None:
        self._handle.barrier(channel=0)


class LocalGroup:
    """W ranks on one GPU in one process (tests and single-GPU experiments of the device path):
    plain device buffers, and :meth:`step` runs each phase for every rank in turn on one stream
    (stream order is the barrier), so a step of all W ranks is also one capturable sequence."""

    def __init__(self, world: int, device: Any = None):
        import torch

        if world < 1 or world > 8:
            raise _argument_error("world", f"must be in 1..8, got {world}")
        self.world = world
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        self._sets: List[List[Any]] = []  # the n-th layers' buffers, one per rank
        self._calls = [0] * world          # layers made so far, per rank

    def comm(self, rank: int) -> "_LocalComm":
        if not 0 <= rank < self.world:
            raise _argument_error("rank", f"must be in 0..{self.world - 1}, got {rank}")
        return _LocalComm(self, rank)

    def step(self, parts: List["ExpertParallel"], inputs: List[Any], out: Optional[List[Any]] = None) -> List[Any]:
        """One forward of every rank: parts[r] (rank r's ExpertParallel), inputs[r] = (hidden_states,
        topk_ids, topk_weights); returns the W outputs."""
        if len(parts) != self.world or len(inputs) != self.world:
            raise _argument_error("parts", f"needs one part and one input per rank ({self.world})")
        for p, (x, ids, w) in zip(parts, inputs):
            p._check_device_step(x, ids, w)
        for p, (x, ids, w) in zip(parts, inputs):
            p._phase_counts(ids)
        for p, (x, ids, w) in zip(parts, inputs):
            p._phase_rows(x, ids)
        for p in parts:
            p._phase_local()
        return [p._phase_combine(ids, w, None if out is None else out[r]) for r, (p, (x, ids, w)) in enumerate(zip(parts, inputs))]


class _LocalComm:
    device_path = True

    def __init__(self, group: LocalGroup, rank: int):
        self.group, self.rank, self.world, self.device = group, rank, group.world, group.device

    def buffers(self, nbytes: int):
        import torch

        g = self.group
        # Rank r's n-th layer shares the n-th set of buffers with the other ranks' n-th layers (the
        # first rank to ask makes the set), so several layers can live on one group.
        n = g._calls[self.rank]
        if n == len(g._sets):
            g._sets.append([torch.zeros(int(nbytes) + 256, dtype=torch.uint8, device=g.device) for _ in range(g.world)])
        bufs = g._sets[n]
        if bufs[0].numel() != nbytes + 256:
            raise _argument_error("nbytes", f"rank {self.rank}'s layer {n} needs {nbytes} bytes of exchange buffer, but "
                                            f"another rank's layer {n} made it {bufs[0].numel() - 256}: the n-th "
                                            "ExpertParallel of every rank must have the same shape")
        g._calls[self.rank] += 1
        # 256-byte aligned views (the caching allocator's blocks are 512-aligned already).
        views = [b[(-b.data_ptr()) % 256:][:nbytes] for b in bufs]
        return views[self.rank], [v.data_ptr() for v in views]

    def barrier(self) -> None:
        raise _argument_error("comm", "ranks of a LocalGroup run together: use LocalGroup.step(parts, inputs)")


# ---- the expert-parallel layer ----------------------------------------------------------------------


class ExpertParallel:
    """One rank's part of an expert-parallel MoE layer.

    w13, w13_scales, w2, w2_scales (and the per-expert alphas): **this rank's** E/W experts, as for
    :class:`fp4gemm.moe.MoeLayer`. experts: E, the global count (ids are global). comm: a
    communicator (:class:`TorchComm`, or :meth:`ThreadGroup.comm`). max_tokens: the most tokens one
    rank brings to a step; the local layer is planned for every token of every rank reaching this
    rank (device path: ``world * max_tokens`` tokens of ``topk`` slots; host path:
    ``world * max_tokens * topk`` pair rows). dispatch: 'auto' (W4A4 layers send the rows as FP4:
    packed e2m1 + scales, 4.5 bits per NVFP4 value, quantised at the source exactly as the layer
    would; W4A16 sends bf16), 'fp4' or 'bf16'. Other keyword arguments (act_format, activation,
    a1_scale, ...) go to the local layer, which is built ``batch_invariant=True`` unless they say
    otherwise: the outputs are then bit for bit those of one GPU's ``MoeLayer(...,
    batch_invariant=True)`` on the same tokens, for any world size.
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
        self.device_path = bool(getattr(comm, "device_path", False))
        self.hidden = int(w13.shape[2]) * 2
        # bytes of one dispatched row: packed e2m1 + one scale per block (FP4), or bf16
        self.row_bytes = (self.hidden // 2 + self.hidden // (16 if self.format == "nvfp4" else 32) if self.fp4
                          else 2 * self.hidden)
        if self.device_path:
            if not (_is_torch(w13) and w13.is_cuda):
                raise _argument_error("w13", "the device path (SymmetricMemoryComm, LocalGroup) needs the weights as "
                                             "CUDA tensors on this rank's GPU")
            self._setup_device(w13.device)
        # Batch invariant by default: the local layer sees every rank's rows for its experts, a batch
        # no single GPU would run, so results equal one GPU's only when no row depends on its batch.
        layer_kwargs.setdefault("batch_invariant", True)
        for name in ("w13_bias", "w2_bias"):  # (the exchange's combine would add the down bias per rank)
            if layer_kwargs.get(name) is not None:
                raise _argument_error(name, "expert parallelism does not take expert biases yet")
        # The local layer sees each token once per rank (its k slots, -1 where the expert is elsewhere):
        # top-k over at most W * max_tokens rows (the host path sends one row per pair: top-1 over them).
        if self.device_path:  # (every run stops before the combine: no output workspace)
            self.layer = moe.MoeLayer(w13, w13_scales, w2, w2_scales, max_tokens=self.world * max_tokens, topk=topk,
                                      combine=False, **layer_kwargs)
        else:
            self.layer = moe.MoeLayer(w13, w13_scales, w2, w2_scales, max_tokens=self.world * max_tokens * topk,
                                      topk=1, **layer_kwargs)
        self.last_bytes = 0  # host path: activation bytes this rank sent in the last step's dispatch

    # ---- the device path ----------------------------------------------------------------------------

    def _setup_device(self, device):
        import torch

        rows = self.format if self.fp4 else "bf16"
        h, cap, k = self.hidden, self.world * self.max_tokens, self.topk
        nbytes = _C.ep_buffer_bytes(self.world, self.rank, self.experts, self.topk, h, self.max_tokens, rows)
        self._buf, ptrs = self.comm.buffers(nbytes)
        gs = self.a1 if rows == "nvfp4" else 1.0
        self.exchange = _C.EpExchange(self.world, self.rank, self.experts, self.topk, h, self.max_tokens, rows, gs,
                                      device.index if device.index is not None else torch.cuda.current_device(), ptrs)
        got = self.exchange.received()
        base = self._buf.data_ptr()

        def view(ptr, dtype, shape):
            n = 1
            for d in shape:
                n *= d
            off = int(ptr) - base
            return self._buf[off:off + n * torch.empty((), dtype=dtype).element_size()].view(dtype).view(shape)

        self.capacity = cap
        self._recv_ids = view(got["ids"], torch.int32, (cap, k))
        self._recv_count = view(got["count"], torch.int32, (1,))  # their sum: the local layer's token count
        if self.fp4:
            vec = 16 if self.format == "nvfp4" else 32
            self._recv = (view(got["packed"], torch.uint8, (cap, h // 2)), view(got["scales"], torch.uint8, (cap, h // vec)))
        else:
            self._recv = view(got["rows"], torch.bfloat16, (cap, h))
        self._ones = torch.ones((cap, k), dtype=torch.float32, device=device)
        # the local layer's expert output rows and each pair's row in them, read in place by the combines
        self._y = view(got["y"], torch.bfloat16, (cap * k, h))
        self._row_of = view(got["row_of"], torch.int32, (cap * k,))

    @staticmethod
    def _stream():
        import torch

        return torch.cuda.current_stream().cuda_stream

    def _check_device_step(self, x, ids, w):
        import torch

        t, k = ids.shape if ids.dim() == 2 else (-1, -1)
        if ids.dim() != 2 or k != self.topk or ids.dtype not in (torch.int32, torch.int64) or not (ids.is_contiguous() or t == 0):
            raise _argument_error("topk_ids", f"must be a contiguous int32 / int64 [T, {self.topk}] tensor, got "
                                              f"{ids.dtype} {tuple(ids.shape)}")
        if t > self.max_tokens:
            raise _argument_error("hidden_states", f"{t} tokens; this layer was planned for at most {self.max_tokens}")
        if x.dtype != torch.bfloat16 or x.dim() != 2 or x.shape[0] != t or x.shape[1] != self.hidden or (t > 0 and x.stride(1) != 1):
            raise _argument_error("hidden_states", f"must be bf16 [T, {self.hidden}] with unit column stride, got "
                                                   f"{x.dtype} {tuple(x.shape)}")
        if w.dtype not in (torch.float32, torch.bfloat16) or tuple(w.shape) != (t, k) or not (w.is_contiguous() or t == 0):
            raise _argument_error("topk_weights", f"must be a contiguous float32 / bf16 [T, {self.topk}] tensor, got "
                                                  f"{w.dtype} {tuple(w.shape)}")
        for name, a in (("hidden_states", x), ("topk_ids", ids), ("topk_weights", w)):
            if a.device != self._buf.device:
                raise _argument_error(name, f"is on {a.device}; this rank's layer is on {self._buf.device}")

    def _phase_counts(self, ids):
        import torch

        self.exchange.send_counts(ids.data_ptr(), ids.dtype == torch.int64, ids.shape[0], self._stream())

    def _phase_rows(self, x, ids):
        import torch

        self.exchange.send_rows(x.data_ptr(), x.stride(0), ids.data_ptr(), ids.dtype == torch.int64, ids.shape[0],
                                self._stream())

    def _phase_local(self):
        if self.fp4:
            self.layer.run(None, self._recv_ids, self._ones, hidden_fp4=self._recv, token_count=self._recv_count,
                           expert_rows=self._y, row_of=self._row_of)
        else:
            self.layer.run(self._recv, self._recv_ids, self._ones, token_count=self._recv_count,
                           expert_rows=self._y, row_of=self._row_of)

    def _phase_combine(self, ids, w, out=None):
        import torch

        t = ids.shape[0]
        if out is None:
            out = torch.empty((t, self.hidden), dtype=torch.bfloat16, device=self._buf.device)
        self.exchange.combine(ids.data_ptr(), ids.dtype == torch.int64, w.data_ptr(), w.dtype == torch.bfloat16, t,
                              out.data_ptr(), self._stream())
        return out

    def dispatch_bytes(self, topk_ids) -> dict:
        """What a step with these ids moves (for reports; reads the ids on the host): rows sent to
        other ranks and kept here, and the bytes of each way (dispatch rows, bf16 rows back)."""
        ids2 = np.asarray(topk_ids.cpu() if _is_torch(topk_ids) else topk_ids).reshape(-1, self.topk)
        ids = ids2.reshape(-1)
        valid = (ids >= 0) & (ids < self.experts)
        dest = ids[valid] // self.local
        remote = int(np.sum(dest != self.rank))  # pairs whose expert is elsewhere: rows the combine reads back
        sent_remote, sent_local = remote, int(dest.size) - remote
        if self.device_path:  # the device path sends a token once per destination rank
            v2 = (ids2 >= 0) & (ids2 < self.experts)
            at = np.zeros((ids2.shape[0], self.world), bool)  # token t has an expert on rank d
            at[np.nonzero(v2)[0], ids2[v2] // self.local] = True
            sent_local = int(at[:, self.rank].sum())
            sent_remote = int(at.sum()) - sent_local
        return {"rows_remote": sent_remote, "rows_local": sent_local,
                "dispatch_bytes": sent_remote * self.row_bytes, "combine_bytes": remote * 2 * self.hidden}

    def _forward_device(self, x, ids, w, out=None):
        if isinstance(self.comm, _LocalComm):
            raise _argument_error("comm", "ranks of a LocalGroup run together: use LocalGroup.step(parts, inputs)")
        self._check_device_step(x, ids, w)
        self._phase_counts(ids)
        self.comm.barrier()
        self._phase_rows(x, ids)
        self.comm.barrier()
        self._phase_local()
        self.comm.barrier()
        return self._phase_combine(ids, w, out)

    def forward(self, hidden_states: Any, topk_ids: Any, topk_weights: Any, out: Any = None):
        """This rank's tokens -> their layer output, bf16 ``[T, H]`` (the single-process layer's bits).
        Device path: never synchronises, capturable in a CUDA graph (every rank must run the step:
        it contains barriers); out: an optional bf16 ``[T, H]`` output."""
        if self.device_path:
            return self._forward_device(hidden_states, topk_ids, topk_weights, out)
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
