"""fp4gemm.moe: the device-driven grouped GEMM of a Mixture-of-Experts layer.

Expert weights are stacked ``W [E, N, K/2]`` (packed e2m1) with per-expert scales; the routing —
how many rows each expert gets — is *device data* read at run time (``expert_offsets`` int32
``[E+1]``), so one plan serves every routing, a call never synchronises, and a CUDA graph captured
once can be replayed with a new routing every time. Row r of the output is expert e's product
for ``expert_offsets[e] <= r < expert_offsets[e+1]``:

    out[r] = alpha[e] * dq(A[src(r)]) @ dq(W[e]).T      src(r) = gather_index[r] (or r)

Activations are FP4 (W4A4: packed e2m1 ``[rows, K/2]`` + linear scales ``[rows, K/vec]``, the
weights' format) or bf16 (W4A16: ``[rows, K]``, MXFP4 weights). Entry points:

* :class:`MoeGemm` — plan once per weight set, ``run()`` many times (also the masked layout);
* :func:`grouped_gemm` — one call, plans cached on the weights;
* :func:`align_routing` — top-k expert ids -> (expert_offsets, gather_index, order), NumPy or torch
  (on the device, graph-capturable);
* :func:`check` — raise if a run of a cached plan saw bad routing data;
* ``torch.ops.fp4gemm.moe_grouped_gemm`` (:mod:`fp4gemm.ops`) — the torch custom op;
* :class:`MoeLayer` / :func:`fused_experts` — the whole expert layer (vLLM's ``fused_experts``):
  routing, activation quantisation, GEMM1 + SwiGLU, GEMM2, top-k combine, all on the device
  (``torch.ops.fp4gemm.fused_experts`` is its custom op).

NumPy arrays run the exact CPU reference (``reference::moe_gemm``) after the same validation.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _fp4gemm as _C
from .api import _argument_error, empty_like_framework
from .experts import ExpertWeights  # noqa: F401  (checkpoint loaders: from_modelopt, from_mxfp4)

_MAX_EXPERTS = 512  # fp4gemm::align_routing's and MoeGemm's limit

# swigluoai's constants as gpt-oss sets them (the library's fp4gemm::kSwigluAlpha / kSwigluLimit),
# the defaults of every swiglu_alpha / swiglu_limit argument.
SWIGLU_ALPHA, SWIGLU_LIMIT = _C.SWIGLU_ALPHA, _C.SWIGLU_LIMIT

__all__ = ["ExpertWeights", "MoeGemm", "MoeLayer", "align_routing", "check", "clear_layer_cache", "fused_experts",
           "grouped_gemm", "pack_pieces"]


class MoeGemm:
    """The MoE grouped GEMM planned once for one weight set.

    w: packed e2m1 weights ``[E, N, K/2]`` (uint8 or torch.float4_e2m1fn_x2), K-contiguous; row
        and expert strides are read from the array (row stride a multiple of 16 bytes).
    w_scales: the weights' scales (uint8, or float8_e4m3fn for nvfp4 / float8_e8m0fnu for mxfp4):
        ``scale_layout="linear"``: ``[E, N, K/vec]``; ``"blocked"`` (the fast path; cuBLASLt /
        torch._scaled_mm layout per expert): ``[E, pad128(N) * pad4(K/vec)]`` or
        ``[E, pad128(N), pad4(K/vec)]``. Dense within an expert. Linear scales (and any GLU's
        scales, whose gate and up rows the plan pairs) are copied into the plan's blocked copy
        here; torch scales changed in place later (``copy_``, ``mul_``, ...: torch's version
        counter) are copied again before the next run, other arrays after :meth:`reload_weights`.
    format: 'nvfp4' or 'mxfp4'; None: mxfp4 for bf16 activations, else nvfp4.
    out_dtype: 'bfloat16' (default), 'float16' or 'float32' (names, torch or NumPy dtypes).
    activation: 'fp4' (W4A4, the weights' format) or 'bf16' (W4A16, MXFP4 weights).
    layout: 'contiguous' — expert e owns rows ``[expert_offsets[e], expert_offsets[e+1])`` of
        ``a`` (or of ``gather_index``) and ``out``, ``capacity`` = the most rows a run routes;
        'masked' — expert e owns rows ``e * capacity + [0, expert_counts[e])`` of
        ``a [E, capacity, ...]`` and ``out [E, capacity, N]`` (DeepGEMM's low-latency layout).
    capacity: see layout.
    alpha: None, a number, or a float32 array of E values (on the weights' device, read at run
        time: it may change between runs and graph replays).
    epilogue: 'none', or a gated linear unit over gate and up rows of the same tokens: 'silu'
        (``silu(alpha * gate) * (alpha_up * up)``) or 'swigluoai' (gpt-oss: clamped, ``swiglu_alpha``,
        ``swiglu_limit``), in FP32, rounded once. The output then has I columns, and w holds
        ``[E, 2I, K/2]`` with gate_up 'stacked' (gate rows, then up rows: vLLM's w13) or
        'interleaved' (gpt-oss), or ``[E, I, K/2]`` with gate_up 'separate' and the up rows in
        ``w_up`` (same shape and strides; scales in ``w_up_scales``: GPU MODE's b1 / b2).
    alpha_up: the up rows' alpha (number or float32 [E]); None: alpha's.
    rescale_each_run: the plan's copy of the weight scales (linear ones, or any GLU's) is made
        again at every run instead of once here (for scale buffers reused with new contents).
        MXFP4 without it: when every scale code is <= 128 here (trained weights: scales <= 2),
        the kernel decodes with one multiply; a code > 128 written into blocked ``w_scales``
        later makes ``check()`` raise (naming weights.scales); with it: two multiplies, any code.

    CUDA arrays build a plan (TMA descriptors, workspace) on the weights' device, after the work
    already enqueued on the current stream (weights quantised there just before are read
    complete); host (NumPy) weights make an object whose runs compute the exact CPU reference with
    the same checks, reading the arrays at every run. The weight arrays (and torch storages) are
    kept alive; a torch weight whose address, shape, strides or dtype changed is refused at run
    time.
    """

    def __init__(self, w: Any, w_scales: Any, *, format: Optional[str] = None, scale_layout: str = "blocked",
                 out_dtype: Any = "bfloat16", activation: str = "fp4", layout: str = "contiguous",
                 capacity: int, alpha: Any = None, epilogue: str = "none", gate_up: str = "stacked",
                 w_up: Any = None, w_up_scales: Any = None, alpha_up: Any = None, swiglu_alpha: float = SWIGLU_ALPHA,
                 swiglu_limit: float = SWIGLU_LIMIT, rescale_each_run: bool = False):
        self._plan = _C.MoeGemm(w, w_scales, format, scale_layout, out_dtype, activation, layout, capacity, alpha,
                                epilogue, gate_up, w_up, w_up_scales, alpha_up, float(swiglu_alpha),
                                float(swiglu_limit), bool(rescale_each_run))
        self._like = w  # outputs are allocated on its framework and device

    def run(self, a: Any, a_scales: Any = None, expert_offsets: Any = None, expert_counts: Any = None,
            gather_index: Any = None, out: Any = None, stream: Any = None):
        """Computes the routed rows into ``out`` (allocated when None: :meth:`output_shape`) and
        returns it. Only rows that some expert owns are written; the others keep what they held.

        a: FP4 ``[rows, K/2]`` (or bf16 ``[rows, K]``); masked: ``[E, capacity, ...]``. Without
            a gather index it needs at least ``self.rows`` rows (a run may read up to
            ``expert_offsets[E] <= capacity``).
        a_scales: linear ``[rows, K/vec]``, dense (FP4 activations only).
        expert_offsets: int32 ``[E+1]`` on the device (contiguous layout): non-decreasing from
            ``>= 0``, ``expert_offsets[E] <= capacity``.
        expert_counts: int32 ``[E]`` on the device (masked layout), each in ``[0, capacity]``.
        gather_index: optional int32 ``[>= capacity]`` (contiguous): row r reads row
            ``gather_index[r]`` of ``a``, which then holds the unsorted tokens.
        stream: None (the framework's current stream), an int ``cudaStream_t`` or a stream object.

        Never synchronises. Bad routing data is caught on the device (nothing is read or written
        out of bounds, no output is written) and reported by :meth:`check`. Host (NumPy) arrays
        run the CPU reference at once and raise routing errors at once.
        """
        if out is None:
            out = self.empty_output()
        self._plan.run(a, a_scales, expert_offsets, expert_counts, gather_index, out, stream)
        return out

    __call__ = run

    def check(self, stream: Any = None) -> None:
        """Synchronises ``stream``, then raises ArgumentError naming ``expert_offsets``,
        ``expert_counts`` or ``gather_index`` if a run since the last check saw bad routing data
        (and clears that state)."""
        self._plan.check(stream)

    def reload_weights(self, stream: Any = None) -> None:
        """Makes the plan's copy of the weight scales again from the arrays, on ``stream`` after its
        earlier work. Needed after in-place changes that torch's version counter does not see
        (non-torch arrays, writes through ``data_ptr()``), and before replaying a CUDA graph
        captured earlier (replays read the plan's copy; an eager run reloads torch scales itself).
        MXFP4 plans that decode with one multiply refuse scales with a code > 128 (ArgumentError
        naming the scales; the plan keeps the old ones). A no-op for host arrays."""
        self._plan.reload_weights(stream)

    def output_shape(self) -> Tuple[int, ...]:
        """``(rows, N)`` (contiguous) or ``(E, capacity, N)`` (masked)."""
        p = self._plan
        return (p.experts, p.capacity, p.n) if p.layout == "masked" else (p.rows, p.n)

    def empty_output(self):
        """An uninitialised output of :meth:`output_shape` on the weights' framework and device."""
        return empty_like_framework(self._like, self.output_shape(), self._plan.out_dtype, "out")

    def describe(self) -> str:
        return self._plan.describe()

    def __repr__(self) -> str:
        return f"fp4gemm.moe.MoeGemm({self.describe()})"

    kernel_name = property(lambda self: self._plan.kernel_name,
                           doc="The registry's MoE kernel behind the plan (``cpu_reference`` on host arrays).")
    experts = property(lambda self: self._plan.experts)
    n = property(lambda self: self._plan.n)
    k = property(lambda self: self._plan.k)
    capacity = property(lambda self: self._plan.capacity)
    rows = property(lambda self: self._plan.rows, doc="rows of a and out a run may touch")
    format = property(lambda self: self._plan.format)
    scale_layout = property(lambda self: self._plan.scale_layout)
    out_dtype = property(lambda self: self._plan.out_dtype)
    activation = property(lambda self: self._plan.activation)
    layout = property(lambda self: self._plan.layout)
    on_host = property(lambda self: self._plan.on_host, doc="True for host (NumPy) weights: the CPU reference")
    device_bytes = property(lambda self: self._plan.device_bytes, doc="device memory the plan holds")


def grouped_gemm(a: Any, a_scales: Any, w: Any, w_scales: Any, expert_offsets: Any, *, gather_index: Any = None,
                 out: Any = None, alpha: Any = None, format: Optional[str] = None, scale_layout: str = "blocked",
                 out_dtype: Any = "bfloat16", activation: Optional[str] = None, stream: Any = None):
    """The MoE grouped GEMM (contiguous layout) in one call; returns ``out [rows, N]``.

    rows = ``len(gather_index)`` when given (row r reads token ``gather_index[r]`` of ``a``), else
    the rows of ``a`` (already sorted by expert). Arguments as for :class:`MoeGemm` and its
    ``run``; ``activation`` None follows ``a``'s dtype (bfloat16: W4A16, else FP4) and
    ``format`` None follows the activation. ``out`` is allocated when None; rows past
    ``expert_offsets[E]`` are not written.

    The plan is cached (LRU, shared bounds with the grouped GEMM: :func:`fp4gemm.plan_cache_info`)
    on everything it is bound to: the weights' addresses, shapes and strides, alpha (value or
    array address), the options, the device and the number of rows. A repeated call only enqueues
    the kernels. Linear weight scales are converted when the plan is built: after changing them in
    place (other than through torch, whose in-place ops are noticed), call
    :func:`fp4gemm.clear_plan_cache` — or pass blocked scales, which are read at every run.
    Bad routing data is reported by :func:`check`.
    """
    if out is None:
        rows = gather_index.shape[0] if gather_index is not None else a.shape[0]
        out = empty_like_framework(a, (rows, w.shape[1]), out_dtype, "out")
    _C.moe_grouped_gemm(a, a_scales, w, w_scales, expert_offsets, gather_index, out, alpha, format, scale_layout,
                        out_dtype, activation, stream, 0)
    return out


def check(stream: Any = None) -> None:
    """Synchronises and raises ArgumentError naming ``expert_offsets`` or ``gather_index`` if a run
    of a plan cached by :func:`grouped_gemm` (or the torch op) saw bad routing data since the last
    check. On a bad routing nothing was read or written out of bounds and that run wrote no output
    (a bad gather index: that row's output is undefined)."""
    _C.moe_check(stream)


def align_routing(topk_ids: Any, experts: int):
    """Top-k routing -> the contiguous layout's arrays.

    topk_ids: ``[T, k]`` integer expert ids (NumPy or torch; a torch CUDA tensor stays on the
    device, without synchronising: graph-capturable). Returns ``(expert_offsets, gather_index,
    order)``: int32 ``[E+1]``, int32 ``[T*k]`` (row r of the sorted rows reads token
    ``gather_index[r]``) and int64 ``[T*k]`` with ``order[r] = t*k + j`` (the (token, slot) of row
    r, for the combine). Rows are sorted by expert, then by token (stable); an id outside
    ``[0, E)`` owns no row (its rows lie before ``expert_offsets[0]`` or past ``expert_offsets[E]``).
    A CUDA int32/int64 tensor with E <= 512 is aligned by one fp4gemm kernel (``fp4gemm::align_routing``;
    under ``torch.compile`` and for larger E, by torch's sort and searchsorted: the same arrays).
    """
    k = topk_ids.shape[1] if len(topk_ids.shape) == 2 else 1
    if type(topk_ids).__module__.split(".")[0] == "torch":
        import torch

        if (topk_ids.is_cuda and topk_ids.dtype in (torch.int32, torch.int64) and 1 <= experts <= _MAX_EXPERTS
                and not torch.compiler.is_compiling()):
            # One kernel (fp4gemm::align_routing: a stable counting sort) instead of six torch ops
            # (82 us of host time per call on an H200 host). The same arrays as the torch path below.
            ids = topk_ids.reshape(-1)
            if not ids.is_contiguous():
                ids = ids.contiguous()
            n = ids.numel()
            offsets = torch.empty(experts + 1, dtype=torch.int32, device=ids.device)
            gather = torch.empty(n, dtype=torch.int32, device=ids.device)
            order = torch.empty(n, dtype=torch.int64, device=ids.device)
            _C.align_routing(ids.data_ptr(), ids.dtype == torch.int64, n, k, experts, offsets.data_ptr(),
                             gather.data_ptr(), order.data_ptr(), torch.cuda.current_stream(ids.device).cuda_stream,
                             ids.device.index)
            return offsets, gather, order
        # Other devices / dtypes, more experts than the kernel takes, or under torch.compile:
        # offsets[e] = number of ids below e, a binary search of every e in the sorted ids (no
        # scatter, so an id outside [0, E) cannot fault on the device; it owns no row).
        ids, order = torch.sort(topk_ids.reshape(-1), stable=True)
        bounds = torch.arange(experts + 1, dtype=ids.dtype, device=ids.device)
        offsets = torch.searchsorted(ids, bounds).to(torch.int32)
        return offsets, (order // k).to(torch.int32), order
    import numpy as np

    flat = np.asarray(topk_ids).reshape(-1)
    order = np.argsort(flat, kind="stable")
    offsets = np.searchsorted(flat[order], np.arange(experts + 1), side="left").astype(np.int32)
    return offsets, (order // k).astype(np.int32), order.astype(np.int64)


_ACT_FORMATS = {"nvfp4": ("fp4", "nvfp4"), "mxfp4": ("fp4", "mxfp4"), "bf16": ("bf16", "mxfp4")}


def _act_format(act_format: str):
    if act_format not in _ACT_FORMATS:
        raise _argument_error("act_format", f"{act_format!r} is not one of 'nvfp4', 'mxfp4', 'bf16'")
    return _ACT_FORMATS[act_format]


def _decode_tokens(decode_tokens: Optional[int]) -> int:
    """MoeLayer's decode_tokens for the C++ layer: None -> -1 (kDecodeTokensAuto: by the layer)."""
    if decode_tokens is None:
        return -1
    if isinstance(decode_tokens, bool) or not isinstance(decode_tokens, int):
        raise _argument_error("options.decode_tokens", f"must be None or an int in 0..512, got {decode_tokens!r}")
    return decode_tokens


class MoeLayer:
    """The whole MoE expert layer planned once for a weight set (``fp4gemm::MoeLayer``):

        out[t] = sum_j topk_weights[t, j] * down_e(act(gate_e(x_t), up_e(x_t))),  e = topk_ids[t, j]

    w13: packed e2m1 ``[E, 2I, H/2]`` (uint8 or float4_e2m1fn_x2): gate rows then up rows
        (``gate_up="stacked"``, vLLM's w13) or alternating (``"interleaved"``, gpt-oss).
    w13_scales / w2_scales: ``scale_layout="blocked"`` (the fast path; per expert the cuBLASLt
        layout, ``[E, bytes]``) or ``"linear"`` (``[E, rows, K/vec]``, converted once here).
    w2: packed e2m1 ``[E, H, I/2]``.
    w13_alpha, w13_alpha_up, w2_alpha: None or float32 ``[E]`` (ModelOpt's ``weight_scale_2``;
        read here, at plan time: they fold with the activation scales).
    act_format: 'nvfp4' (W4A4, NVFP4 weights), 'mxfp4' (W4A4, MXFP4) or 'bf16' (W4A16, MXFP4).
    activation: 'silu' or 'swigluoai' (gpt-oss: ``swiglu_alpha``, ``swiglu_limit``).
    a1_scale, a2_scale: NVFP4 W4A4 only: the activations' global scales (ModelOpt's ``input_scale``
        of w13 and w2).
    max_tokens, topk: the most tokens a run takes (sizes the workspace) and experts per token.
    batch_invariant: every token's output row independent of the other tokens of the run, bit for
        bit (no stream-K split of a tile's K between CTAs, whose FP32 partial sums are added in a
        batch-dependent order). Off by default (the faster schedule); expert parallelism turns it on.
    decode_tokens: runs of at most this many tokens (0..512; at most 512 / topk are used) take the decode path -- two kernels (W4A16:
        one cooperative kernel) that stream every active expert's weights once over all SMs (W4A16 and W4A4; not with
        batch_invariant, top-k > 8, or a hidden or intermediate size that is not a multiple of 32). Up to 8 tokens
        the first kernel stages the run's tokens; past 8 the wide kernels run after a routing pre-pass that groups
        each expert's pairs 8 at a time.
        0: always the general path; None (default): where it measured faster on an H200 (L2
        flushed, gpt-oss-120b and Qwen3-30B-A3B shapes): up to 8 tokens, W4A16 and W4A4, but at most
        max(3, experts / (2 topk)) (experts shared by a few tokens favour the general path sooner); and where that
        is 8 at hidden sizes up to 3072, up to 64 tokens and past 64 up to 4 pairs per expert (T <= 4 experts / topk,
        at most 512 / topk: gpt-oss-120b 128) (W4A4 NVFP4 with experts over 4 MiB, gpt-oss-120b's: 32; none with
        experts over 4 MiB and linear weight scales).
        ``describe()`` names the bounds in force.
    w13_bias, w2_bias: expert biases (gpt-oss's ``gate_up_proj_bias`` / ``down_proj_bias``), bf16 or
        float32 (both the same), ``[E, 2I]`` in w13's row order and ``[E, H]``, on the weights'
        device, or None. w13_bias is added before the activation (``gate = fma(acc, alpha, bias)`` in
        FP32), w2_bias to each (token, expert) pair's bf16 output row in FP32 before the weighted
        combine. Read at every run (in-place updates are seen).
    weight_layout: 'rows' (default: w13 ``[E, 2I, H/2]``, w2 ``[E, H, I/2]``) or 'pieces': both packed by
        :func:`pack_pieces` (w13 with this layer's ``gate_up``), the order the kernels read them in (faster on both
        paths; CUDA arrays only). Weights updated in place are packed again
        into the same arrays (``pack_pieces(new_w13, gate_up, format=format, out=w13_pieces)``); pieces are
        packed for one format (``format=`` of :func:`pack_pieces`, this layer's weight format).
    combine: False plans a layer whose every run stops before the combine (``run(...,
        expert_rows=, row_of=)``, as an expert-parallel rank's layer does): no ``[max_tokens * topk,
        H]`` output workspace and no decode path.

    CUDA arrays plan on their device, after the work already enqueued on the current stream
    (weights quantised there just before are read complete); NumPy arrays run
    ``reference::moe_layer`` (the same steps on the host, exact then rounded as the device
    rounds) after the same checks, reading the arrays at every run.

    Weights may change in place between runs (RL weight sync: ``w.copy_(new)``): the packed
    weights and blocked w2 scales are read at every run; the scales and alphas the layer copies
    (w13's gate/up pairing, linear scales, alphas folded with a1/a2_scale) are copied again before
    the next run when torch's version counter moved, and by :meth:`reload_weights` otherwise. A
    torch weight re-pointed (``set_``, ``.data = ...``, resized) is refused with ArgumentError.
    """

    def __init__(self, w13: Any, w13_scales: Any, w2: Any, w2_scales: Any, *, max_tokens: int, topk: int,
                 act_format: str = "nvfp4", activation: str = "silu", gate_up: Optional[str] = None,
                 scale_layout: str = "blocked", w13_alpha: Any = None, w13_alpha_up: Any = None, w2_alpha: Any = None,
                 a1_scale: float = 1.0, a2_scale: float = 1.0, swiglu_alpha: float = SWIGLU_ALPHA,
                 swiglu_limit: float = SWIGLU_LIMIT, batch_invariant: bool = False, decode_tokens: Optional[int] = None,
                 w13_bias: Any = None, w2_bias: Any = None, combine: bool = True, weight_layout: str = "rows"):
        acts, fmt = _act_format(act_format)
        if gate_up is None:
            gate_up = "interleaved" if activation == "swigluoai" else "stacked"
        if weight_layout == "pieces":  # pieces are packed for one format; pack_pieces tags the tensors it fills
            for name, w in (("w13", w13), ("w2", w2)):
                packed_for = getattr(w, "_fp4gemm_pieces_format", None)
                if packed_for is not None and packed_for != fmt:
                    raise _argument_error(name, f"was packed by pack_pieces for {packed_for} layers, but this layer's "
                                                f"weights are {fmt}: pack the rows again with format={fmt!r}")
        self._layer = _C.MoeLayer(w13, w13_scales, w2, w2_scales, w13_alpha, w13_alpha_up, w2_alpha, fmt, acts,
                                  scale_layout, activation, gate_up, float(swiglu_alpha), float(swiglu_limit),
                                  float(a1_scale), float(a2_scale), int(max_tokens), int(topk), bool(batch_invariant),
                                  _decode_tokens(decode_tokens), w13_bias, w2_bias, bool(combine), str(weight_layout))
        self._like = w13

    def run(self, hidden_states: Any, topk_ids: Any, topk_weights: Any, out: Any = None, stream: Any = None,
            hidden_fp4: Any = None, token_count: Any = None, expert_rows: Any = None, row_of: Any = None):
        """hidden_states bf16 ``[T, H]`` (T <= max_tokens), topk_ids int32/int64 ``[T, topk]``,
        topk_weights float32/bf16 ``[T, topk]`` -> out bf16 ``[T, H]`` (allocated when None).
        Never synchronises; ids outside ``[0, E)`` contribute nothing.

        hidden_fp4: W4A4 only, instead of hidden_states (pass None there): ``(packed, scales)``, the
        tokens already quantised as the layer would (``fp4gemm.quantize(x, format,
        global_scale=a1_scale)``: packed uint8 ``[T, H/2]``, linear scales ``[T, H/vec]``).

        token_count: optional CUDA int32 ``[1]`` on the layer's device: this run's token count when
        only the device knows it (e.g. the rows an expert-parallel dispatch received). Tokens at or
        past ``min(token_count[0], T)`` are absent: their ids are not read, nothing is computed for
        them and their ``out`` rows are left as they were.

        expert_rows, row_of: CUDA only, instead of ``out``, for a caller that combines the pairs
        itself (expert parallelism reads them in place over NVLink): the run stops before the
        combine and leaves pair ``i``'s expert output row at ``expert_rows[row_of[i]]`` --
        expert_rows bf16 ``[T * topk, H]`` (expert order), row_of int32 ``[T * topk]``; rows of
        pairs with ids outside ``[0, E)`` or absent tokens are not written; topk_weights is checked
        but not read. Returns expert_rows."""
        uncombined = expert_rows is not None or row_of is not None
        if out is None and not uncombined:
            if hidden_fp4 is None and type(hidden_states).__module__ == "torch":
                import torch

                # [T, H] bf16 when hidden_states is valid (the binding checks hidden_states first and
                # names it); empty_like is torch's cheapest allocation (1.9 us of host time against
                # 3.6 for torch.empty(shape, dtype=..., device=...), bench/host_overhead.py).
                out = torch.empty_like(hidden_states, memory_format=torch.contiguous_format)
            else:
                like = hidden_states if hidden_fp4 is None else hidden_fp4[0]
                out = empty_like_framework(like, (like.shape[0], self.hidden), "bfloat16", "out")
        packed, scales = (None, None) if hidden_fp4 is None else hidden_fp4
        self._layer.run(hidden_states, topk_ids, topk_weights, out, stream, 0, packed, scales, token_count,
                        expert_rows, row_of)
        return expert_rows if uncombined else out

    __call__ = run

    def check(self, stream: Any = None) -> None:
        """Synchronises, then raises if a run since the last check saw bad routing data."""
        self._layer.check(stream)

    def reload_weights(self, stream: Any = None) -> None:
        """Makes the layer's copies of the weight scales (and folded alphas) again from the arrays,
        on ``stream`` after its earlier work: after in-place changes torch's version counter does
        not see, and before replaying a CUDA graph captured earlier. MXFP4 layers that decode with
        one multiply refuse scales with a code > 128 (ArgumentError naming w13_scales / w2_scales;
        the layer keeps the old ones). A no-op for host arrays."""
        self._layer.reload_weights(stream)

    def describe(self) -> str:
        return self._layer.describe()

    def __repr__(self) -> str:
        return f"fp4gemm.moe.MoeLayer({self.describe()})"

    experts = property(lambda self: self._layer.experts)
    hidden = property(lambda self: self._layer.hidden)
    inter = property(lambda self: self._layer.inter)
    topk = property(lambda self: self._layer.topk)
    max_tokens = property(lambda self: self._layer.max_tokens)
    on_host = property(lambda self: self._layer.on_host)
    device_bytes = property(lambda self: self._layer.device_bytes)


def pack_pieces(w: Any, gate_up: Optional[str] = None, *, format: str, out: Any = None, stream: Any = None) -> Any:
    """Expert weights into the layout the kernels read (``MoeLayer(..., weight_layout='pieces')``).

    w: a CUDA torch uint8 tensor ``[E, rows, k/2]`` of packed e2m1 (dense). gate_up: None for w2-like weights, or
    'stacked' / 'interleaved' for a GLU's w13 (each 16-row block becomes 8 gate rows and their 8 up rows). format:
    'mxfp4' or 'nvfp4', the format of the layers that will read the pieces (each 32-bit word's bits are stored in
    the order that format's kernels decode fastest; a layer of the other format would read wrong values). Returns
    ``out`` (allocated when None): uint8 ``[E, rows/16, ceil(k/128), 1024]`` -- per 16 rows and 64-wide k-block a
    512-byte piece in which lane (g, c) of a warp holds bytes 8c..8c+7 of rows g and g + 8 (zeros past k). Exact (the
    same values, moved), on ``stream`` (default: the current one), without synchronising; call it again with the same
    ``out`` after changing ``w`` in place.
    """
    import torch

    if format not in ("mxfp4", "nvfp4"):
        raise _argument_error("format", f"{format!r} is not one of 'mxfp4', 'nvfp4' (the format of the layers that will "
                                        "read the pieces)")
    if not isinstance(w, torch.Tensor) or not w.is_cuda or w.dim() != 3:
        raise _argument_error("w", "must be a CUDA torch tensor [experts, rows, k/2] of packed FP4 (uint8)")
    e, rows, half_k = w.shape
    if out is None:
        out = torch.empty((e, rows // 16, (2 * half_k + 127) // 128, 1024), dtype=torch.uint8, device=w.device)
    s = stream if stream is not None else torch.cuda.current_stream(w.device)
    _C.pack_pieces(w, out, gate_up, format, int(getattr(s, "cuda_stream", s)))
    out._fp4gemm_pieces_format = format  # (MoeLayer refuses a layer of the other format on this tensor by name)
    return out


def clear_layer_cache() -> None:
    """Frees every layer plan :func:`fused_experts` cached (do not replay graphs captured with them)."""
    _cache.clear()


# The plan memo (C++): a call with weight objects seen before finds its plan by their identities (held
# weakly, addresses re-checked), allocates out with torch.empty_like and runs, ~1 us of host time
# over MoeLayer.run; behind that, plans keyed on the weights' addresses, shapes, dtypes and devices
# and the options (new views of the same memory share a plan), grown by doubling when a call needs
# more tokens, superseded plans kept until clear_layer_cache.
_cache = _C.FusedExpertsCache()


def fused_experts(hidden_states: Any, w13: Any, w13_scale: Any, w2: Any, w2_scale: Any, topk_weights: Any,
                  topk_ids: Any, *, activation: str = "silu", act_format: str = "nvfp4", gate_up: Optional[str] = None,
                  scale_layout: str = "blocked", w13_alpha: Any = None, w13_alpha_up: Any = None, w2_alpha: Any = None,
                  a1_scale: float = 1.0, a2_scale: float = 1.0, swiglu_alpha: float = SWIGLU_ALPHA,
                  swiglu_limit: float = SWIGLU_LIMIT, w13_bias: Any = None, w2_bias: Any = None, out: Any = None,
                  stream: Any = None, weight_layout: str = "rows"):
    """The MoE expert layer in one call (vLLM's ``fused_experts``); returns bf16 ``[T, H]``.

    Arguments as for :class:`MoeLayer` and its ``run`` (w13_bias ``[E, 2I]`` / w2_bias ``[E, H]``,
    bf16 or float32: gpt-oss's expert biases, read at every call). The layer plan is cached on the weights'
    addresses and the options; its workspace is sized for the largest T seen (doubling when a call
    needs more, so a warm-up call with the largest T before capturing a CUDA graph avoids a plan
    being built during capture). Superseded plans stay alive until :func:`clear_layer_cache`.
    ``weight_layout="pieces"``: w13 and w2 packed once by :func:`pack_pieces` (the faster layout, as for
    :class:`MoeLayer`); so does ``torch.ops.fp4gemm.fused_experts`` (its last argument)."""
    return _cache(hidden_states, w13, w13_scale, w2, w2_scale, topk_weights, topk_ids, w13_alpha, w13_alpha_up,
                  w2_alpha, activation, act_format, gate_up, scale_layout, a1_scale, a2_scale, swiglu_alpha,
                  swiglu_limit, out, stream, w13_bias, w2_bias, weight_layout)
