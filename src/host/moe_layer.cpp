// fp4gemm::MoeLayer: the whole MoE expert layer around two device-driven MoE GEMMs (see
// moe_layer.hpp for the steps). Everything the layer needs is sized at plan time from max_tokens;
// run() only enqueues kernels: align_routing, (W4A4) quantize, GEMM1 (gather + GLU), (W4A4)
// quantize, GEMM2, combine -- 4 launches for W4A16, 6 for W4A4 (each MoE GEMM launches its
// pre-pass and the GEMM: +2 each).
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe_layer.hpp"
#include "fp4gemm/quantize.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/device_memory.hpp"
#include "host/core/moe_validate.hpp"
#include "host/core/validate.hpp"
#include "host/device_guard.hpp"
#include "host/graph_cache.hpp"
#include "host/moe_gemm_owner.hpp"
#include "host/pimpl.hpp"
#include "host/run_serializer.hpp"
#include "host/kernel_registry.hpp"  // the layer's kernels: decode path, combine, alpha folding
#include "device/glu.hpp"

namespace fp4gemm {

struct MoeLayer::Impl {
  MoeLayerWeights weights;
  MoeLayerOptions options;
  DeviceInfo device;
  detail::DeviceAllocations memory;  // the layer's own workspace
  std::unique_ptr<MoeGemm> gemm1, gemm2;
  int capacity = 0;  // max_tokens x topk: rows of the sorted intermediates
  int* offsets = nullptr;  // [E + 1]
  int* gather = nullptr;   // [capacity]
  int* row_of = nullptr;   // [capacity]
  int* routing_scratch = nullptr;  // the grid routing's counts (large runs)
  std::uint8_t *x_packed = nullptr, *x_scales = nullptr;  // W4A4: quantised tokens [max_tokens, H]
  __nv_bfloat16* inter = nullptr;                         // [capacity, I]
  // W4A16 with I % 64 == 0: GEMM1's GLU epilogue writes the intermediate straight into GEMM2's
  // activation workspace ([capacity, I]), in the wgmma k order GEMM2's pre-pass would write, and
  // GEMM2 runs without its pre-pass (MoeGemmOwner; kGluKOrder). Null: GEMM1 writes `inter`.
  void* handover = nullptr;
  std::uint8_t *i_packed = nullptr, *i_scales = nullptr;  // W4A4: quantised intermediate
  __nv_bfloat16* y = nullptr;                             // [capacity, H]
  // The decode path (MoeLayerOptions::decode_tokens): runs of T <= decode_tokens
  int decode_tokens = 0;  // 0: no decode path in this plan
  detail::DecodeLayerArgs decode{};  // the plan's part of the arguments
  detail::RunSerializer runs;

  // Eager runs as graph replays (MoeLayerOptions::graph_cache), guarded by `runs`' lock.
  struct GraphKey {
    const void *hidden, *hidden_packed, *hidden_scales, *ids, *weights, *out, *token_count, *expert_rows, *row_of;
    std::int64_t ld_hidden, ld_out;
    int tokens;
    bool ids_int64, weights_bf16;
    bool operator==(const GraphKey&) const = default;
  };
  mutable detail::GraphCache<GraphKey> graphs;

  void enqueue(const MoeLayerArgs& args, cudaStream_t s) const;

  template <typename T>
  T* allocate(std::size_t bytes, const char* what) {
    return memory.allocate<T>(bytes, what);
  }
  // A per-expert alpha array times a global activation scale, in a plan-owned array (null: none).
  struct Fold {
    const float* alpha;
    float s;
    float* out;
  };
  std::vector<Fold> folds;  // made at plan time and again by reload_weights
  const float* folded(const float* alpha, float s, cudaStream_t stream) {
    if (alpha == nullptr || s == 1.0f) return alpha;
    auto* out = allocate<float>(sizeof(float) * weights.experts, "plan workspace");
    folds.push_back(Fold{alpha, s, out});
    fold(folds.back(), stream);
    return out;
  }
  void fold(const Fold& f, cudaStream_t stream) const {
    FP4GEMM_CUDA_CHECK(detail::launch_scale_array(f.alpha, f.s, f.out, weights.experts, stream), "plan");
  }
  ~Impl() {
    gemm1.reset();
    gemm2.reset();
  }
};

MoeLayer::MoeLayer(const MoeLayerWeights& weights, const MoeLayerOptions& options, cudaStream_t stream)
    : impl_(std::make_unique<Impl>()) {
  Impl& p = *impl_;
  detail::validate_moe_layer(weights, options);
  if (device_count() == 0) throw Error("device", -1, "no CUDA device is available (no GPU or no driver)");
  p.device = device_info(options.device);
  if (!p.device.has_fast_kernel)
    throw Error("options.device", -1, "no fast kernel for " + p.device.name + ": fp4gemm's MoE layer needs sm_90 (H100/H200)");
  detail::DeviceGuard guard(p.device.index);
  p.weights = weights;
  p.options = options;
  p.options.device = p.device.index;
  const MoeLayerWeights& w = p.weights;
  const MoeLayerOptions& o = p.options;
  const int E = w.experts, H = w.hidden, I = w.inter, vec = scale_block_size(o.format);
  const bool w4a4 = o.activations == MoeActivation::fp4;
  p.capacity = o.max_tokens * o.topk;
  for (auto [name, a] : {std::pair<const char*, const float*>{"weights.w13_alpha", w.w13_alpha},
                         {"weights.w13_alpha_up", w.w13_alpha_up},
                         {"weights.w2_alpha", w.w2_alpha}})
    if (a != nullptr) detail::check_device_buffer(name, -1, a, 4 * std::int64_t{E}, p.device.index);
  const int bias_bytes = w.bias_f32 ? 4 : 2;
  if (w.w13_bias != nullptr)
    detail::check_device_buffer("weights.w13_bias", -1, w.w13_bias, std::int64_t{E} * 2 * I * bias_bytes, p.device.index);
  if (w.w2_bias != nullptr) {
    detail::check_device_buffer("weights.w2_bias", -1, w.w2_bias, std::int64_t{E} * H * bias_bytes, p.device.index);
    if (reinterpret_cast<std::uintptr_t>(w.w2_bias) % 16 != 0)  // (the combine reads 8 columns at a time)
      throw Error("weights.w2_bias", -1, "must be 16-byte aligned");
  }

  cudaStream_t s = nullptr;  // a private stream: a plan may be built while another stream is captured
  FP4GEMM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "plan");
  struct StreamOwner {
    cudaStream_t s;
    ~StreamOwner() { cudaStreamDestroy(s); }
  } owner{s};
  detail::order_after(s, stream, "plan");  // the alphas folded below may have been written there just now

