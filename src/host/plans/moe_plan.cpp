// The sm_90a fused kernel as the MoE GEMM's kernel (registry entry sm90_fused_swapab_moe, behind
// fp4gemm::MoeGemm: host/moe_gemm.cpp): the per-weight-set set-up and the launch.
//
// The fused kernel (fused_kernel.cuh) reads its work as tiles, pieces and per-CTA ranges; the
// pointer-array plan builds them on the host (host/core/schedule.cpp), this plan's kernel builds
// them itself from the expert offsets of the run: every CTA computes its own range in its
// prologue (device/moe_schedule.cuh), while the activation pre-pass runs. Everything the
// routing does not change (weight maps, scales, activation workspace and its maps, grid, buffers
// sized for the largest routing) is set up once here.
#include <cuda.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "host/plans/moe_plan.hpp"  // (and through the registry, the kernels' entry points)

#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/device_memory.hpp"
#include "host/core/moe_validate.hpp"
#include "host/tensor_map.hpp"
#include "formats/scale_layout.hpp"
#include "device/kernel_config.cuh"
#include "device/moe_tiles.hpp"
#include "device/trace_counters.hpp"

namespace fp4gemm::detail::sm90 {

static_assert(kMoeMaxExperts == detail::kMaxMoeExperts, "the device schedule's scratch holds every expert");

// ---------------------------------------------------------------------------------------------
// The kernel's plan
// ---------------------------------------------------------------------------------------------

namespace {

using KC = KernelConfig;

[[noreturn]] void fail(const std::string& argument, const std::string& message) { throw Error(argument, -1, message); }

class FusedMoePlan final : public MoeKernelPlan {
 public:
  explicit FusedMoePlan(const MoeKernelContext& context);
  void enqueue(const MoeArgs& args, cudaStream_t stream) const override;
  void reload(cudaStream_t stream) const override;
  std::string describe() const override;
  std::size_t device_bytes() const override { return memory.bytes(); }
  bool write_k_order_output() override;
  MoePreparedInput prepared_input() const override;
  void let_dependents_start() override { params.trigger_dependents = 1; }
  void enqueue_prepared(const MoeArgs& args, cudaStream_t stream) const override;

 private:
  // The run's routing and output in the plan's parameters.
  FusedParams run_params(const MoeArgs& args) const;
  MoeWeights weights;  // validated (MoeGemm)
  MoeOptions options;
  DeviceInfo device;
  int rows = 0;  // of A and C
  DeviceAllocations memory;  // owned (and freed) by the plan
  FusedParams params{};
  PrepassArgs prepass{};
  dim3 prepass_grid{1, 1, 1};
  std::size_t smem_bytes = 0;
  // The weight-scale conversion into the plan's blocked copy (null when the user's blocked scales
  // are read directly): run at plan time, and at every run with MoeOptions::rescale_each_run.
  std::function<cudaError_t(cudaStream_t)> convert_scales;
  // What the plan's MXFP4 one-multiply decode of its own copy relies on (every code <= 128): the
  // caller's scale bytes that convert_scales reads, as (first byte, bytes per expert, expert
  // stride), scanned again by reload before the copy is remade. Empty when nothing relies on it.
  struct ScaleSource {
    const std::uint8_t* p;
    std::int64_t bytes, stride;
  };
  std::vector<ScaleSource> one_multiply_sources;
  unsigned* d_max = nullptr;  // the scans' result

