// fp4gemm MoE API: the device-driven grouped GEMM of a Mixture-of-Experts layer. The routing
// (rows per expert) is device data read at run time; the plan depends only on the weights.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm {

// What the activations are: FP4 in the plan's format (W4A4: packed e2m1 + linear scales, E4M3 per
// 16 for NVFP4, UE8M0 per 32 for MXFP4) or bf16 (W4A16; MXFP4 weights, whose dequantised values
// are exact in bf16 as the activations are).
enum class MoeActivation { fp4, bf16 };

// contiguous: rows stacked by expert, expert e owns rows [offsets[e], offsets[e+1]) of A and C.
// masked (DeepGEMM's low-latency layout): expert e owns rows [e * max_m, e * max_m + counts[e]).
enum class MoeLayout { contiguous, masked };

// The epilogue: the plain product, or a gated linear unit over two products of the same rows
// (SwiGLU, SPEC §2): C[:, i] = act(alpha * gate_i, alpha_up * up_i) with
//   silu:      silu(g) * u, silu(g) = g / (1 + exp(-g))
//   swigluoai: gpt-oss's, g' = min(g, limit), u' = clamp(u, -limit, limit),
//              g' * sigmoid(swiglu_alpha * g') * (u' + 1)
// evaluated in FP32 from the FP32 accumulators and rounded once to the output type.
using MoeEpilogue = Epilogue;  // (fp4gemm.hpp)
// Where a GLU's gate and up rows are (W's rows per expert; I = MoeWeights::n, the output width):
//   stacked:     W has 2I rows, gate rows 0..I-1, up rows I..2I-1 (vLLM's w13)
//   interleaved: W has 2I rows, gate row 2i, up row 2i+1 (gpt-oss's gate_up_proj)
//   separate:    W holds the I gate rows, MoeWeights::w_up the I up rows (GPU MODE's b1 / b2;
//                same row and expert strides, scales in the same layout and strides)
enum class GateUpLayout { stacked, interleaved, separate };

// How the expert weights' bytes are laid out in memory.
//   rows:   W[e] is [N, K/2] packed e2m1 rows (SPEC §2; MoeWeights' strides apply).
//   pieces: W[e] is the rows repacked once by pack_pieces (below, for the plan's format) into the order the kernels read them: per 16-row
//           block and 64-wide k-block one 512-byte piece, in which lane (g, c) of a warp holds bytes 8c..8c+7 of
//           the block's rows g and g + 8 (k padded with zeros to a multiple of 128). Every thread's two rows of a
//           k-block are then one 16-byte load, and the decode path's 1 KB chunks are contiguous (docs/DESIGN.md).
//           Contiguous per expert: pieces_bytes(rows, k) bytes each (ldw and expert_stride 0, or those values).
//           For a GLU, a piece holds 8 gate rows and their 8 up rows, paired by pack_pieces from `gate_up`;
//           the scales and biases keep the caller's layout and row order (options.gate_up says which).
enum class WeightLayout { rows, pieces };

const char* to_string(MoeActivation a);
const char* to_string(MoeLayout l);
const char* to_string(GateUpLayout g);
const char* to_string(WeightLayout w);

// Bytes of one expert's weights in WeightLayout::pieces: (rows / 16) x ceil(k / 128) x 1024. `rows` is the weight
// rows per expert (a GLU's 2I); it must be a multiple of 16, k a positive multiple of 32.
std::int64_t pieces_bytes(int rows, int k);

// Repacks experts' contiguous packed e2m1 weights [experts, rows, k/2] (row stride k/2 bytes) into
// WeightLayout::pieces at `out` (experts x pieces_bytes(rows, k) bytes, not overlapping `w`), on `stream`
// (asynchronous, graph-capturable; nothing is read on the host). Exact: the same values, moved, zeros past k.
// `format` is the weights' format, and pieces are for plans of that format only: each 32-bit word's bits are stored
// in the order that format's kernels decode in 9 operations (MXFP4 in bf16: instead of 13; NVFP4 in f16: instead of
// 11; docs/DESIGN.md, "Weights in pieces"). A plan of the other format would read wrong values. The bit order may change
// between versions: pack at load time from the rows, do not store pieces.
// Weights changed in place later are repacked into the same buffer by calling it again.
void pack_pieces(const void* w, void* out, int experts, int rows, int k, Format format, cudaStream_t stream = nullptr);
// The same for a GLU's w13 [experts, 2 inter, k/2] with its gate / up rows as `gate_up` says (stacked or
// interleaved): each 16-row block becomes 8 gate rows and their 8 up rows, the GLU kernels' order.
void pack_pieces_gate_up(const void* w13, void* out, int experts, int inter, int k, GateUpLayout gate_up, Format format,
                         cudaStream_t stream = nullptr);