  p.offsets = p.allocate<int>(sizeof(int) * (E + 1), "plan workspace");
  p.gather = p.allocate<int>(sizeof(int) * p.capacity, "plan workspace");
  p.row_of = p.allocate<int>(sizeof(int) * p.capacity, "plan workspace");
  if (detail::routing_grid_ctas(p.capacity) > 0)
    p.routing_scratch = p.allocate<int>(sizeof(int) * detail::routing_grid_scratch_ints(E), "plan workspace");
  p.inter = p.allocate<__nv_bfloat16>(std::size_t{2} * p.capacity * I, "plan workspace");
  if (o.combine) p.y = p.allocate<__nv_bfloat16>(std::size_t{2} * p.capacity * H, "plan workspace");
  // Rows that no expert computes in a run (ids outside [0, E)) are still quantised between the
  // GEMMs (the quantiser takes a host row count): keep them defined.
  FP4GEMM_CUDA_CHECK(cudaMemsetAsync(p.inter, 0, std::size_t{2} * p.capacity * I, s), "plan");
  if (w4a4) {
    p.x_packed = p.allocate<std::uint8_t>(std::size_t{1} * o.max_tokens * H / 2, "plan workspace");
    p.x_scales = p.allocate<std::uint8_t>(std::size_t{1} * o.max_tokens * (H / vec), "plan workspace");
    p.i_packed = p.allocate<std::uint8_t>(std::size_t{1} * p.capacity * I / 2, "plan workspace");
    p.i_scales = p.allocate<std::uint8_t>(std::size_t{1} * p.capacity * (I / vec), "plan workspace");
    // (with the fused quantisation, rows no expert computes are not written: defined all the same)
    FP4GEMM_CUDA_CHECK(cudaMemsetAsync(p.i_packed, 0, std::size_t{1} * p.capacity * I / 2, s), "plan");
    FP4GEMM_CUDA_CHECK(cudaMemsetAsync(p.i_scales, 0, std::size_t{1} * p.capacity * (I / vec), s), "plan");
  }

