// Host-side validation of the MoE GEMM (see moe_validate.hpp).
#include "host/core/moe_validate.hpp"

#include <cmath>
#include <algorithm>
#include <string>
#include <utility>

#include "fp4gemm/formats.hpp"
#include "host/core/validate.hpp"

namespace fp4gemm::detail {

namespace {

[[noreturn]] void fail(const std::string& argument, const std::string& message) { throw Error(argument, -1, message); }

bool aligned(const void* p, std::uintptr_t n) { return reinterpret_cast<std::uintptr_t>(p) % n == 0; }

}  // namespace

std::int64_t moe_rows(int experts, const MoeOptions& o) {
  return o.layout == MoeLayout::masked ? std::int64_t{o.capacity} * experts : o.capacity;
}

int moe_weight_rows(const MoeWeights& w, const MoeOptions& o) {
  return o.epilogue != MoeEpilogue::none && o.gate_up != GateUpLayout::separate ? 2 * w.n : w.n;
}

}  // namespace fp4gemm::detail

namespace fp4gemm {

std::int64_t pieces_bytes(int rows, int k) {
  if (rows < 16 || rows % 16 != 0)
    throw Error("rows", -1, "weights in pieces need rows a positive multiple of 16 (got " + std::to_string(rows) + ")");
  if (k < 32 || k % 32 != 0)
    throw Error("k", -1, "weights in pieces need k a positive multiple of 32 (got " + std::to_string(k) + ")");
  return std::int64_t{rows / 16} * ((k + 127) / 128) * 1024;
}

}  // namespace fp4gemm

