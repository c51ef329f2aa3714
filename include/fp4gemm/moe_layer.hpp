// fp4gemm MoE expert layer: out[t] = sum_j w[t, j] * down_e(act(gate_e(x_t), up_e(x_t))) over token
// t's top-k experts e = ids[t, j] (SPEC §2 "Expert layer"; vLLM's fused_experts), all on the GPU:
//
//   1. align_routing: top-k ids -> expert offsets, sorted row -> token, (t, j) -> sorted row
//   2. W4A4: the tokens quantised (quantize_activations, global scale a1_scale); W4A16: none
//   3. GEMM1 (MoeGemm, GLU epilogue): gathered rows x w13 -> silu / swigluoai -> bf16 [T*k, I]
//   4. W4A4: that intermediate quantised (a2_scale)
//   5. GEMM2 (MoeGemm): -> bf16 [T*k, H], rows in expert order
//   6. combine: out[t] = sum_j w[t, j] * y[row(t, j)], FP32 in j order, rounded once to bf16
//
// Deterministic (no atomics; every order is fixed), no host synchronisation and no device
// allocation in run(), capturable in a CUDA graph and replayable with new routings. Ids outside
// [0, E) contribute nothing (their rows are not computed). (The eager graph cache below builds a
// graph -- host-side driver resources, a private capture stream the first time -- when a key is
// seen the second time; set graph_cache = 0 for runs that must not.)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "fp4gemm/moe.hpp"