  // GEMM1: gathered tokens x w13 -> act(gate, up), alphas with a1_scale folded in.
  const float a1 = w4a4 ? o.a1_scale : 1.0f, a2 = w4a4 ? o.a2_scale : 1.0f;
  MoeWeights w1;
  w1.experts = E, w1.n = I, w1.k = H;
  w1.w = w.w13, w1.scales = w.w13_scales;
  w1.alpha_device = p.folded(w.w13_alpha, a1, s);
  w1.alpha = w.w13_alpha == nullptr ? a1 : 1.0f;
  if (w.w13_alpha_up != nullptr) w1.alpha_up_device = p.folded(w.w13_alpha_up, a1, s);
  w1.bias = w.w13_bias, w1.bias_f32 = w.bias_f32;
  MoeOptions o1;
  o1.format = o.format, o1.scale_layout = o.scale_layout, o1.out_type = OutType::bf16;
  o1.activation = o.activations, o1.layout = MoeLayout::contiguous, o1.capacity = p.capacity;
  o1.device = p.device.index;
  o1.epilogue = o.activation, o1.gate_up = o.gate_up;
  o1.weight_layout = o.weight_layout;  // (w2 too: o2 below is o1's copy)
  o1.graph_cache = 0;  // (the layer enqueues its GEMMs itself, inside its own cached graph)
  o1.swiglu_alpha = o.swiglu_alpha, o1.swiglu_limit = o.swiglu_limit;
  o1.quantize_output = w4a4 && o.fuse_quantize;  // the intermediate leaves GEMM1 as FP4
  if (o.batch_invariant) o1.tuning.split_k = false;  // no stream-K: each tile's K summed by one CTA, in order
  o1.output_global_scale = o.format == Format::nvfp4 ? o.a2_scale : 1.0f;
  // GEMM2: the intermediate x w2, alphas with a2_scale folded in.
  MoeWeights w2;
  w2.experts = E, w2.n = H, w2.k = I;
  w2.w = w.w2, w2.scales = w.w2_scales;
  w2.alpha_device = p.folded(w.w2_alpha, a2, s);
  w2.alpha = w.w2_alpha == nullptr ? a2 : 1.0f;
  MoeOptions o2 = o1;
  o2.epilogue = MoeEpilogue::none;
  o2.quantize_output = false, o2.output_global_scale = 1.0f;
  // The decode path: W4A16 MXFP4 or W4A4, top-k <= 8, not batch invariant (see MoeLayerOptions).
  // (Its NVFP4 kernels run in f16 and need FP4 activations: never NVFP4 W4A16.)
  // Kernel 1 stages the run's tokens in shared memory: fewer decode tokens where they do not fit.
  // kDecodeTokensAuto: the measured crossover (MoeLayerOptions::decode_tokens).
  // gpt-oss-120b's 12.4 MB experts and Qwen3-30B-A3B's 2.4 MB ones, W4A16 and W4A4: the decode path ahead at every
  // T up to the kernels' 8 (bench/decode_crossover.py on an H200; gpt-oss W4A4 T 8 by the smallest margin, 0.93).
  int auto_tokens = std::min(detail::kDecodeMaxTokens, std::max(3, E / (2 * o.topk)));
  // Wide hidden sizes: the general path wins sooner (bench/decode_crossover.py on an H200: Mixtral's H 4096 decode
  // path ahead at every T to its cap of 3 W4A16, and to T 4 W4A4 (0.91 at 4); DeepSeek-V3's H 7168 W4A16 to T 7,
  // ratio 0.96 at 6 and 0.995 at 7, tied at 8; W4A4 to T 4, 0.99 at 3 and 0.94 at 4, measured no further).
  if (H > 3072) auto_tokens = std::min(auto_tokens, w4a4 ? 4 : 6);
  // The wide kernels (past the 8 tokens kernel 1 stages; decode_layer.hpp) where the narrow bound is 8 at H <= 3072
  // (measured on an H200, on pieces, wide / general path at the default bound of 8; docs/PERF.md's worklog):
  // - W4A16 MXFP4: Qwen3-30B-A3B's 2.4 MB experts ahead at every T to 64 -- 0.62 at T 9, 0.74 at 32, 0.81 at 64;
  //   gpt-oss-120b's 12.4 MB ones 0.80 at 9, 0.89 at 24, 0.89 at 33, 0.88 at 40, 0.91 at 64 (past 33 tokens
  //   once the staging took what shared memory leaves).
  // - W4A4 (the wide kernels after the layer's quantisers): NVFP4 Qwen3 0.66 at T 9, 0.82 at 32, 0.89 at 64; gpt-oss
  //   0.93 at 16, 0.97 at 24, 0.99 at 28, 1.04 at 32, 1.07 at 64 -- since the codes' evict_first policy
  //   0.91 at 24, 0.98 at 32, 1.02 at 48, 1.03 at 64; MXFP4 Qwen3 0.63 at 9, 0.76 at 32;
  //   gpt-oss 0.80 at 9, 0.90 at 32, 0.92 at 48, 0.93 at 64: up to 64 tokens, but 32 for NVFP4 with experts over
  //   4 MiB.
  // - Linear (row-major) weight scales (W4A16): Qwen3 still ahead (rows 0.68 at 16, 0.76 at 64; pieces 0.70 /
  //   0.80), gpt-oss behind from 16 to 64 (rows 0.99 / 1.06 / 1.12 / 1.13 at 16 / 32 / 48 / 64, pieces 1.03 / 1.12 /
  //   1.17 / 1.20) -- not profiled; likely the codes, which travel through L1, and the staging, which shrinks L1.
  //   So no wide path there.
  // - Past 64 tokens (up to the kernels' 512 pairs), measured at gpt-oss-120b's shape (E 128, top-4: up to 128 tokens,
  //   4 pairs per expert; wide / general path): W4A16 pieces 0.84 at T 72, 0.84 at 96, 0.85
  //   at 112, 0.83 at 128; rows 0.89-0.91; W4A4 MXFP4 pieces 0.85-0.88; W4A4 NVFP4 pieces 1.06-1.07 (behind, as from
  //   48). With more pairs per expert the wide path, which streams an expert's weights once per 8 of its pairs, falls
  //   behind for gpt-oss-sized experts (E 64 / E 32 at T 128, 8 / 16 pairs per expert: 1.05 / 1.26) but not for
  //   Qwen3-30B-A3B's (E 32 / E 16 at T 64, 16 / 32 pairs per expert: 0.81 / 0.96). So: up to 4 pairs per
  //   expert on average (T <= 4 E / top-k), never below 64 tokens where the bound was 64.
  static_assert(kDecodeTokensMax == detail::kDecodeWideMaxPairs, "the option's largest value: the wide kernels' pairs");
  static_assert(detail::kDecodeWideMaxExperts >= detail::kMaxMoeExperts, "the wide pre-pass holds every expert a layer may have");
  const std::int64_t expert_bytes = std::int64_t{3} * H * I / 2;
  const bool small_experts = expert_bytes <= (std::int64_t{4} << 20);
  const int wide_by_pairs = std::min(kDecodeTokensMax / o.topk, std::max(64, 4 * E / o.topk));
  int auto_wide = 0;
  if ((w4a4 || o.format == Format::mxfp4) && auto_tokens == detail::kDecodeMaxTokens && H <= 3072) {
    if (small_experts) auto_wide = wide_by_pairs;
    else if (o.scale_layout != ScaleLayout::linear) auto_wide = w4a4 && o.format == Format::nvfp4 ? 32 : wide_by_pairs;
  }
  const int requested = o.decode_tokens == kDecodeTokensAuto ? std::max(auto_tokens, auto_wide) : o.decode_tokens;
  int decode_tokens = std::min({requested, detail::kDecodeMaxTokens, o.max_tokens});
  while (decode_tokens > 0 && detail::decode_staged_bytes(decode_tokens, H) > detail::kDecodeMaxStagedBytes) --decode_tokens;
  const std::int64_t decode_pairs = std::int64_t{decode_tokens} * o.topk;
  // The kernels' 128-wide chunk counts are 32-bit, and so are W4A4's quantisers' element indices.
  auto indices_fit = [&](std::int64_t pairs) {
    return pairs * (I / 8) * ((H + 127) / 128) < (std::int64_t{1} << 31) &&
           pairs * (H / 16) * ((I + 127) / 128) < (std::int64_t{1} << 31) &&
           pairs * std::max(H, I) < (std::int64_t{1} << 31);
  };
  // (a lane's 32 k elements are live or not)
  const bool decode_fits = indices_fit(decode_pairs) && H % 32 == 0 && I % 32 == 0;
  if ((w4a4 || o.format == Format::mxfp4) && !o.batch_invariant && o.combine && decode_tokens > 0 &&
      o.topk <= detail::kDecodeMaxTokens && decode_fits) {
    p.decode_tokens = decode_tokens;
    detail::DecodeLayerArgs& d = p.decode;
    const bool pieces = o.weight_layout == WeightLayout::pieces;
    d.shape = detail::decode_shape(o.format, o.scale_layout == ScaleLayout::blocked, pieces, p.device.multiprocessors,
                                   p.decode_tokens, H);
    d.weight_pieces = pieces;
    d.format = o.format, d.fp4_activations = w4a4, d.a1_scale = o.a1_scale, d.a2_scale = o.a2_scale;
    d.w13 = static_cast<const std::uint8_t*>(w.w13), d.s13 = static_cast<const std::uint8_t*>(w.w13_scales);
    d.w2 = static_cast<const std::uint8_t*>(w.w2), d.s2 = static_cast<const std::uint8_t*>(w.w2_scales);
    d.s13_stride = static_cast<long long>(formats::scale_bytes(o.scale_layout, 2 * std::int64_t{I}, H / vec));
    d.s2_stride = static_cast<long long>(formats::scale_bytes(o.scale_layout, H, I / vec));
    d.experts = E, d.hidden = H, d.inter = I;
    d.blocked_scales = o.scale_layout == ScaleLayout::blocked;
    d.interleaved = o.gate_up == GateUpLayout::interleaved;
    d.glu_kind = o.activation == MoeEpilogue::swigluoai ? detail::kGluSwigluOai : detail::kGluSilu;
    d.glu_alpha = o.swiglu_alpha, d.glu_limit = o.swiglu_limit;
    d.alpha13 = w1.alpha_device, d.alpha13_up = w1.alpha_up_device, d.alpha2 = w2.alpha_device;
    d.alpha13_s = w1.alpha, d.alpha13_up_s = w1.alpha, d.alpha2_s = w2.alpha;
    d.bias13 = w.w13_bias, d.bias2 = w.w2_bias, d.bias_f32 = w.bias_f32;
    d.inter_rows = p.inter, d.y_rows = p.y, d.inter_ld = I;
    // The wide kernels (W4A16 MXFP4, W4A4): runs of decode_tokens < T <= the requested bound, up to kDecodeWideMaxPairs
    // pairs.
    d.wide_tokens = 0, d.wide = false;
    if (requested > decode_tokens && detail::decode_wide_supported(o.format, w4a4))
      d.wide_shape = detail::decode_wide_shape(o.format, o.scale_layout == ScaleLayout::blocked, pieces, p.device.multiprocessors);
    if (d.wide_shape.ctas1 > 0 && d.wide_shape.ctas2 > 0) {
      // Kernel 1 stages the token rows of its CTA's slots, 8 per slot: a CTA's balanced share of the units (slots x
      // I / 8) spans at most ceil(share / (I / 8)) + 1 slots, and a run at most min(P, P / 8 + min(E, P)) slots of
      // its P pairs; fewer wide tokens where the rows do not fit the kernel's staging (wide_shape.staged1 / 2: what the
      // device's shared memory leaves, rounded to whole KB as the ring offsets are).
      // Kernel 2 likewise the intermediate rows of its slots (units slot-major: a slot is H / 16 units). (It has no
      // unstaged variant: past I ~ 4400 even 2 slots' 16 rows exceed the staging and the wide path is off.)
      const std::int64_t groups = I / 8, row_bytes = detail::decode_wide_staged_row_bytes(H);
      const std::int64_t blocks = H / 16, row_bytes2 = detail::decode_wide_staged_row_bytes(I);
      auto staged_rows = [&](int tokens, std::int64_t per_slot, int ctas) {
        const std::int64_t pairs = std::int64_t{tokens} * o.topk;
        const std::int64_t slots = std::min(pairs, pairs / 8 + std::min<std::int64_t>(E, pairs));
        const std::int64_t share = (slots * per_slot + ctas - 1) / ctas;
        return 8 * std::min(slots, (share + per_slot - 1) / per_slot + 1);
      };
      auto rows1 = [&](int t) { return staged_rows(t, groups, d.wide_shape.ctas1); };
      auto rows2 = [&](int t) { return staged_rows(t, blocks, d.wide_shape.ctas2); };
      int wt = std::min({requested, o.max_tokens, detail::kDecodeWideMaxPairs / o.topk});
      auto kb = [](std::int64_t bytes) { return (bytes + 1023) / 1024 * 1024; };
      while (wt > decode_tokens && (kb(rows1(wt) * row_bytes) > d.wide_shape.staged1 ||
                                    kb(rows2(wt) * row_bytes2) > d.wide_shape.staged2))
        --wt;
      if (wt > decode_tokens && indices_fit(std::int64_t{wt} * o.topk)) {
        d.wide_tokens = wt;
        d.wide_ring_offset = static_cast<int>(kb(rows1(wt) * row_bytes));
        d.wide_shape.smem1 = d.wide_ring_offset + detail::decode_wide_ring_bytes();
        d.wide_ring_offset2 = static_cast<int>(kb(rows2(wt) * row_bytes2));
        d.wide_shape.smem2 = d.wide_ring_offset2 + detail::decode_wide_ring_bytes();
        d.route = p.allocate<int>(detail::decode_wide_route_bytes(), "plan workspace");
      }
    }
    const std::int64_t rows_pairs = std::max<std::int64_t>(decode_pairs, std::int64_t{d.wide_tokens} * o.topk);
    if (pieces) {  // the intermediate in the pieces' k order, rows padded to 128 with zeros (never written past I)
      const std::int64_t ipad = (I + 127) / 128 * 128;
      const std::size_t bytes = sizeof(__nv_bfloat16) * static_cast<std::size_t>(rows_pairs * ipad);
      auto* rows = p.allocate<__nv_bfloat16>(bytes, "plan workspace");
      FP4GEMM_CUDA_CHECK(cudaMemsetAsync(rows, 0, bytes, s), "plan");
      d.inter_rows = rows, d.inter_ld = ipad;
    }
    if (w4a4)
      d.x_deq = p.allocate<__nv_bfloat16>(std::size_t{2} * std::max(p.decode_tokens, d.wide_tokens) * H, "plan workspace");
    const std::size_t zeros = std::size_t{2} * (std::max(H, I) + 128);
    auto* zero = p.allocate<__nv_bfloat16>(zeros, "plan workspace");
    FP4GEMM_CUDA_CHECK(cudaMemsetAsync(zero, 0, zeros, s), "plan");
    d.zero_row = zero;
    const std::size_t blocks = H / 16;
    d.count_rows = p.allocate<unsigned>(sizeof(unsigned) * blocks, "plan workspace");
    FP4GEMM_CUDA_CHECK(cudaMemsetAsync(d.count_rows, 0, sizeof(unsigned) * blocks, s), "plan");
    // W4A16: one fused kernel where it launches (FP4GEMM_DECODE_FUSED=0: the two kernels)
    const char* fused_env = std::getenv("FP4GEMM_DECODE_FUSED");
    d.grid_bar = p.allocate<unsigned long long>(sizeof(unsigned long long), "plan workspace");
    FP4GEMM_CUDA_CHECK(cudaMemsetAsync(d.grid_bar, 0, sizeof(unsigned long long), s), "plan");
    d.fused = !(fused_env != nullptr && std::string(fused_env) == "0") &&
              detail::decode_fused_runs(d, s);  // (after the workspace it touches is set)
  }
  FP4GEMM_CUDA_CHECK(cudaStreamSynchronize(s), "plan");
  try {
    p.gemm1 = std::make_unique<MoeGemm>(w1, o1, stream);
    p.gemm2 = std::make_unique<MoeGemm>(w2, o2, stream);
  } catch (const Error& e) {  // name the layer's fields, not the GEMMs'
    std::string arg = e.argument();
    const bool first = !p.gemm1;
    if (arg == "weights.w") arg = first ? "weights.w13" : "weights.w2";
    else if (arg == "weights.scales") arg = first ? "weights.w13_scales" : "weights.w2_scales";
    throw Error(arg, e.group(), std::string(first ? "GEMM1 (w13): " : "GEMM2 (w2): ") + e.what());
  }
  if (!w4a4) {  // (same bytes; measured on an H200: 1-5 us faster at T <= 8, within +-1 % at T >= 64)
    const detail::MoePreparedInput in = detail::MoeGemmOwner::prepared_input(*p.gemm2);
    if (in.rows != nullptr && in.ld == I && detail::MoeGemmOwner::write_k_order_output(*p.gemm1)) p.handover = in.rows;
  }
  // W4A16: each GEMM lets the layer's next launch (GEMM2 or its pre-pass; the combine) start at once. Its CTAs take the
  // SMs the GEMM's CTAs leave and run their prologue -- GEMM2's device schedule and the first fill of its ring -- beside
  // the GEMM's tail; each is a programmatic dependent that waits before it reads. (Measured on an H100: Qwen3 T 128-512
  // -4 %, gpt-oss T 256 / 512 -1.5..-1.8 %. W4A4 with both GEMMs triggering measured +0.6..+1.4 % on four cells --
  // W4A4's intermediate quantiser, launched early, takes slots GEMM1's tail and its own start need -- so W4A4 keeps
  // the launch at each GEMM's end.)
  if (!w4a4) {
    detail::MoeGemmOwner::let_dependents_start(*p.gemm1);
    if (o.combine) detail::MoeGemmOwner::let_dependents_start(*p.gemm2);
  }
  p.runs.create();
}