// The expert weights, bound at plan time. W[e] is [N, K] packed e2m1 (K-contiguous, row stride
// `ldw` bytes, expert e at w + e * expert_stride bytes); its scales are `scales` + e *
// scale_expert_stride bytes in options.scale_layout ([N, K/vec] linear rows, or the blocked
// layout of N rows; blocked is the fast path, linear ones are converted once at plan time).
//
// With a GLU epilogue (MoeOptions::epilogue), n is the output width I and W holds 2I rows per
// expert (or I in w and I in w_up, GateUpLayout::separate); their scales likewise. The plan then
// keeps its own blocked copy of the scales with the rows in the kernel's gate/up order (1/8 of
// the weight bytes for NVFP4); the weights themselves are read in place.
struct MoeWeights {
  int experts = 0, n = 0, k = 0;
  const void* w = nullptr;
  std::int64_t ldw = 0;                  // bytes; 0: K/2
  std::int64_t expert_stride = 0;        // bytes; 0: N * ldw
  const void* scales = nullptr;
  std::int64_t scale_expert_stride = 0;  // bytes; 0: the dense size of one expert's scales
  // Per-expert alpha: a device array of E floats read at run time, or null (then `alpha`).
  const float* alpha_device = nullptr;
  float alpha = 1.0f;
  // GLU only: the up rows' alpha (NVFP4 checkpoints scale gate and up separately): a device array
  // of E floats, or the scalar alpha_up; NaN (the default) uses the gate's alpha for both.
  const float* alpha_up_device = nullptr;
  float alpha_up = __builtin_nanf("");
  // GateUpLayout::separate: the up weights and their scales (strides as w's and scales').
  const void* w_up = nullptr;
  const void* scales_up = nullptr;
  // GLU epilogues only: a per-expert bias of the gate and up rows, a device array [E, 2N] in the
  // rows' order (gate_up: stacked and separate gate rows first, then up; interleaved gate 2i, up
  // 2i + 1), bf16 or (bias_f32) float, or null. Added in FP32 before the activation:
  // gate = fma(acc, alpha, bias), likewise up (gpt-oss's gate_up_proj_bias). Read at every run.
  const void* bias = nullptr;
  bool bias_f32 = false;
};

struct MoeOptions {
  Format format = Format::nvfp4;                   // weights (and FP4 activations)
  ScaleLayout scale_layout = ScaleLayout::blocked;  // of the weight scales
  OutType out_type = OutType::bf16;
  MoeActivation activation = MoeActivation::fp4;
  MoeLayout layout = MoeLayout::contiguous;
  // contiguous: the most rows a run may route (offsets[E] <= capacity); sizes the workspace.
  // masked: rows per expert slot (max_m); A and C have experts * capacity rows.
  int capacity = 0;
  int device = -1;
  MoeEpilogue epilogue = MoeEpilogue::none;
  GateUpLayout gate_up = GateUpLayout::stacked;  // GLU only
  // MoeWeights::w's layout (WeightLayout): pieces needs N (a GLU's 2N) a multiple of 16 and no separate gate / up.
  WeightLayout weight_layout = WeightLayout::rows;
  float swiglu_alpha = kSwigluAlpha, swiglu_limit = kSwigluLimit;  // swigluoai only; limit > 0
  // Where the plan keeps its own blocked copy of the weight scales (linear input, or any GLU):
  // false: made once at plan time (later changes of the scale bytes are not seen); true: made
  // again at the start of every run, on the run's stream (one small kernel, graph-capturable) --
  // for callers that reuse the scale buffers with new contents (GPU MODE's harness).
  // MXFP4 (any scale source): false decodes with one multiply per weight register when every
  // scale code the kernel reads is <= 128 at plan time (describe(): "one multiply"); a code > 128
  // written into the user's blocked scales after planning is then reported by check()
  // (weights.scales; that run's output is undefined). true: two multiplies, any code.
  bool rescale_each_run = false;
  // Eager runs (the stream not being captured) replay a CUDA graph of the run's launches (the
  // pre-pass and the GEMM): one graph launch instead of two kernel launches. Graphs are keyed on
  // the run's pointers, strides and token count, built the second time a key is seen, and kept for
  // the `graph_cache` most recently used keys; 0 launches directly every time. Same kernels, same
  // bytes either way (the routing and data are read on the device).
  int graph_cache = 8;
  // GLU epilogues only: write the output as FP4 in the weights' format for a following W4A4 GEMM
  // (the MoE layer's GEMM2) instead of 16-bit values. Each output value is rounded to bf16 (as a
  // bf16 output would hold it), then quantised exactly as fp4gemm::quantize_activations quantises
  // bf16 input (NVFP4 with global scale `output_global_scale`, MXFP4's OCP rule): `c` receives the
  // packed e2m1 rows [rows, N/2] (row stride `ldc` bytes) and `MoeArgs::c_scales` the linear
  // scales [rows, N/vec], bit for bit what the separate quantiser would write for these rows.
  // Needs out_type bf16 and N a multiple of the format's block (16 / 32).
  bool quantize_output = false;
  float output_global_scale = 1.0f;  // NVFP4 only (MXFP4: 1)
  // Measurement and test knobs (fp4gemm/tuning.hpp); the default is the production choice. An MoE
  // plan reads these: split_k (false: the device schedule splits no tile over CTAs; true or unset:
  // the 16- and 32-token classes' last tiles run stream-K where it pays, as today), narrow_rows
  // (weight rows of the <= 128-token tiles: 128 or 256; unset: the plan's rule), the device
  // schedule's cost model wide_fixed / wide_per_token / narrow_fixed / narrow_per_token, and
  // moe_split_gain16 / moe_split_gain32 (the least saving, in k-blocks per CTA, for which a class's
  // partial last round is split). Any other field set is rejected ("options.tuning.<field>").
  Tuning tuning = {};
};