namespace fp4gemm::detail {

MoeWeights validate_moe(const MoeWeights& weights, const MoeOptions& o) {
  MoeWeights w = weights;
  if (o.format != Format::nvfp4 && o.format != Format::mxfp4) fail("options.format", "unknown format");
  if (o.scale_layout != ScaleLayout::linear && o.scale_layout != ScaleLayout::blocked)
    fail("options.scale_layout", "unknown scale layout");
  if (o.out_type != OutType::f16 && o.out_type != OutType::bf16 && o.out_type != OutType::f32)
    fail("options.out_type", "unknown output type");
  if (o.activation != MoeActivation::fp4 && o.activation != MoeActivation::bf16)
    fail("options.activation", "unknown activation type");
  if (o.layout != MoeLayout::contiguous && o.layout != MoeLayout::masked) fail("options.layout", "unknown layout");
  validate_tuning(o.tuning);
  {
    // The knobs an MoE plan reads (fp4gemm/moe.hpp, MoeOptions::tuning); the rest belong to the
    // pointer-array plans' host-built schedule and launch.
    const Tuning& t = o.tuning;
    const Tuning d{};
    auto unread = [](const char* field) {
      fail(std::string("options.tuning.") + field,
           "an MoE plan does not read this knob (it reads split_k, narrow_rows, wide_fixed, wide_per_token, "
           "narrow_fixed, narrow_per_token, moe_split_gain16 and moe_split_gain32)");
    };
    if (t.epilogue_cost) unread("epilogue_cost");
    if (t.class_round) unread("class_round");
    if (t.handoff_cost) unread("handoff_cost");
    if (t.owner_cost) unread("owner_cost");
    if (t.share_epilogue != d.share_epilogue) unread("share_epilogue");
    if (t.tile_tokens) unread("tile_tokens");
    if (t.max_ctas) unread("max_ctas");
    if (t.ring_kb) unread("ring_kb");
    if (t.tma_store) unread("tma_store");
    if (t.convert_scales != d.convert_scales) unread("convert_scales");
  }
  if (o.graph_cache < 0)
    fail("options.graph_cache", "must be >= 0 (0: no cached graphs), got " + std::to_string(o.graph_cache));
  if (o.quantize_output) {
    if (o.epilogue == MoeEpilogue::none)
      fail("options.quantize_output", "quantised output is a GLU epilogue option (set options.epilogue)");
    if (o.out_type != OutType::bf16)
      fail("options.quantize_output", "quantised output is quantised from bf16 values: set options.out_type = bf16");
    const int vec = o.format == Format::nvfp4 ? 16 : 32;
    if (w.n % vec != 0)
      fail("weights.n", "quantised output needs the GLU width N = " + std::to_string(w.n) + " to be a multiple of " +
                            std::to_string(vec) + " (the format's scale block)");
    if (o.format == Format::nvfp4 && !(std::isfinite(o.output_global_scale) && o.output_global_scale > 0.0f))
      fail("options.output_global_scale", "must be finite and > 0");
  }
  if (o.activation == MoeActivation::bf16 && o.format != Format::mxfp4)
    fail("options.activation",
         "bf16 activations (W4A16) need mxfp4 weights: the kernel dequantises nvfp4 weights to f16, and bf16 "
         "activations are not exact in f16; quantise the activations to nvfp4 (W4A4) instead");
  if (w.experts < 1 || w.experts > kMaxMoeExperts)
    fail("weights.experts", "must be 1.." + std::to_string(kMaxMoeExperts) + " (got " + std::to_string(w.experts) + ")");
  if (w.n < 1) fail("weights.n", "N must be >= 1 (got " + std::to_string(w.n) + ")");
  const bool glu = o.epilogue != MoeEpilogue::none;
  if (o.epilogue != MoeEpilogue::none && o.epilogue != MoeEpilogue::silu && o.epilogue != MoeEpilogue::swigluoai)
    fail("options.epilogue", "unknown epilogue");
  if (glu) {
    if (o.gate_up != GateUpLayout::stacked && o.gate_up != GateUpLayout::interleaved &&
        o.gate_up != GateUpLayout::separate)
      fail("options.gate_up", "unknown gate/up layout");
    if (w.n % 8 != 0)
      fail("weights.n", "a GLU's output width I = " + std::to_string(w.n) +
                            " must be a multiple of 8 (the kernel pairs 8 gate rows with their 8 up rows)");
    if (std::int64_t{w.n} * 2 > (std::int64_t{1} << 30)) fail("weights.n", "too many rows");
    if (o.epilogue == MoeEpilogue::swigluoai) {
      if (!std::isfinite(o.swiglu_alpha)) fail("options.swiglu_alpha", "must be finite");
      if (!(o.swiglu_limit > 0)) fail("options.swiglu_limit", "must be > 0 (+inf: no clamping)");
    }
    if (w.alpha_up_device != nullptr && !aligned(w.alpha_up_device, 4))
      fail("weights.alpha_up_device", "pointer is not 4-byte aligned");
    if (w.alpha_up_device == nullptr && std::isinf(w.alpha_up))
      fail("weights.alpha_up", "alpha_up must be finite (NaN: the gate's alpha)");
  } else if (w.alpha_up_device != nullptr || !std::isnan(w.alpha_up)) {
    fail(w.alpha_up_device != nullptr ? "weights.alpha_up_device" : "weights.alpha_up",
         "only a GLU epilogue (options.epilogue silu / swigluoai) has an up alpha");
  }
  if (w.bias != nullptr) {
    if (!glu) fail("weights.bias", "only a GLU epilogue (options.epilogue silu / swigluoai) takes a bias");
    if (!aligned(w.bias, w.bias_f32 ? 4 : 2))
      fail("weights.bias", std::string("pointer is not ") + (w.bias_f32 ? "4" : "2") + "-byte aligned");
  }
  const bool separate = glu && o.gate_up == GateUpLayout::separate;
  if (separate) {
    if (w.w_up == nullptr || !aligned(w.w_up, 16))
      fail("weights.w_up", "separate gate/up weights need a 16-byte aligned device pointer to the up rows");
    if (w.scales_up == nullptr || !aligned(w.scales_up, 16))
      fail("weights.scales_up", "separate gate/up weights need a 16-byte aligned device pointer to the up scales");
    if (w.w_up == w.w) fail("weights.w_up", "the up rows must not be the gate rows");
  } else if (w.w_up != nullptr || w.scales_up != nullptr) {
    fail(w.w_up != nullptr ? "weights.w_up" : "weights.scales_up",
         "only a GLU epilogue with gate_up = separate takes separate up weights");
  }
  const int wrows = moe_weight_rows(w, o);
  const int vec = scale_block_size(o.format);
  if (w.k < 1 || w.k % vec != 0)
    fail("weights.k", "K = " + std::to_string(w.k) + " must be a positive multiple of the " + to_string(o.format) +
                          " scale block (" + std::to_string(vec) + ")");
  if (o.capacity < 1) fail("options.capacity", "must be >= 1 (got " + std::to_string(o.capacity) + ")");
  const std::int64_t rows = moe_rows(w.experts, o);
  const std::int64_t kblocks = (w.k + 63) / 64;
  if (rows * kblocks >= (std::int64_t{1} << 31) - 256)
    fail("options.capacity", "rows x k-blocks (" + std::to_string(rows) + " x " + std::to_string(kblocks) +
                                 ") must stay below 2^31 for the activation pre-pass");
  if (!std::isfinite(w.alpha) && w.alpha_device == nullptr) fail("weights.alpha", "alpha must be finite");
  if (w.alpha_device != nullptr && !aligned(w.alpha_device, 4))
    fail("weights.alpha_device", "pointer is not 4-byte aligned");
  if (o.weight_layout != WeightLayout::rows && o.weight_layout != WeightLayout::pieces)
    fail("options.weight_layout", "unknown weight layout");
  if (o.weight_layout == WeightLayout::pieces) {
    // one expert's pieces: (wrows / 16) x ceil(K / 128) x 1 KB, contiguous (pack_pieces)
    if (separate) fail("options.weight_layout", "pieces hold gate and up rows together: pack w13 stacked or interleaved");
    if (wrows % 16 != 0)
      fail("weights.n", std::string("weights in pieces need ") + (glu ? "2N" : "N") + " = " + std::to_string(wrows) +
                            " to be a multiple of 16 (a piece is 16 rows)");
    if (w.k % 32 != 0)
      fail("weights.k", "weights in pieces need K = " + std::to_string(w.k) + " to be a multiple of 32");
    const std::int64_t bytes = pieces_bytes(wrows, w.k);
    if (w.ldw != 0 && w.ldw != w.k / 2)
      fail("weights.ldw", "weights in pieces have no row stride: 0 or K/2 (got " + std::to_string(w.ldw) + ")");
    if (w.expert_stride != 0 && w.expert_stride != bytes)
      fail("weights.expert_stride", "weights in pieces are contiguous: 0 or pieces_bytes = " + std::to_string(bytes) +
                                        " (got " + std::to_string(w.expert_stride) + ")");
    w.ldw = w.k / 2, w.expert_stride = bytes;
  }
  w.ldw = w.ldw != 0 ? w.ldw : w.k / 2;
  if (w.ldw < w.k / 2 || w.ldw % 16 != 0)
    fail("weights.ldw", "row stride " + std::to_string(w.ldw) + " bytes must be >= K/2 = " + std::to_string(w.k / 2) +
                            " and a multiple of 16");
  if (w.w == nullptr || !aligned(w.w, 16)) fail("weights.w", "must be a 16-byte aligned device pointer");
  if (w.scales == nullptr || !aligned(w.scales, 16)) fail("weights.scales", "must be a 16-byte aligned device pointer");
  w.expert_stride = w.expert_stride != 0 ? w.expert_stride : std::int64_t{wrows} * w.ldw;
  if (o.weight_layout == WeightLayout::rows && (w.expert_stride < std::int64_t{wrows} * w.ldw || w.expert_stride % 16 != 0))
    fail("weights.expert_stride", std::string("must be >= ") + (wrows != w.n ? "2N" : "N") + " * ldw = " +
                                      std::to_string(std::int64_t{wrows} * w.ldw) + " bytes and a multiple of 16");
  const std::int64_t dense = static_cast<std::int64_t>(formats::scale_bytes(o.scale_layout, wrows, w.k / vec));
  w.scale_expert_stride = w.scale_expert_stride != 0 ? w.scale_expert_stride : dense;
  if (w.scale_expert_stride < dense)
    fail("weights.scale_expert_stride", "must be >= one expert's " + std::string(to_string(o.scale_layout)) +
                                            " scales (" + std::to_string(dense) + " bytes)");
  if (o.scale_layout == ScaleLayout::blocked && w.scale_expert_stride % 16 != 0)
    fail("weights.scale_expert_stride", "blocked scales are read in 512-byte atoms: the stride must be a multiple of 16");
  return w;
}

void check_moe_args(const MoeWeights& w, const MoeOptions& o, const MoeArgs& a) {
  if (a.a == nullptr || !aligned(a.a, 16)) fail("a", "must be a 16-byte aligned device pointer");
  const std::int64_t row_bytes = o.activation == MoeActivation::fp4 ? w.k / 2 : std::int64_t{w.k} * 2;
  if (a.lda < row_bytes || a.lda % 16 != 0)
    fail("lda", "row stride " + std::to_string(a.lda) + " bytes must be >= " + std::to_string(row_bytes) +
                    " (one row of A) and a multiple of 16");
  if (o.activation == MoeActivation::fp4) {
    if (a.a_scales == nullptr) fail("a_scales", "FP4 activations need their scales");
  } else if (a.a_scales != nullptr) {
    fail("a_scales", "bf16 activations have no scales: pass null");
  }
  if (o.layout == MoeLayout::contiguous) {
    if (a.expert_offsets == nullptr || !aligned(a.expert_offsets, 4))
      fail("expert_offsets", "the contiguous layout needs int32 device offsets [experts + 1]");
    if (a.expert_counts != nullptr) fail("expert_counts", "only the masked layout takes counts");
    if (a.gather_index != nullptr && (!aligned(a.gather_index, 4) || a.num_tokens < 1))
      fail(a.num_tokens < 1 ? "num_tokens" : "gather_index",
           "a gather index needs num_tokens >= 1 (the rows of a) and 4-byte alignment");
  } else {
    if (a.expert_counts == nullptr || !aligned(a.expert_counts, 4))
      fail("expert_counts", "the masked layout needs int32 device counts [experts]");
    if (a.expert_offsets != nullptr) fail("expert_offsets", "the masked layout takes counts, not offsets");
    if (a.gather_index != nullptr) fail("gather_index", "the masked layout does not gather");
  }
  if (a.c == nullptr || !aligned(a.c, 16)) fail("c", "must be a 16-byte aligned device pointer");
  if (o.quantize_output) {
    if (a.ldc < w.n / 2 || a.ldc % 8 != 0)
      fail("ldc", "row stride " + std::to_string(a.ldc) + " bytes of packed FP4 must be >= N/2 = " +
                      std::to_string(w.n / 2) + " and a multiple of 8");
    if (a.c_scales == nullptr) fail("c_scales", "quantised output needs its scales [rows, N/vec]");
    return;
  }
  if (a.c_scales != nullptr) fail("c_scales", "only quantised output (options.quantize_output) has scales: pass null");
  if (a.ldc < w.n || a.ldc % 8 != 0)
    fail("ldc", "row stride " + std::to_string(a.ldc) + " elements must be >= N = " + std::to_string(w.n) +
                    " and a multiple of 8");
}

void check_moe_routing(int experts, const MoeOptions& o, const int* offsets, const int* counts, const int* gather,
                       int num_tokens) {
  if (o.layout == MoeLayout::masked) {
    for (int e = 0; e < experts; ++e)
      if (counts[e] < 0 || counts[e] > o.capacity)
        throw Error("expert_counts", e, "expert_counts[" + std::to_string(e) + "] = " + std::to_string(counts[e]) +
                                            " is outside [0, " + std::to_string(o.capacity) + "] (the capacity)");
    return;
  }
  if (offsets[0] < 0)
    throw Error("expert_offsets", 0, "expert_offsets[0] = " + std::to_string(offsets[0]) +
                                         " < 0: offsets must be non-decreasing from >= 0");
  for (int e = 1; e <= experts; ++e)
    if (offsets[e] < offsets[e - 1])
      throw Error("expert_offsets", e, "expert_offsets[" + std::to_string(e) + "] = " + std::to_string(offsets[e]) +
                                           ", less than expert_offsets[" + std::to_string(e - 1) + "] = " +
                                           std::to_string(offsets[e - 1]) + ": offsets must be non-decreasing");
  if (offsets[experts] > o.capacity)
    throw Error("expert_offsets", experts, "expert_offsets[" + std::to_string(experts) + "] = " +
                                               std::to_string(offsets[experts]) + ", more rows than the capacity " +
                                               std::to_string(o.capacity));
  if (gather == nullptr) return;
  // The device pre-pass reads gather_index[r] for every r < offsets[E] (rows before offsets[0]
  // included), so the host path checks the same rows.
  for (int r = 0; r < offsets[experts]; ++r)
    if (gather[r] < 0 || gather[r] >= num_tokens)
      throw Error("gather_index", -1, "gather_index[" + std::to_string(r) + "] = " + std::to_string(gather[r]) +
                                          " is outside [0, num_tokens = " + std::to_string(num_tokens) + ")");
}

}  // namespace fp4gemm::detail