MoeLayer::~MoeLayer() = default;
MoeLayer::MoeLayer(MoeLayer&&) noexcept = default;
MoeLayer& MoeLayer::operator=(MoeLayer&&) noexcept = default;

namespace {

const MoeLayer::Impl& checked(const std::unique_ptr<MoeLayer::Impl>& impl) { return detail::checked_impl(impl, "MoeLayer"); }

}  // namespace

// The run's launches on `s`: align_routing, (W4A4) quantize, GEMM1, (W4A4) quantize, GEMM2, combine.
void MoeLayer::Impl::enqueue(const MoeLayerArgs& args, cudaStream_t s) const {
  const Impl& p = *this;
  const MoeLayerWeights& w = p.weights;
  const MoeLayerOptions& o = p.options;
  const int E = w.experts, H = w.hidden, I = w.inter, T = args.tokens, k = o.topk;
  const std::int64_t ldh = args.ld_hidden == 0 ? H : args.ld_hidden, ldo = args.ld_out == 0 ? H : args.ld_out;
  const std::int64_t rows = std::int64_t{T} * k;
  const bool w4a4 = o.activations == MoeActivation::fp4;
  const bool uncombined = args.expert_rows != nullptr;  // (the caller combines: no decode path)
  int* const row_of = uncombined ? args.row_of : p.row_of;
  __nv_bfloat16* const y = uncombined ? static_cast<__nv_bfloat16*>(args.expert_rows) : p.y;
  if ((T <= p.decode_tokens || T <= p.decode.wide_tokens) && args.hidden_packed == nullptr && !uncombined) {
    detail::DecodeLayerArgs d = p.decode;
    d.wide = T > p.decode_tokens;
    d.x = static_cast<const __nv_bfloat16*>(args.hidden), d.ldx = ldh;
    d.ids = args.topk_ids, d.ids_int64 = args.ids_int64;
    d.weights = args.topk_weights, d.weights_bf16 = args.weights_bf16;
    d.tokens = T, d.topk = k, d.token_count = args.token_count;
    d.out = static_cast<__nv_bfloat16*>(args.out), d.ldo = ldo;
    detail::launch_decode_layer(d, s);
    FP4GEMM_CUDA_CHECK(cudaGetLastError(), "run");
    return;
  }
  detail::launch_align_routing_rows(args.topk_ids, args.ids_int64, rows, k, E, p.offsets, p.gather, row_of, s,
                                    args.token_count, p.routing_scratch);
  // A GEMM's activations: bf16 rows as given (W4A16), or those rows quantised into the plan's
  // buffers with global scale gs (W4A4).
  // (sorted: only the routed rows [offsets[0], offsets[E]) are quantised; null: all n_rows)
  auto activations = [&](MoeArgs& g, const void* x, std::int64_t ldx, std::int64_t n_rows, int cols,
                         std::uint8_t* packed, std::uint8_t* scales, float gs, bool sorted) {
    if (!w4a4) {
      g.a = x, g.lda = ldx * 2;
      return;
    }
    QuantizeArgs q;
    q.format = o.format, q.input = InputType::bf16;
    q.x = x, q.ldx = ldx, q.rows = n_rows, q.k = cols;
    q.packed = packed, q.scales = scales, q.scale_layout = ScaleLayout::linear;
    q.global_scale = o.format == Format::nvfp4 ? gs : 1.0f;
    // (programmatic dependents: the token quantiser of the routing -- it reads only the caller's tokens, so it runs
    // beside the routing and waits at its end --, the intermediate's of GEMM1, waiting first)
    detail::launch_quantize(q, s, sorted ? p.offsets : nullptr, sorted ? p.offsets + E : nullptr,
                            sorted ? detail::QuantizeChain::wait_first : detail::QuantizeChain::wait_last);
    g.a = packed, g.lda = cols / 2, g.a_scales = scales;
  };
  MoeArgs g1;
  if (args.hidden_packed != nullptr) {  // quantised by the caller (the same rule, a1_scale)
    g1.a = args.hidden_packed, g1.lda = H / 2, g1.a_scales = args.hidden_scales;
  } else {
    activations(g1, args.hidden, ldh, T, H, p.x_packed, p.x_scales, o.a1_scale, false);
  }
  g1.expert_offsets = p.offsets, g1.gather_index = p.gather, g1.num_tokens = T;
  const bool fused = p.gemm1->options().quantize_output;
  if (fused) g1.c = p.i_packed, g1.ldc = I / 2, g1.c_scales = p.i_scales;
  else g1.c = p.handover != nullptr ? p.handover : p.inter, g1.ldc = I;
  detail::MoeGemmOwner::enqueue(*p.gemm1, g1, s);  // (serialised by the layer)

  MoeArgs g2;
  if (fused) g2.a = p.i_packed, g2.lda = I / 2, g2.a_scales = p.i_scales;
  else if (p.handover != nullptr) g2.a = p.handover, g2.lda = std::int64_t{2} * I;  // (not read: prepared)
  else activations(g2, p.inter, I, rows, I, p.i_packed, p.i_scales, o.a2_scale, true);
  g2.expert_offsets = p.offsets;
  g2.c = y, g2.ldc = H;
  if (p.handover != nullptr) detail::MoeGemmOwner::enqueue_prepared(*p.gemm2, g2, s);
  else detail::MoeGemmOwner::enqueue(*p.gemm2, g2, s);
  if (uncombined) {
    FP4GEMM_CUDA_CHECK(cudaGetLastError(), "run");
    return;
  }

  FP4GEMM_CUDA_CHECK(detail::launch_combine(y, H, H, row_of, args.topk_ids, args.ids_int64, args.topk_weights,
                                            args.weights_bf16, k, E, T, static_cast<__nv_bfloat16*>(args.out), ldo,
                                            p.device.multiprocessors, s, args.token_count, w.w2_bias, w.bias_f32),
                     "run");
  FP4GEMM_CUDA_CHECK(cudaGetLastError(), "run");
}