// One run's data, all device pointers (none is read on the host).
//  a:  FP4: [rows, K/2] packed e2m1, row stride lda bytes; bf16: [rows, K], row stride lda bytes.
//      With gather_index, `a` holds `num_tokens` unsorted token rows instead.
//  a_scales: FP4 only: linear [rows (or num_tokens), K/vec], row stride K/vec bytes.
//  expert_offsets (contiguous): int32 [E+1], non-decreasing, offsets[0] >= 0, offsets[E] <= capacity.
//  expert_counts (masked): int32 [E], each in [0, capacity].
//  gather_index (contiguous, optional): int32 [capacity]; row r reads token gather_index[r] of a.
//  c: [rows, N] of options.out_type, row stride ldc elements; rows past offsets[E] (or past each
//     expert's count) are left untouched.
struct MoeArgs {
  const void* a = nullptr;
  std::int64_t lda = 0;  // bytes
  const void* a_scales = nullptr;
  const int* expert_offsets = nullptr;
  const int* expert_counts = nullptr;
  const int* gather_index = nullptr;
  int num_tokens = 0;
  void* c = nullptr;
  std::int64_t ldc = 0;  // elements (MoeOptions::quantize_output: bytes of packed FP4)
  void* c_scales = nullptr;  // MoeOptions::quantize_output only: linear scales [rows, N/vec]
};

// Plan once per weight set; run with a new routing every time. `run` allocates nothing, never
// synchronises, and is capturable in a CUDA graph that can be replayed with different offsets.
// Bad routing data is caught on the device: nothing is read or written out of bounds; offsets
// decreasing or past capacity and counts out of range make the run write no output; a gather index
// out of range leaves that row's output undefined (the other rows are computed); in every case an
// error word is set; `check()` (a synchronising call) throws
// fp4gemm::Error naming the argument ("expert_offsets", "expert_counts", "gather_index"; or
// "weights.scales" with the expert, for an MXFP4 scale code > 128 written into the user's blocked
// scales after a one-multiply plan was built: MoeOptions::rescale_each_run) and clears it. Runs of
// one plan are serialised like Plan's.
namespace detail {
struct MoeGemmOwner;  // internal: lets fp4gemm::MoeLayer enqueue its private GEMMs unserialised
}

class MoeGemm {
 public:
  // Plan-time device work that reads the weights (the blocked copy of linear or GLU scales, the
  // MXFP4 scale-code scan) is ordered after the work enqueued so far on `stream`: weights written
  // there just before (a GPU quantiser's output) are read complete. nullptr is the legacy default
  // stream, which also orders after every blocking stream; weights written on a non-blocking
  // stream need that stream here. Returns when that work is done.
  MoeGemm(const MoeWeights& weights, const MoeOptions& options, cudaStream_t stream = nullptr);
  ~MoeGemm();
  MoeGemm(MoeGemm&&) noexcept;
  MoeGemm& operator=(MoeGemm&&) noexcept;
  MoeGemm(const MoeGemm&) = delete;
  MoeGemm& operator=(const MoeGemm&) = delete;