namespace fp4gemm {

struct MoeLayerWeights {
  int experts = 0, hidden = 0, inter = 0;  // E, H, I
  // w13 [E, 2I, H/2] packed e2m1 (gate and up rows as MoeLayerOptions::gate_up says; row stride
  // H/2), its scales [E, 2I, H/vec] in MoeLayerOptions::scale_layout; w2 [E, H, I/2] and its
  // scales [E, H, I/vec]. Contiguous per expert (default strides).
  const void* w13 = nullptr;
  const void* w13_scales = nullptr;
  const void* w2 = nullptr;
  const void* w2_scales = nullptr;
  // Per-expert global weight scales (ModelOpt's weight_scale_2), device arrays of E floats, or
  // null (1). w13_alpha_up: the up rows' (null: w13_alpha's).
  const float* w13_alpha = nullptr;
  const float* w13_alpha_up = nullptr;
  const float* w2_alpha = nullptr;
  // Expert biases (gpt-oss), device arrays or null, bf16 or (bias_f32) float, read at every run:
  // w13_bias [E, 2I] in w13's row order, added in FP32 before the activation (gate = fma(acc,
  // alpha, bias)); w2_bias [E, H], added in FP32 to each (token, expert) pair's bf16 y row before
  // the weighted combine (out = bf16(sum_j fma(w_j, y_j + w2_bias[e_j], .))).
  const void* w13_bias = nullptr;
  const void* w2_bias = nullptr;
  bool bias_f32 = false;
};

// MoeLayerOptions::decode_tokens: the bound chosen from the layer (see there).
inline constexpr int kDecodeTokensAuto = -1;
// MoeLayerOptions::decode_tokens' largest value: the wide decode kernels take up to 512 (token, expert) pairs, so a
// layer's bound is at most 512 / top-k tokens (larger values are clamped to it).
inline constexpr int kDecodeTokensMax = 512;

struct MoeLayerOptions {
  Format format = Format::nvfp4;                // weights (and activations, W4A4)
  MoeActivation activations = MoeActivation::fp4;  // fp4: W4A4; bf16: W4A16 (mxfp4 weights)
  ScaleLayout scale_layout = ScaleLayout::blocked;
  MoeEpilogue activation = MoeEpilogue::silu;   // silu or swigluoai
  GateUpLayout gate_up = GateUpLayout::stacked;  // stacked (vLLM w13) or interleaved (gpt-oss)
  // w13's and w2's layout (fp4gemm/moe.hpp, WeightLayout). pieces: both packed by pack_pieces_gate_up /
  // pack_pieces (w13 with the gate_up above, which still says the scales' and biases' row order), with this
  // layer's `format` (the words' bit order is the format's). Every format and activation type. Faster on both paths
  // (docs/PERF.md). Pieces are an in-memory layout: pack them from the rows at load time; do not store them.
  WeightLayout weight_layout = WeightLayout::rows;
  float swiglu_alpha = kSwigluAlpha, swiglu_limit = kSwigluLimit;
  // W4A4 NVFP4: the activations' global scales (ModelOpt's input_scale of w13 and w2); they fold
  // into the GEMMs' alphas. 1 for MXFP4.
  float a1_scale = 1.0f, a2_scale = 1.0f;
  int max_tokens = 0;  // T per run at most; sizes the workspace
  int topk = 0;  // ids per token, 1..32 (may exceed the experts: ids may repeat an expert)
  int device = -1;
  // Eager runs (the stream not being captured) replay a CUDA graph of the run's launches: one
  // graph launch instead of 8-10 kernel launches and event calls. Graphs are keyed on everything
  // a launch bakes in (T, the argument pointers, strides and flags), built the second time a key
  // is seen (a key seen once runs directly: no instantiation cost for pointers that never
  // repeat), and kept for the `graph_cache` most recently used keys; 0 launches directly every
  // time. Same kernels, same bytes either way; the routing and data are read on the device, so a
  // replay with new values in the same buffers is correct.
  int graph_cache = 8;
  // W4A4: GEMM1's GLU epilogue writes the intermediate already quantised (MoeOptions::
  // quantize_output) instead of bf16 rows that a separate quantiser then reads: one launch and a
  // round trip of the intermediate through memory fewer, the same bytes (tested). Off by default:
  // measured slower on every model shape (H200: +2 % at DeepSeek-V3 T 32, +23 % at Mixtral T 256,
  // +45 % at Qwen3 T 4096) -- the epilogue runs on the consumer warps while the tensor cores
  // idle, and the per-element exact rounding costs more there than the separate memory-bound
  // kernel.
  bool fuse_quantize = false;
  // Batch invariance: every token's output independent of the other tokens of the run (their
  // count and routing), bit for bit. The MoE schedule then never splits a tile's K between CTAs:
  // stream-K's FP32 partial sums are added in an order that depends on the load, so with it on
  // (the default) a row's last bits can change with the batch it runs in (W4A16 on real data;
  // W4A4's exactly representable partial sums hide it on most data). Expert parallelism needs it
  // for its results to equal one GPU's. Costs a few per cent at decode sizes (PERF.md).
  bool batch_invariant = false;
  // false: a plan for runs that stop before the combine (MoeLayerArgs::expert_rows / row_of; e.g. an
  // expert-parallel rank's layer): it holds no [max_tokens * topk, H] output workspace (3.7 GB at
  // DeepSeek-V3 shapes on 8 ranks of 4096 tokens) and no decode path, and every run must pass
  // expert_rows. true: both kinds of run.
  bool combine = true;
  // Runs of at most this many tokens (0..kDecodeTokensMax; at most 512 / top-k are used) take the decode path: gate/up + GLU, then down + the
  // top-k combine, streaming every active expert's weights once over all SMs, instead of the six
  // launches of the general path. Up to 8 tokens (one mma's token columns) the first kernel stages the
  // run's tokens in shared memory; past 8 -- up to 512 (token, expert) pairs -- the wide kernels run after a routing pre-pass that groups each expert's pairs 8 at
  // a time (one slot each: the expert's weights streamed once per slot), each CTA of the first kernel
  // staging the tokens of its own slots, then a combine kernel (four launches with programmatic dependent launch). W4A16: one cooperative kernel, a grid barrier between the two
  // parts, where the device grants the launch (tried at plan time; else, or with the environment
  // variable FP4GEMM_DECODE_FUSED=0 at plan time, two kernels with programmatic dependent launch:
  // the same bytes). W4A4: two kernels, the tokens and the intermediate first quantised and
  // dequantised to bf16 by the layer's rule (two small launches more). Not with
  // batch_invariant (the two paths sum in different orders, so a token's row would change when
  // the batch crosses this size). 0: never. -1 (the default, kDecodeTokensAuto): where it was
  // measured faster on an H200 (gpt-oss-120b and Qwen3-30B-A3B shapes, L2 flushed; docs/PERF.md):
  // up to 8 tokens (the decode kernels' most) with bf16 (W4A16) and FP4 (W4A4) activations alike,
  // but at most max(3, experts / (2 top-k)) -- the decode path dequantises a weight once per (token, expert)
  // pair, so where a few tokens already share experts (Mixtral: 8 experts, top-2) the general
  // path's wgmma kernel is ahead sooner; and wide hidden sizes bring the crossover down (measured
  // with bench/decode_crossover.py: Mixtral-8x7B, H 4096, ahead to its cap of 3 tokens W4A16 and to 4 W4A4;
  // DeepSeek-V3, H 7168, to 7 W4A16 (by 0.5 % at 7) and 4 W4A4 (by 1 % at 3)): at most 6 / 4 (W4A16 / W4A4)
  // past H 3072. The wide kernels, where that bound is 8 and H <= 3072: up to 64 tokens, and past 64 up to 4 pairs
  // per expert on average (T <= 4 experts / top-k, at most 512 / top-k) (Qwen3-30B-A3B: ahead of the general path at
  // every T to 64, 0.62 of its time at T 9, 0.81 at 64; gpt-oss-120b: 0.80 at 9, 0.89 at 33, 0.91 at 64, 0.84 at 96,
  // 0.83 at 128 on pieces, 0.90 at 128 on rows; H200, docs/PERF.md). W4A4 takes the wide kernels after its quantisers, as the narrow ones: the
  // same bound, but 32 for NVFP4 with experts over 4 MiB (gpt-oss-120b: 0.91 at 24, 0.98 at 32, behind from 48;
  // MXFP4 0.93 at 64, 0.86 at 128). With linear weight scales experts over 4 MiB take no wide path
  // (gpt-oss-120b: 1.06 at 32, 1.13 at 64 on rows; not profiled -- likely the codes' L1 loads beside the staging). Layers with top-k
  // > 8, or a hidden or intermediate size that is not a multiple of 32
  // (NVFP4), have no decode path; a large hidden size also lowers the bound (its first kernel
  // stages the run's tokens in shared memory, at most 96 KB: 6 tokens at H = 7168). describe()
  // names the bound in force.
  int decode_tokens = kDecodeTokensAuto;
};

struct MoeLayerArgs {
  const void* hidden = nullptr;  // bf16 [T, H], row stride ld_hidden elements
  std::int64_t ld_hidden = 0;    // 0: H
  // W4A4 only, instead of `hidden`: the tokens already quantised as step 2 would (packed e2m1
  // [T, H/2] dense, linear scales [T, H/vec] dense, global scale a1_scale) -- e.g. rows that
  // travelled as NVFP4 in an expert-parallel dispatch.
  const void* hidden_packed = nullptr;
  const void* hidden_scales = nullptr;
  const void* topk_ids = nullptr;  // [T, topk] int32 (or int64 with ids_int64)
  bool ids_int64 = false;
  const void* topk_weights = nullptr;  // [T, topk] float32 (or bf16 with weights_bf16)
  bool weights_bf16 = false;
  int tokens = 0;       // T, 0..max_tokens
  void* out = nullptr;  // bf16 [T, H], row stride ld_out elements
  std::int64_t ld_out = 0;  // 0: H
  // Optional, a device int32: this run's token count when it is only known on the device (e.g. the
  // rows an expert-parallel dispatch received). Tokens at or past min(*token_count, tokens) are
  // absent: their ids are not read, no work is done for them and their out rows are not written.
  // `tokens` stays the bound (the arrays' extent). Null: all `tokens` tokens.
  const int* token_count = nullptr;
  // Instead of `out`, for a caller that combines the pairs itself (expert parallelism reads them
  // in place over NVLink): the run stops before the combine and leaves pair i's expert output row
  // (bf16, the row the combine would read) at expert_rows[row_of[i]] -- expert_rows bf16
  // [T * topk, H] dense, in expert order; row_of int32 [T * topk]. The rows of pairs whose id is
  // outside [0, E) or whose token is absent are not written (their row_of entries point nowhere
  // meaningful). topk_weights is not read (may be null); `out` must be null. Not with w2_bias (the
  // combine adds it). A kernel of the caller's launched after the run as a programmatic dependent
  // (programmatic stream serialisation) must wait for it (cudaGridDependencySynchronize) before it
  // reads these rows: the run's last kernel lets such a launch start early.
  void* expert_rows = nullptr;
  int* row_of = nullptr;
};

class MoeLayer {
 public:
  // Plan-time device work that reads the weights (GEMM1's paired scale copy, linear scale
  // conversions, alphas folded with a1_scale / a2_scale) is ordered after the work enqueued so far
  // on `stream` (see MoeGemm's constructor): weights written there just before are read complete.
  MoeLayer(const MoeLayerWeights& weights, const MoeLayerOptions& options, cudaStream_t stream = nullptr);
  ~MoeLayer();
  MoeLayer(MoeLayer&&) noexcept;
  MoeLayer& operator=(MoeLayer&&) noexcept;
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  void run(const MoeLayerArgs& args, cudaStream_t stream = nullptr) const;
  // Synchronises `stream`; throws fp4gemm::Error if a run since the last check saw bad routing
  // data (the GEMMs' device checks, see MoeGemm::check).
  void check(cudaStream_t stream = nullptr) const;
  // After weights were changed in place (scales, or the alpha arrays of a layer that folds them
  // with a1_scale / a2_scale): makes the layer's own copies again from them, on `stream` after its
  // earlier work (MoeGemm::reload_scales for both GEMMs: the same MXFP4 rule and errors, named
  // weights.w13_scales / weights.w2_scales). The packed weights and blocked w2 scales are read at
  // every run. Later runs and replays of graphs captured earlier see the new values.
  void reload_weights(cudaStream_t stream = nullptr) const;
  std::string describe() const;
  std::size_t device_bytes() const;
  const MoeLayerOptions& options() const;
  // Runs so far that were one launch of a cached graph (MoeLayerOptions::graph_cache).
  std::size_t graph_replays() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The layer's combine alone, on the device (step 6; expert parallelism's last step, on rows that
// came back in pair order): out[t, h] = bf16(acc), acc = fma(w[t, j], y[t * k + j, h], acc) in
// FP32 over j = 0..k-1 in order from 0, ids outside [0, experts) skipped -- bit for bit the layer's
// combine and reference::moe_combine. All pointers are device memory of `device`; y and out
// 16-byte aligned, hidden and the row strides (elements) multiples of 8. Enqueues one kernel on
// `stream` (no allocation, no synchronisation, graph-capturable).
struct MoeCombineArgs {
  const void* y = nullptr;  // bf16 [tokens * topk, hidden], row stride ld_y
  std::int64_t ld_y = 0;
  const void* topk_ids = nullptr;  // [tokens, topk] int32 (int64 with ids_int64)
  bool ids_int64 = false;
  const void* topk_weights = nullptr;  // [tokens, topk] float32 (bf16 with weights_bf16)
  bool weights_bf16 = false;
  int tokens = 0, topk = 0, experts = 0, hidden = 0;
  void* out = nullptr;  // bf16 [tokens, hidden], row stride ld_out
  std::int64_t ld_out = 0;
  int device = -1;
};
void moe_combine(const MoeCombineArgs& args, cudaStream_t stream = nullptr);

}  // namespace fp4gemm