void MoeLayer::run(const MoeLayerArgs& args, cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  detail::check_moe_layer_args(p.weights, p.options, args);
  if (args.tokens == 0) return;
  detail::DeviceGuard guard(p.device.index);
  if (args.expert_rows != nullptr) {  // (the caller's arrays: their extents, once per run)
    const std::int64_t pairs = std::int64_t{args.tokens} * p.options.topk;
    detail::check_device_buffer("expert_rows", -1, args.expert_rows, pairs * p.weights.hidden * 2, p.device.index);
    detail::check_device_buffer("row_of", -1, args.row_of, pairs * 4, p.device.index);
  }
  p.runs.run(p.device.index, stream, [&](cudaStream_t s) {
    const Impl::GraphKey key{args.hidden, args.hidden_packed, args.hidden_scales, args.topk_ids, args.topk_weights,
                             args.out, args.token_count, args.expert_rows, args.row_of, args.ld_hidden, args.ld_out, args.tokens, args.ids_int64, args.weights_bf16};
    p.graphs.run(key, p.options.graph_cache, s, [&](cudaStream_t q) { p.enqueue(args, q); });
  });
}

void MoeLayer::reload_weights(cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  detail::DeviceGuard guard(p.device.index);
  p.runs.reload(p.device.index, stream, [&](cudaStream_t s) {
    for (const Impl::Fold& f : p.folds) p.fold(f, s);
    for (const auto& [gemm, name] : {std::pair{p.gemm1.get(), "weights.w13_scales"}, std::pair{p.gemm2.get(), "weights.w2_scales"}}) {
      try {
        detail::MoeGemmOwner::reload(*gemm, s);
      } catch (const Error& e) {
        std::string message = e.what();
        if (const std::string prefix = "fp4gemm: " + e.argument() + ": "; message.rfind(prefix, 0) == 0)
          message.erase(0, prefix.size());
        throw Error(e.argument() == "weights.scales" ? name : e.argument(), e.group(), message);
      }
    }
  });
}