  void run(const MoeArgs& args, cudaStream_t stream = nullptr) const;
  // Synchronises `stream`, then throws if any run since the last check found bad routing data.
  void check(cudaStream_t stream = nullptr) const;
  // After the weights' scales (or alpha_device) were changed in place: makes the plan's own copy
  // of the scales again from them, on `stream` after its earlier work (runs enqueued later see the
  // new values; so do replays of graphs captured earlier, which read the same copy). The packed
  // weights, blocked scales of a plain plan and alpha arrays are read at every run and need no
  // reload. MXFP4 plans that decode with one multiply (every code <= 128 when built) scan the
  // scales again and throw Error("weights.scales") naming the expert when a code is now > 128
  // (the plan is unchanged then: build a new one, or use rescale_each_run); that scan
  // synchronises `stream`. Not while `stream` is being captured (Error "stream"). Serialised with
  // runs of the plan.
  void reload_scales(cudaStream_t stream = nullptr) const;

  std::string describe() const;
  const char* kernel_name() const;  // the registry's MoE kernel behind the plan ("sm90_fused_swapab_moe")
  const MoeOptions& options() const;
  int experts() const;
  int n() const;
  int k() const;
  int rows() const;  // rows of A and C the plan serves: capacity, or experts * capacity (masked)
  std::size_t device_bytes() const;
  // Runs so far that were one launch of a cached graph (MoeOptions::graph_cache).
  std::size_t graph_replays() const;

  struct Impl;

 private:
  friend struct detail::MoeGemmOwner;
  std::unique_ptr<Impl> impl_;
};

// Top-k routing -> the contiguous layout's arrays, on the device in one kernel (no host
// synchronisation, no allocation, graph-capturable). `topk_ids` holds `count` = T * k expert ids
// (int32, or int64 with `ids_int64`), token t's j-th id at index t * k + j, in device memory.
// Rows are sorted by expert, then by index (stable, deterministic: no order depends on timing):
//   offsets[e] (int32, e = 0..E) = the number of ids below e;
//   gather[r]  (int32, count rows) = the token of sorted row r (its index / k);
//   order[r]   (int64, optional) = the index t * k + j of sorted row r (for the combine).
// An id outside [0, E) owns no expert's row: its rows lie before offsets[0] (negative ids) or at
// and after offsets[E] (ids >= E), in index order there too. experts: 1..512 (MoeGemm's limit); count: 0..2^31 - 1. Every pointer must
// lie in device memory of the current device (checked; fp4gemm::Error names the argument).
void align_routing(const void* topk_ids, bool ids_int64, std::int64_t count, int k, int experts, int* offsets,
                   int* gather, std::int64_t* order = nullptr, cudaStream_t stream = nullptr);

namespace detail {
// align_routing without the device-pointer checks (callers that know their buffers, such as the
// Python binding's torch tensors); the scalar arguments are still validated.
void launch_align_routing(const void* topk_ids, bool ids_int64, std::int64_t count, int k, int experts, int* offsets,
                          int* gather, std::int64_t* order, cudaStream_t stream);
// The same with row_of[i] (int32, count) = the sorted row of index i = t * k + j (the inverse of
// `order`; the expert layer's combine reads it), instead of `order`. token_count (optional, a
// device int): pairs of tokens at or past it are absent -- their ids unread, sorted last, past
// offsets[E]. Only the routed pairs' entries of gather and row_of are written (ids in [0, E),
// tokens before the count; gather's [offsets[0], offsets[E])): the others take their slots but
// nothing reads them. grid_scratch (optional, device, align_routing_grid_scratch_ints(E) int32,
// not kept between runs): routings of at least align_routing_grid_min_ids() ids run over a grid
// of CTAs (three launches, the same slots) instead of one block.
void launch_align_routing_rows(const void* topk_ids, bool ids_int64, std::int64_t count, int k, int experts,
                               int* offsets, int* gather, int* row_of, cudaStream_t stream,
                               const int* token_count = nullptr, int* grid_scratch = nullptr);
// The grid form's scratch (int32 elements) for E experts, and the fewest ids that take it.
std::int64_t align_routing_grid_scratch_ints(int experts);
std::int64_t align_routing_grid_min_ids();
}  // namespace detail

}  // namespace fp4gemm