namespace fp4gemm::detail {

void validate_moe_layer(const MoeLayerWeights& w, const MoeLayerOptions& o) {
  if (o.format != Format::nvfp4 && o.format != Format::mxfp4) fail("options.format", "unknown format");
  if (o.activations != MoeActivation::fp4 && o.activations != MoeActivation::bf16)
    fail("options.activations", "unknown activation type");
  if (o.activations == MoeActivation::bf16 && o.format != Format::mxfp4)
    fail("options.activations", "bf16 activations (W4A16) need mxfp4 weights; quantise to nvfp4 (W4A4) instead");
  if (o.scale_layout != ScaleLayout::linear && o.scale_layout != ScaleLayout::blocked)
    fail("options.scale_layout", "unknown scale layout");
  if (o.activation != MoeEpilogue::silu && o.activation != MoeEpilogue::swigluoai)
    fail("options.activation", "the expert layer's activation must be silu or swigluoai");
  if (o.gate_up != GateUpLayout::stacked && o.gate_up != GateUpLayout::interleaved)
    fail("options.gate_up", "the expert layer takes w13 with gate and up stacked or interleaved");
  if (w.experts < 1 || w.experts > kMaxMoeExperts)
    fail("weights.experts", "must be in 1.." + std::to_string(kMaxMoeExperts) + ", got " + std::to_string(w.experts));
  // 32 covers both formats' scale blocks and 16-byte rows of packed FP4 activations
  if (w.hidden < 32 || w.hidden % 32 != 0)
    fail("weights.hidden", "H = " + std::to_string(w.hidden) + " must be a positive multiple of 32");
  if (w.inter < 32 || w.inter % 32 != 0)
    fail("weights.inter", "I = " + std::to_string(w.inter) + " must be a positive multiple of 32");
  if (w.w13 == nullptr) fail("weights.w13", "null pointer");
  if (w.w13_scales == nullptr) fail("weights.w13_scales", "null pointer");
  if (w.w2 == nullptr) fail("weights.w2", "null pointer");
  if (w.w2_scales == nullptr) fail("weights.w2_scales", "null pointer");
  if (o.max_tokens < 1) fail("options.max_tokens", "must be >= 1, got " + std::to_string(o.max_tokens));
  if (o.graph_cache < 0)
    fail("options.graph_cache", "must be >= 0 (0: no cached graphs), got " + std::to_string(o.graph_cache));
  if (o.decode_tokens < kDecodeTokensAuto || o.decode_tokens > kDecodeTokensMax)
    fail("options.decode_tokens", "must be in 0.." + std::to_string(kDecodeTokensMax) + ", or -1 (by the layer), got " +
                                      std::to_string(o.decode_tokens));
  // (k may exceed E: ids may repeat an expert, and an expert-parallel rank's layer sees a token's k
  // slots over its E/W experts)
  if (o.topk < 1 || o.topk > 32) fail("options.topk", "must be in 1..32, got " + std::to_string(o.topk));
  if (std::int64_t{o.max_tokens} * o.topk > (std::int64_t{1} << 30))
    fail("options.max_tokens", "max_tokens x topk must be <= 2^30, got " +
                                   std::to_string(std::int64_t{o.max_tokens} * o.topk));
  for (auto [name, v] : {std::pair<const char*, float>{"options.a1_scale", o.a1_scale}, {"options.a2_scale", o.a2_scale}}) {
    if (!(v > 0.0f) || std::isinf(v)) fail(name, "must be finite and > 0, got " + std::to_string(v));
    if (v != 1.0f && (o.format == Format::mxfp4 || o.activations == MoeActivation::bf16))
      fail(name, "only nvfp4 activations (W4A4) have a global scale: must be 1");
  }
  if (o.activation == MoeEpilogue::swigluoai && !(o.swiglu_limit > 0.0f))
    fail("options.swiglu_limit", "must be > 0, got " + std::to_string(o.swiglu_limit));
  if (o.activation == MoeEpilogue::swigluoai && !std::isfinite(o.swiglu_alpha))
    fail("options.swiglu_alpha", "must be finite");
  if (o.weight_layout != WeightLayout::rows && o.weight_layout != WeightLayout::pieces)
    fail("options.weight_layout", "unknown weight layout");
}

void check_moe_layer_args(const MoeLayerWeights& w, const MoeLayerOptions& o, const MoeLayerArgs& a) {
  if (a.tokens < 0 || a.tokens > o.max_tokens)
    fail("tokens", "T = " + std::to_string(a.tokens) + " must be in 0..max_tokens = " + std::to_string(o.max_tokens) +
                       " (the plan's workspace)");
  const std::int64_t ldh = a.ld_hidden == 0 ? w.hidden : a.ld_hidden, ldo = a.ld_out == 0 ? w.hidden : a.ld_out;
  if (ldh < w.hidden || ldh % 8 != 0)
    fail("ld_hidden", "row stride " + std::to_string(ldh) + " elements must be >= H = " + std::to_string(w.hidden) +
                          " and a multiple of 8");
  if (ldo < w.hidden || ldo % 8 != 0)
    fail("ld_out", "row stride " + std::to_string(ldo) + " elements must be >= H = " + std::to_string(w.hidden) +
                       " and a multiple of 8");
  if (a.tokens == 0) return;
  const bool prequantised = a.hidden_packed != nullptr || a.hidden_scales != nullptr;
  if (prequantised) {
    if (o.activations != MoeActivation::fp4)
      fail("hidden_packed", "pre-quantised tokens need FP4 activations (W4A4); W4A16 takes bf16 hidden");
    if (a.hidden != nullptr) fail("hidden", "pass either hidden (bf16) or hidden_packed / hidden_scales, not both");
    if (a.hidden_packed == nullptr || !aligned(a.hidden_packed, 16))
      fail("hidden_packed", "must be a 16-byte aligned device pointer to [T, H/2] packed e2m1");
    if (a.hidden_scales == nullptr) fail("hidden_scales", "null pointer; pre-quantised tokens need their scales");
  } else if (a.hidden == nullptr || !aligned(a.hidden, 16)) {
    fail("hidden", "must be a 16-byte aligned device pointer");
  }
  if (a.topk_ids == nullptr || !aligned(a.topk_ids, a.ids_int64 ? 8 : 4))
    fail("topk_ids", std::string("must be an aligned device pointer to [T, topk] ") + (a.ids_int64 ? "int64" : "int32"));
  const bool uncombined = a.expert_rows != nullptr || a.row_of != nullptr;
  if (!o.combine && !uncombined)
    fail("expert_rows", "this layer was built with options.combine = false (no output workspace): every run "
                        "stops before the combine and needs expert_rows / row_of");
  if (!uncombined && (a.topk_weights == nullptr || !aligned(a.topk_weights, a.weights_bf16 ? 2 : 4)))
    fail("topk_weights", std::string("must be an aligned device pointer to [T, topk] ") +
                             (a.weights_bf16 ? "bf16" : "float32"));
  if (uncombined) {
    if (a.expert_rows == nullptr || !aligned(a.expert_rows, 16))
      fail("expert_rows", "must be a 16-byte aligned device pointer to bf16 [T * topk, H] (with row_of)");
    if (a.row_of == nullptr || !aligned(a.row_of, 4))
      fail("row_of", "must be an aligned device pointer to int32 [T * topk] (with expert_rows)");
    if (a.out != nullptr) fail("out", "must be null when expert_rows is given (the run stops before the combine)");
    if (w.w2_bias != nullptr)
      fail("expert_rows", "a layer with w2_bias adds the bias in its combine; it cannot stop before it");
  } else if (a.out == nullptr || !aligned(a.out, 16)) {
    fail("out", "must be a 16-byte aligned device pointer");
  }
  if (a.token_count != nullptr && !aligned(a.token_count, 4))
    fail("token_count", "must be null or an aligned device pointer to one int32");
  if (uncombined) {  // the run writes both while it still reads its inputs: they must not overlap them
    const std::int64_t pairs = std::int64_t{a.tokens} * o.topk, H = w.hidden;
    struct Span {
      const char* name;
      const void* p;
      std::int64_t bytes;
    };
    const std::int64_t ldh = a.ld_hidden == 0 ? H : a.ld_hidden;
    const Span read[] = {
        {"hidden", a.hidden, ((a.tokens - 1) * ldh + H) * 2},
        {"hidden_packed", a.hidden_packed, std::int64_t{a.tokens} * H / 2},
        {"hidden_scales", a.hidden_scales, std::int64_t{a.tokens} * H / scale_block_size(o.format)},
        {"topk_ids", a.topk_ids, pairs * (a.ids_int64 ? 8 : 4)},
        {"token_count", a.token_count, 4}};
    const Span written[] = {{"expert_rows", a.expert_rows, pairs * H * 2}, {"row_of", a.row_of, pairs * 4}};
    auto overlap = [](const Span& x, const Span& y) {
      const auto x0 = reinterpret_cast<std::uintptr_t>(x.p), y0 = reinterpret_cast<std::uintptr_t>(y.p);
      return x.p != nullptr && y.p != nullptr && x0 < y0 + static_cast<std::uintptr_t>(y.bytes) &&
             y0 < x0 + static_cast<std::uintptr_t>(x.bytes);
    };
    if (overlap(written[0], written[1])) fail("row_of", "overlaps expert_rows");
    for (const Span& wr : written)
      for (const Span& rd : read)
        if (overlap(wr, rd)) fail(wr.name, std::string("overlaps ") + rd.name + ", which the run still reads");
  }
}

}  // namespace fp4gemm::detail