void MoeLayer::check(cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  p.runs.after_runs(stream, [](cudaStream_t) {});
  p.gemm1->check(stream);
  p.gemm2->check(stream);
}

std::string MoeLayer::describe() const {
  const Impl& p = checked(impl_);
  const MoeLayerOptions& o = p.options;
  std::ostringstream os;
  os << "MoE layer on " << p.device.name << ": " << p.weights.experts << " experts, top-" << o.topk << ", H "
     << p.weights.hidden << ", I " << p.weights.inter << ", " << to_string(o.format) << " weights x "
     << (o.activations == MoeActivation::fp4 ? to_string(o.format) : "bf16") << " activations, "
     << to_string(o.activation) << " (" << to_string(o.gate_up) << " w13"
     << (o.weight_layout == WeightLayout::pieces ? ", weights in pieces" : "") << "), up to " << o.max_tokens
     << " tokens; eager runs as cached graphs: " << (o.graph_cache > 0 ? std::to_string(o.graph_cache) + " keys" : "off")
     << (o.activations == MoeActivation::fp4
             ? (p.gemm1->options().quantize_output ? "; intermediate quantised in GEMM1's epilogue"
                                                   : "; intermediate quantised separately")
         : p.handover != nullptr ? "; GEMM1 writes the intermediate in GEMM2's k order (no pre-pass)"
                                 : "")
     << (o.combine ? "" : "; stops before its combine (expert rows; no output workspace)")
     << (p.decode_tokens == 0 ? "; no decode path"
         : p.decode.fused     ? "; decode path for T <= " + std::to_string(p.decode_tokens) + " (1 fused kernel of " +
                                    std::to_string(p.decode.shape.ctas_fused) + " CTAs)"
                              : "; decode path for T <= " + std::to_string(p.decode_tokens) + " (2 kernels of " +
                                    std::to_string(p.decode.shape.ctas1) + " / " + std::to_string(p.decode.shape.ctas2) +
                                    " CTAs)")
     << (p.decode.wide_tokens > p.decode_tokens && p.decode_tokens > 0
             ? "; wide decode path for T <= " + std::to_string(p.decode.wide_tokens) + " (pre-pass, 2 kernels, combine)"
             : "")
     << "; workspace " << (p.memory.bytes() + p.gemm1->device_bytes() + p.gemm2->device_bytes()) / 1024
     << " KiB\n  GEMM1: " << p.gemm1->describe() << "\n  GEMM2: " << p.gemm2->describe();
  return os.str();
}