  template <typename T>
  T* allocate(std::size_t n, const char* what) {
    return memory.allocate<T>(n, what);
  }
  template <typename T>
  T* upload(const std::vector<T>& v, const char* what) {
    return memory.upload(v, what);
  }
};

// (MoeGemm has validated the weights and options, checked the buffers and made the device current.)
FusedMoePlan::FusedMoePlan(const MoeKernelContext& context)
    : weights(context.weights), options(context.options), device(context.device), rows(context.rows) {
  FusedMoePlan& p = *this;
  const MoeWeights& w = p.weights;
  const MoeOptions& o = p.options;
  const int cols = w.k / scale_block_size(o.format);
  const bool glu = o.epilogue != MoeEpilogue::none;
  const bool separate = glu && o.gate_up == GateUpLayout::separate;
  const int wrows = detail::moe_weight_rows(w, o);          // rows of W per expert (and of w_up)
  const int krows = glu ? 2 * w.n : w.n;                     // the kernel's weight rows per expert

  // Separate gate and up weights are one 4-D map whose gate|up dimension strides from the lower
  // buffer to the higher one: `swap` when the up rows are the lower.
  const auto* w_gate = static_cast<const std::uint8_t*>(w.w);
  const auto* w_up = static_cast<const std::uint8_t*>(w.w_up);
  const bool swap = separate && w_up < w_gate;
  std::int64_t half_stride = 0;  // bytes from the map's first 8 rows to their partners
  if (glu) {
    half_stride = o.gate_up == GateUpLayout::stacked ? std::int64_t{w.n} * w.ldw
                  : o.gate_up == GateUpLayout::interleaved ? w.ldw
                                                            : (swap ? w_gate - w_up : w_up - w_gate);
    if (half_stride % 16 != 0 || half_stride >= (std::int64_t{1} << 40))
      fail("weights.w_up", "separate gate and up weights must lie a multiple of 16 bytes (< 2^40) apart (got " +
                               std::to_string(half_stride) + ")");
  }

  // Weight scales, blocked: the user's, or converted once into the plan's buffer (from linear; and
  // always for a GLU, whose kernel rows interleave gate and up in 8-row blocks).
  const std::int64_t blocked_bytes = static_cast<std::int64_t>(formats::blocked_scale_bytes(krows, cols));
  const std::uint8_t* sblk = static_cast<const std::uint8_t*>(w.scales);
  std::int64_t sblk_stride = w.scale_expert_stride;
  const bool own_copy = o.scale_layout == ScaleLayout::linear || glu;
  if (own_copy) {
    std::uint8_t* dst = p.allocate<std::uint8_t>(blocked_bytes * w.experts, "plan workspace");
    if (glu) {
      const auto* s_gate = static_cast<const std::uint8_t*>(w.scales);
      const auto* s_up = static_cast<const std::uint8_t*>(w.scales_up);
      const GluScaleJob job{swap ? s_up : s_gate, swap ? s_gate : s_up, w.scale_expert_stride, dst, blocked_bytes,
                            w.n, cols, wrows, static_cast<int>(o.gate_up), o.scale_layout};
      const int experts = w.experts;
      p.convert_scales = [job, experts](cudaStream_t st) { return launch_glu_scales(job, experts, st); };
    } else {
      std::vector<ScaleConversion> jobs(w.experts);
      for (int x = 0; x < w.experts; ++x)
        jobs[x] = ScaleConversion{sblk + x * w.scale_expert_stride, dst + x * blocked_bytes, w.n, cols};
      const ScaleConversion* d_jobs = p.upload(jobs, "plan");
      const int experts = w.experts, n = w.n;
      const Format f = o.format;
      p.convert_scales = [d_jobs, experts, n, cols, f](cudaStream_t st) {
        return f == Format::nvfp4 ? convert_expert_scales<Format::nvfp4>(d_jobs, experts, n, cols, st)
                                  : convert_expert_scales<Format::mxfp4>(d_jobs, experts, n, cols, st);
      };
    }
    detail::run_on_private_stream("plan", context.after, p.convert_scales);
    sblk = dst, sblk_stride = blocked_bytes;
  }
  // MXFP4: one multiply per weight register when every scale code the kernel can read is <= 128
  // (FusedParams::small_mx_scales), checked here once, over every byte of every expert's blocked
  // scales (padding included: the one-multiply decode has no past-K select). The plan's own copy
  // is fixed after planning (kMxOne); the user's blocked scales are read at every run, so that
  // kernel checks what it reads (kMxOneChecked) and a code > 128 written after planning is reported
  // by check() (the run's output is then undefined). Not with rescale_each_run (new codes each
  // run, any code).
  if (o.format == Format::mxfp4 && !o.rescale_each_run) {
    unsigned* d_max = p.d_max = p.allocate<unsigned>(sizeof(unsigned), "plan workspace");
    detail::run_on_private_stream("plan", context.after, [&](cudaStream_t st) {
      cudaError_t e = cudaMemsetAsync(d_max, 0, sizeof(unsigned), st);
      if (e != cudaSuccess) return e;
      return launch_max_byte(sblk, blocked_bytes, sblk_stride, w.experts, d_max, st);
    });
    unsigned largest = 0;
    FP4GEMM_CUDA_CHECK(cudaMemcpy(&largest, d_max, sizeof(unsigned), cudaMemcpyDeviceToHost), "plan");
    p.params.small_mx_scales = largest > 128 ? kMxTwo : own_copy ? kMxOne : kMxOneChecked;
    if (p.params.small_mx_scales == kMxOne) {
      // the caller's bytes the copy is made from (dense per expert; a blocked GLU source with its
      // padding, which a caller's blocked layout keeps zero)
      const std::int64_t src_bytes = static_cast<std::int64_t>(formats::scale_bytes(o.scale_layout, wrows, cols));
      p.one_multiply_sources.push_back({static_cast<const std::uint8_t*>(w.scales), src_bytes, w.scale_expert_stride});
      if (separate)
        p.one_multiply_sources.push_back({static_cast<const std::uint8_t*>(w.scales_up), src_bytes, w.scale_expert_stride});
    }
  }

  // Weight maps (four per expert: boxes of 128 and 256 rows of one k-block's 32 bytes, and of two
  // k-blocks' 64 bytes in TMA's 64-byte swizzle for the 16-token class's two-k-block stages,
  // kMoeWideStageMaps), the expert table, the activation workspace and its maps (one per width
  // class), as the pointer-array plan has them.
  std::vector<CUtensorMap> wmaps(kMoeMapsPerExpert * w.experts);
  std::vector<GroupParams> groups(w.experts);
  // Weights in pieces (WeightLayout::pieces, validated contiguous): per expert [krows / 16][k-blocks, padded to
  // even][512 B] as 32-bit elements, so a box of 16-row blocks and one or two k-blocks lands as [block][k-block][piece]
  // -- for a GLU each block already 8 gate rows and their 8 up rows (pack_pieces_gate_up).
  const bool pieces = o.weight_layout == WeightLayout::pieces;
  const std::uint64_t kb2 = 2 * ((static_cast<std::uint64_t>(w.k) + 127) / 128);
  std::vector<const std::uint8_t*> scale_blocked(w.experts), scale_linear(w.experts, nullptr);
  for (int e = 0; e < w.experts; ++e) {
    const auto* we = (swap ? w_up : w_gate) + e * w.expert_stride;
    for (int m = 0; m < kMoeMapsPerExpert; ++m) {
      const int h = m % 2;
      const bool wide = m >= 2;  // two k-blocks per box, 64-byte swizzle
      const std::uint32_t box_rows = KC::kWeightBoxRows * (h + 1);
      const std::uint32_t box_bytes = (wide ? 2 : 1) * KC::kBlockK / 2;
      const CUtensorMapSwizzle swizzle = wide ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_NONE;
      if (pieces) {
        const std::uint64_t dims[3] = {KC::kPieceBytes / 4, kb2, static_cast<std::uint64_t>(krows) / 16};
        const std::uint64_t strides[2] = {KC::kPieceBytes, kb2 * KC::kPieceBytes};
        const std::uint32_t box[3] = {KC::kPieceBytes / 4, wide ? 2u : 1u, box_rows / 16};
        wmaps[kMoeMapsPerExpert * e + m] = detail::make_map(we, CU_TENSOR_MAP_DATA_TYPE_UINT32, 3, dims, strides, box,
                                                            CU_TENSOR_MAP_SWIZZLE_NONE, "weights.w", e);
        continue;
      }
      if (!glu) {
        wmaps[kMoeMapsPerExpert * e + m] = detail::make_map_2d(we, CU_TENSOR_MAP_DATA_TYPE_UINT8,
                                                               static_cast<std::uint64_t>(w.k) / 2, w.n, w.ldw, box_bytes,
                                                               box_rows, swizzle, "weights.w", e);
        continue;
      }
      // (k bytes, 8 rows, first|second half, 8-row blocks): a box of 16-row blocks lands as
      // [block][half][row][k], i.e. 8 gate rows then their 8 up rows.
      const bool inter = o.gate_up == GateUpLayout::interleaved;
      const std::uint64_t dims[4] = {static_cast<std::uint64_t>(w.k) / 2, 8, 2, static_cast<std::uint64_t>(w.n) / 8};
      const std::uint64_t strides[3] = {static_cast<std::uint64_t>(inter ? 2 * w.ldw : w.ldw),
                                        static_cast<std::uint64_t>(half_stride),
                                        static_cast<std::uint64_t>((inter ? 16 : 8) * w.ldw)};
      const std::uint32_t box[4] = {box_bytes, 8, 2, box_rows / 16};
      wmaps[kMoeMapsPerExpert * e + m] = detail::make_map(we, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, dims, strides, box,
                                                          swizzle, "weights.w", e);
    }
    scale_blocked[e] = sblk + e * sblk_stride;
    groups[e] = GroupParams{0, krows, w.k, 0, nullptr, 0, we, w.ldw, nullptr, scale_blocked[e], nullptr, 0,
                            w.alpha_device != nullptr ? w.alpha_device + e : nullptr, w.alpha, 0.0f, nullptr};
  }
  const int kblocks = (w.k + KC::kBlockK - 1) / KC::kBlockK;
  const int act_cols = kblocks * KC::kBlockK;
  void* workspace = p.allocate<void>(static_cast<std::size_t>(p.rows) * act_cols * 2, "plan workspace");
  std::vector<CUtensorMap> amaps(SchedulePolicy::kWidthClasses);
  const bool f16 = o.format == Format::nvfp4;  // the kernel's 16-bit type: f16 for NVFP4, bf16 for MXFP4
  for (int c = 1; c <= SchedulePolicy::kWidthClasses; ++c)
    amaps[c - 1] = detail::make_map_2d(workspace, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                       act_cols, p.rows, static_cast<std::uint64_t>(act_cols) * 2, KC::kBlockK,
                                       KC::kActClassRows * c, CU_TENSOR_MAP_SWIZZLE_128B, "plan workspace", -1);

  // Work-list buffers for the largest routing: every expert's token tiles (ceil(rows_e / 256) of
  // them) times the row blocks of a 128-row tile.
  const int num_ctas = p.device.multiprocessors;
  if (num_ctas < SchedulePolicy::kWidthClasses)  // the device scheduler gives every width class a CTA
    throw Error("device", -1, "the MoE GEMM needs at least " + std::to_string(SchedulePolicy::kWidthClasses) + " SMs");
  const std::int64_t token_tiles = o.layout == MoeLayout::masked
                                       ? std::int64_t{w.experts} * ((o.capacity + 255) / 256)
                                       : w.experts + (std::int64_t{o.capacity} + 255) / 256;
  const std::int64_t max_tiles = token_tiles * ((krows + 127) / 128);
  if (max_tiles > (std::int64_t{1} << 30)) fail("options.capacity", "too many tiles for one plan");
  auto* d_wmaps = p.upload(wmaps, "plan");
  auto* d_amaps = p.upload(amaps, "plan");
  auto* d_groups = p.upload(groups, "plan");
  FusedParams& pr = p.params;
  pr.groups = d_groups;
  pr.tiles = p.allocate<TileDesc>(max_tiles * sizeof(TileDesc), "plan workspace");
  // (each CTA's pieces from its first whole tile's slot + kMoeStreamKMaxPieces x its index: its
  // whole tiles and up to kMoeStreamKMaxPieces stream-K pieces, device/moe_schedule.cuh)
  pr.pieces = p.allocate<WorkPiece>((max_tiles + std::int64_t{detail::kMoeStreamKMaxPieces} * num_ctas) * sizeof(WorkPiece),
                                    "plan workspace");
  pr.first_pieces = p.allocate<ProducerPiece>(num_ctas * sizeof(ProducerPiece), "plan workspace");
  pr.cta_begin = nullptr;  // the CTAs find their ranges themselves (device/moe_schedule.cuh)
  pr.cta_class = nullptr;
  pr.weight_maps = d_wmaps;
  pr.act_maps = d_amaps;
  pr.c_maps = nullptr;  // the warps' own stores: TMA boxes would reach into the next expert's rows
  pr.c_tma = nullptr;
  pr.scale_blocked = p.upload(scale_blocked, "plan");
  pr.scale_linear = p.upload(scale_linear, "plan");
  // Stream-K of the 16- and 32-token classes (moe_schedule.cuh): one FP32 partial slot per CTA
  // (132 x 32 KB on an H100).
  pr.partials = p.allocate<float>(static_cast<std::size_t>(num_ctas) * kMoeSlotFloats * sizeof(float), "plan workspace");
  pr.flags = p.allocate<int>(max_tiles * sizeof(int), "plan workspace");
  FP4GEMM_CUDA_CHECK(cudaMemset(pr.flags, 0, max_tiles * sizeof(int)), "plan");
  // The device schedule's cost model: the defaults, or options.tuning's (measurement knobs).
  SchedulePolicy policy;
  const Tuning& tuning = o.tuning;
  policy.wide_fixed = tuning.wide_fixed.value_or(policy.wide_fixed);
  policy.wide_per_token = tuning.wide_per_token.value_or(policy.wide_per_token);
  policy.narrow_fixed = tuning.narrow_fixed.value_or(policy.narrow_fixed);
  policy.narrow_per_token = tuning.narrow_per_token.value_or(policy.narrow_per_token);
  // Narrow (<= 128-token) tiles take 256 weight rows when the row blocks of the experts a run can
  // reach alone give more than half the CTAs a tile (one token tile per expert): at most
  // `capacity` experts have rows in the contiguous layout, so decode plans (capacity = tokens x
  // top-k, a few experts) spread each expert's weights over twice the CTAs. Between half and all
  // of the CTAs, 256-row tiles run in one round where 128-row tiles need two (the cost model: 501
  // against 2 x 267 per k-block at 80 tokens). The pointer-array plan's rule, 256 rows only when
  // they give every CTA a tile, would give Mixtral's down projection (8 experts x 16 row blocks on
  // 132 SMs) 128-row tiles in two rounds: measured on H200 this rule runs that GEMM at T 256 in
  // 152 instead of 173 us (-12 %), the Mixtral layer -4 % at T 256 and -8 % at T 128.
  // (Fixed per plan: the kernel's ring addresses derive from it as a constant; a choice made on
  // the device made ptxas spill 136-172 bytes in every mainloop.)
  const std::int64_t reachable = o.layout == MoeLayout::contiguous ? std::min(w.experts, o.capacity) : w.experts;
  pr.narrow_rows = tuning.narrow_rows.value_or(2 * reachable * ((krows + 255) / 256) > num_ctas ? 256 : 128);
  pr.early_kblocks = KC::kMaxStages;  // the whole ring's first fill issued before the CTA's barrier
  pr.layout = ScaleLayout::blocked;
  const std::size_t fixed = SmemLayout::kFixedBytes;  // (kernel_config.cuh)
  if (p.device.smem_per_block_optin < fixed + SmemLayout::kMinRingBytes)
    throw Error("device", -1, "not enough shared memory for the fused kernel");
  p.smem_bytes = p.device.smem_per_block_optin;
  p.smem_bytes -= kTraceSmemBytes;  // (a trace build's static counters)
  pr.ring_bytes = static_cast<int>(p.smem_bytes - fixed);
  // The classes that fill their rings two stages at a time (fused_kernel.cuh, kbps; their stage counts
  // even by SmemLayout::stages) hold one pair while the next fills: each needs >= 2 pairs (every
  // Hopper part: 4-16 stages).
  for (int n16 = 1; n16 <= SchedulePolicy::kWidthClasses; ++n16) {
    const int halves = halves_of_class(n16, pr.narrow_rows), kbps = moe_stage_kblocks(n16, halves);
    const int stages = SmemLayout::stages(pr.ring_bytes, n16 * KC::kActClassBytes, halves, kbps);
    if (kbps > 1 && stages < KC::kMinPairStages)
      throw Error("device", -1, "shared memory gives the MoE kernel's " + std::to_string(16 * n16) +
                                    "-token class a ring of " + std::to_string(stages) + " stages (needs " +
                                    std::to_string(KC::kMinPairStages) + ")");
  }
  FP4GEMM_CUDA_CHECK(o.format == Format::nvfp4 ? set_fused_smem<Format::nvfp4>(p.smem_bytes)
                                              : set_fused_smem<Format::mxfp4>(p.smem_bytes),
                     "plan");

  MoeScheduleParams& sa = pr.moe;
  sa.experts = w.experts;
  sa.capacity = o.capacity;
  sa.masked = o.layout == MoeLayout::masked;
  sa.n = krows;
  sa.glu = static_cast<int>(o.epilogue);  // = detail::GluKind
  sa.glu_swap = swap ? 1 : 0;
  sa.weight_pieces = pieces ? 1 : 0;
  sa.glu_width = w.n;
  sa.swiglu_alpha = o.swiglu_alpha;
  sa.swiglu_limit = o.swiglu_limit;
  // The up rows' alpha: their own, or (NaN, the default) the gate's.
  const bool own_up = w.alpha_up_device != nullptr || !std::isnan(w.alpha_up);
  sa.alpha_up_device = own_up ? w.alpha_up_device : w.alpha_device;
  sa.alpha_up = own_up ? w.alpha_up : w.alpha;
  sa.glu_bias = o.epilogue != MoeEpilogue::none ? w.bias : nullptr;
  sa.glu_bias_f32 = w.bias_f32 ? 1 : 0;
  sa.glu_bias_interleaved = o.gate_up == GateUpLayout::interleaved ? 1 : 0;
  sa.split_gain16 = static_cast<int>(tuning.moe_split_gain16.value_or(detail::moe_split_min_gain(0)));
  sa.split_gain32 = static_cast<int>(tuning.moe_split_gain32.value_or(detail::moe_split_min_gain(1)));
  sa.cols = cols;
  sa.kblocks = kblocks;
  sa.narrow_rows = pr.narrow_rows;
  sa.num_ctas = num_ctas;
  sa.max_tiles = static_cast<int>(max_tiles);
  sa.stream_k = tuning.split_k.value_or(true) ? 1 : 0;  // (1: where moe_sk_tiles finds it pays)
  sa.wide_fixed = static_cast<float>(policy.wide_fixed), sa.wide_per_token = static_cast<float>(policy.wide_per_token);
  sa.narrow_fixed = static_cast<float>(policy.narrow_fixed), sa.narrow_per_token = static_cast<float>(policy.narrow_per_token);
  sa.tiles = const_cast<TileDesc*>(pr.tiles);
  sa.pieces = const_cast<WorkPiece*>(pr.pieces);
  sa.first_pieces = const_cast<ProducerPiece*>(pr.first_pieces);
  sa.weight_maps = d_wmaps;
  sa.scales = sblk;
  sa.scale_stride = sblk_stride;
  sa.error = context.error;
  sa.q_format = o.quantize_output ? static_cast<int>(o.format) + 1 : 0;
  sa.q_gs = o.format == Format::nvfp4 ? o.output_global_scale : 1.0f;
  sa.q_scales = nullptr;  // per run

  PrepassArgs& pa = p.prepass;
  pa.inline_count = 1;
  pa.num_groups = 1;
  pa.inline_groups[0] = PrepassGroup{nullptr, nullptr, 0, p.rows, w.k, 0, 0};
  pa.out = workspace;
  pa.out_cols = act_cols;
  pa.layout = ScaleLayout::linear;  // activation scales
  pa.error = context.error;
  p.prepass_grid = dim3(static_cast<unsigned>(4 * num_ctas), 1, 1);  // grid-stride over the rows in use
}

// One run's launches on `s`: the pre-pass and the GEMM (its programmatic dependent), after the
// run's scale conversion if the plan converts every run. No serialisation: MoeGemm's.
FusedParams FusedMoePlan::run_params(const MoeArgs& args) const {
  FusedParams params = this->params;
  params.moe.offsets = args.expert_offsets;
  params.moe.counts = args.expert_counts;
  params.moe.c = args.c;
  params.moe.ldc = args.ldc;
  params.moe.q_scales = static_cast<std::uint8_t*>(args.c_scales);
  return params;
}

void FusedMoePlan::enqueue(const MoeArgs& args, cudaStream_t s) const {
  const FusedMoePlan& p = *this;
  const FusedParams params = run_params(args);  // the run's routing and output
  PrepassArgs pa = p.prepass;
  pa.inline_groups[0].a = static_cast<const std::uint8_t*>(args.a);
  pa.inline_groups[0].sfa = static_cast<const std::uint8_t*>(args.a_scales);
  pa.inline_groups[0].lda = args.lda;
  // Contiguous: only the routed rows [offsets[0], offsets[E]) are read (and their gather indices).
  pa.first_row = p.options.layout == MoeLayout::contiguous ? args.expert_offsets : nullptr;
  pa.end_row = p.options.layout == MoeLayout::contiguous ? args.expert_offsets + p.weights.experts : nullptr;
  pa.slot_counts = args.expert_counts;  // masked: only each expert's counted rows
  pa.slot_rows = p.options.capacity;
  pa.gather = args.gather_index;
  pa.gather_rows = args.num_tokens;

  if (p.options.rescale_each_run && p.convert_scales) FP4GEMM_CUDA_CHECK(p.convert_scales(s), "run");
  const Format f = p.options.format;
  const int ctas = p.params.moe.num_ctas;
  const cudaError_t err =
      p.options.activation == MoeActivation::bf16
          ? launch_routed<Format::mxfp4, PrepassSource::routed_bf16>(params, p.options.out_type, ctas, p.smem_bytes,
                                                                     pa, p.prepass_grid, s)
      : f == Format::nvfp4
          ? launch_routed<Format::nvfp4, PrepassSource::routed_fp4>(params, p.options.out_type, ctas, p.smem_bytes,
                                                                    pa, p.prepass_grid, s)
          : launch_routed<Format::mxfp4, PrepassSource::routed_fp4>(params, p.options.out_type, ctas, p.smem_bytes,
                                                                    pa, p.prepass_grid, s);
  FP4GEMM_CUDA_CHECK(err, "run");
}

// The layer's hand-over (kernel_registry.hpp): a GLU plan with bf16 output whose width is whole
// 64-column k-blocks writes them in the wgmma k order (kGluKOrder, device/epilogue.cuh).
bool FusedMoePlan::write_k_order_output() {
  const MoeOptions& o = options;
  if (o.epilogue == MoeEpilogue::none || o.out_type != OutType::bf16 || o.quantize_output || weights.n % KC::kBlockK != 0)
    return false;
  params.moe.q_format = kGluKOrder;
  return true;
}

// W4A16 plans without a gather read their activations through a bf16 pre-pass into the workspace
// (row m of the run = workspace row m): another kernel may write them there instead.
MoePreparedInput FusedMoePlan::prepared_input() const {
  if (options.activation != MoeActivation::bf16 || weights.k % KC::kBlockK != 0) return {};
  return {prepass.out, prepass.out_cols};
}

// enqueue() without the pre-pass (and the per-run scale conversion where the plan has one).
void FusedMoePlan::enqueue_prepared(const MoeArgs& args, cudaStream_t s) const {
  if (prepared_input().rows == nullptr) MoeKernelPlan::enqueue_prepared(args, s);  // (throws)
  if (args.gather_index != nullptr)
    fail("gather_index", "must be null for a run on prepared activations (workspace row m is the run's row m)");
  if (options.rescale_each_run && convert_scales) FP4GEMM_CUDA_CHECK(convert_scales(s), "run");
  FP4GEMM_CUDA_CHECK(launch_routed_prepared<Format::mxfp4>(run_params(args), options.out_type, params.moe.num_ctas,
                                                          smem_bytes, s),
                     "run");
}

// Reloads the plan's copy of the caller's scales (MoeGemm::reload_scales: serialised with runs,
// `s` not being captured). A one-multiply MXFP4 copy is remade only when every new code the copy
// would hold is <= 128; otherwise the plan is left as it was and the caller is told.
void FusedMoePlan::reload(cudaStream_t s) const {
  const FusedMoePlan& p = *this;
  if (!p.convert_scales) return;  // the caller's blocked scales are read at every run
  if (!p.one_multiply_sources.empty()) {
    FP4GEMM_CUDA_CHECK(cudaMemsetAsync(p.d_max, 0, sizeof(unsigned), s), "run");
    for (const ScaleSource& src : p.one_multiply_sources) {
      FP4GEMM_CUDA_CHECK(launch_max_byte(src.p, src.bytes, src.stride, p.weights.experts, p.d_max, s), "run");
    }
    unsigned largest = 0;
    FP4GEMM_CUDA_CHECK(cudaMemcpyAsync(&largest, p.d_max, sizeof(unsigned), cudaMemcpyDeviceToHost, s), "run");
    FP4GEMM_CUDA_CHECK(cudaStreamSynchronize(s), "run");
    if (largest > 128)
      throw Error("weights.scales", -1,
                  "now hold an MXFP4 scale code of " + std::to_string(largest) +
                      " (> 128), but every code was <= 128 when the plan was built and it decodes them with one "
                      "multiply that holds only codes <= 128: the reload was refused and the plan still holds the "
                      "old scales. Build a new plan for these scales, or set MoeOptions::rescale_each_run");
  }
  FP4GEMM_CUDA_CHECK(p.convert_scales(s), "run");
}

std::string FusedMoePlan::describe() const {
  std::ostringstream os;
  os << (params.moe.weight_pieces != 0 ? "weights in pieces, " : "") << params.moe.num_ctas << " CTAs, up to " << params.moe.max_tiles << " tiles, narrow tiles " << params.narrow_rows
     << " rows" << (params.moe.stream_k != 0 ? "" : ", no stream-K (options.tuning.split_k)")
     << (params.small_mx_scales == kMxOne          ? ", one multiply per weight pair (every scale code <= 128)"
         : params.small_mx_scales == kMxOneChecked ? ", one multiply per weight pair (every scale code <= 128, "
                                                     "checked at every run)"
                                                   : "");
  return os.str();
}

}  // namespace

std::unique_ptr<MoeKernelPlan> make_fused_moe_plan(const MoeKernelContext& context) {
  return std::make_unique<FusedMoePlan>(context);
}

}  // namespace fp4gemm::detail::sm90