std::size_t MoeLayer::device_bytes() const {
  const Impl& p = checked(impl_);
  return p.memory.bytes() + p.gemm1->device_bytes() + p.gemm2->device_bytes();
}

const MoeLayerOptions& MoeLayer::options() const { return checked(impl_).options; }

void moe_combine(const MoeCombineArgs& a, cudaStream_t stream) {
  auto fail = [](const char* arg, const std::string& m) { throw Error(arg, -1, m); };
  if (a.tokens < 0) fail("tokens", "must be >= 0, got " + std::to_string(a.tokens));
  if (a.topk < 1) fail("topk", "must be >= 1, got " + std::to_string(a.topk));
  if (a.hidden < 8 || a.hidden % 8 != 0) fail("hidden", "must be a positive multiple of 8, got " + std::to_string(a.hidden));
  if (a.ld_y < a.hidden || a.ld_y % 8 != 0) fail("ld_y", "must be a multiple of 8 and >= hidden, got " + std::to_string(a.ld_y));
  if (a.ld_out < a.hidden || a.ld_out % 8 != 0)
    fail("ld_out", "must be a multiple of 8 and >= hidden, got " + std::to_string(a.ld_out));
  if (a.tokens == 0) return;
  const std::int64_t pairs = std::int64_t{a.tokens} * a.topk;
  const std::int64_t y_bytes = ((pairs - 1) * a.ld_y + a.hidden) * 2, out_bytes = ((std::int64_t{a.tokens} - 1) * a.ld_out + a.hidden) * 2;
  for (auto [name, p] : {std::pair<const char*, const void*>{"y", a.y}, {"out", a.out}})
    if (p == nullptr || reinterpret_cast<std::uintptr_t>(p) % 16 != 0) fail(name, "must be a 16-byte aligned device pointer");
  const DeviceInfo d = device_info(a.device);
  detail::DeviceGuard guard(d.index);
  detail::check_device_buffer("y", -1, a.y, y_bytes, d.index);
  detail::check_device_buffer("out", -1, a.out, out_bytes, d.index);
  detail::check_device_buffer("topk_ids", -1, a.topk_ids, pairs * (a.ids_int64 ? 8 : 4), d.index);
  detail::check_device_buffer("topk_weights", -1, a.topk_weights, pairs * (a.weights_bf16 ? 2 : 4), d.index);
  FP4GEMM_CUDA_CHECK(detail::launch_combine(static_cast<const __nv_bfloat16*>(a.y), a.ld_y, a.hidden, nullptr,
                                            a.topk_ids, a.ids_int64, a.topk_weights, a.weights_bf16, a.topk, a.experts,
                                            a.tokens, static_cast<__nv_bfloat16*>(a.out), a.ld_out, d.multiprocessors,
                                            stream),
                     "moe_combine");
}

std::size_t MoeLayer::graph_replays() const {
  return checked(impl_).graphs.replays();
}

}  // namespace fp4gemm
