// The device-driven MoE grouped GEMM: plan (weights bound once) and the launch.
//
// The fused kernel (fused_kernel.cuh) reads its work as tiles, pieces and per-CTA ranges; the
// pointer-array plan builds them on the host (host/core/schedule.cpp), this plan's kernel builds
// them itself from the expert offsets of the run: every CTA computes its own range in its
// prologue (device/moe_schedule.cuh), while the activation pre-pass runs. Everything the
// routing does not change (weight maps, scales, activation workspace and its maps, grid, buffers
// sized for the largest routing) is set up once here.
#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/moe_validate.hpp"
#include "host/core/validate.hpp"
#include "host/device_guard.hpp"
#include "host/run_serializer.hpp"
#include "host/tensor_map.hpp"
#include "kernels/sm90/fused_kernel.cuh"

namespace fp4gemm {

const char* to_string(MoeActivation a) { return a == MoeActivation::fp4 ? "fp4" : "bf16"; }
const char* to_string(MoeLayout l) { return l == MoeLayout::contiguous ? "contiguous" : "masked"; }

namespace detail::sm90 {

static_assert(kMoeMaxExperts == detail::kMaxMoeExperts, "the device schedule's scratch holds every expert");

// Linear expert scales -> blocked, once at plan time (the pre-pass's conversion kernel, one job per
// expert).
template <Format F>
cudaError_t convert_expert_scales(const ScaleConversion* jobs, int experts, int rows, int cols, cudaStream_t stream) {
  const std::int64_t words = static_cast<std::int64_t>((rows + 127) / 128) * (((cols + 3) / 4 + 7) / 8) * 128;
  const dim3 grid(static_cast<unsigned>((words + 255) / 256), std::min(experts, PrepassArgs::kMaxGridY));
  scales_to_blocked<F><<<grid, 256, 0, stream>>>(jobs, experts);
  return cudaGetLastError();
}

}  // namespace detail::sm90

// ---------------------------------------------------------------------------------------------
// The plan
// ---------------------------------------------------------------------------------------------

using detail::GroupParams;
using detail::SchedulePolicy;
using detail::TileDesc;
using detail::WorkPiece;
using namespace detail::sm90;

struct MoeGemm::Impl {
  MoeWeights weights;
  MoeOptions options;
  DeviceInfo device;
  int rows = 0;  // of A and C
  int vec = 16;
  std::vector<void*> allocations;
  std::size_t device_bytes = 0;
  FusedParams params{};
  PrepassArgs prepass{};
  dim3 prepass_grid{1, 1, 1};
  std::size_t smem_bytes = 0;
  int* error = nullptr;  // MoeErrorWord
  detail::RunSerializer runs;  // runs share the workspace and the work list: never overlapping

  template <typename T>
  T* allocate(std::size_t bytes, const char* what) {
    void* p = nullptr;
    FP4GEMM_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 16)), what);
    allocations.push_back(p);
    device_bytes += bytes;
    return static_cast<T*>(p);
  }
  template <typename T>
  T* upload(const std::vector<T>& v, const char* what) {
    T* d = allocate<T>(v.size() * sizeof(T), what);
    if (!v.empty()) FP4GEMM_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), what);
    return d;
  }
  ~Impl() {
    for (void* p : allocations) cudaFree(p);
  }
};

namespace {

using KC = detail::sm90::KernelConfig;

using detail::DeviceGuard;

[[noreturn]] void fail(const std::string& argument, const std::string& message) { throw Error(argument, -1, message); }

}  // namespace

MoeGemm::MoeGemm(const MoeWeights& weights, const MoeOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& p = *impl_;
  const MoeWeights resolved = detail::validate_moe(weights, options);
  if (device_count() == 0) throw Error("device", -1, "no CUDA device is available (no GPU or no driver)");
  p.device = device_info(options.device);
  if (!p.device.has_fast_kernel)
    throw Error("options.device", -1, "no fast kernel for " + p.device.name + ": fp4gemm's MoE GEMM needs sm_90 (H100/H200)");
  DeviceGuard guard(p.device.index);
  p.weights = resolved;
  p.options = options;
  p.options.device = p.device.index;
  MoeWeights& w = p.weights;
  const MoeOptions& o = p.options;
  const int vec = p.vec = scale_block_size(o.format);
  const int cols = w.k / vec;
  const std::int64_t dense_scales = static_cast<std::int64_t>(formats::scale_bytes(o.scale_layout, w.n, cols));
  p.rows = static_cast<int>(detail::moe_rows(w.experts, o));

  // The weights and their scales must lie inside device allocations of this device.
  detail::check_device_buffer("weights.w", -1, w.w, (w.experts - 1) * w.expert_stride + (w.n - 1) * w.ldw + w.k / 2,
                              p.device.index);
  detail::check_device_buffer("weights.scales", -1, w.scales, (w.experts - 1) * w.scale_expert_stride + dense_scales,
                              p.device.index, std::string(to_string(o.scale_layout)) + " scales of every expert");
  if (w.alpha_device != nullptr)
    detail::check_device_buffer("weights.alpha_device", -1, w.alpha_device, 4 * std::int64_t{w.experts}, p.device.index);

  // Weight scales, blocked: the user's, or converted once from linear into the plan's buffer.
  const std::int64_t blocked_bytes = static_cast<std::int64_t>(formats::blocked_scale_bytes(w.n, cols));
  const std::uint8_t* sblk = static_cast<const std::uint8_t*>(w.scales);
  std::int64_t sblk_stride = w.scale_expert_stride;
  if (o.scale_layout == ScaleLayout::linear) {
    std::uint8_t* dst = p.allocate<std::uint8_t>(blocked_bytes * w.experts, "plan workspace");
    std::vector<ScaleConversion> jobs(w.experts);
    for (int e = 0; e < w.experts; ++e)
      jobs[e] = ScaleConversion{sblk + e * w.scale_expert_stride, dst + e * blocked_bytes, w.n, cols};
    const ScaleConversion* d_jobs = p.upload(jobs, "plan");
    // On a private stream: a plan may be built while another stream is being captured.
    cudaStream_t s = nullptr;
    FP4GEMM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "plan");
    const cudaError_t e = o.format == Format::nvfp4 ? convert_expert_scales<Format::nvfp4>(d_jobs, w.experts, w.n, cols, s)
                                                    : convert_expert_scales<Format::mxfp4>(d_jobs, w.experts, w.n, cols, s);
    const cudaError_t sync = e == cudaSuccess ? cudaStreamSynchronize(s) : e;
    cudaStreamDestroy(s);
    FP4GEMM_CUDA_CHECK(sync, "plan");
    sblk = dst, sblk_stride = blocked_bytes;
  }

  // Weight maps (two per expert, boxes of 128 and 256 rows), the expert table, the activation
  // workspace and its maps (one per width class), as the pointer-array plan has them.
  std::vector<CUtensorMap> wmaps(2 * w.experts);
  std::vector<GroupParams> groups(w.experts);
  std::vector<const std::uint8_t*> scale_blocked(w.experts), scale_linear(w.experts, nullptr);
  for (int e = 0; e < w.experts; ++e) {
    const auto* we = static_cast<const std::uint8_t*>(w.w) + e * w.expert_stride;
    for (int h = 0; h < 2; ++h)
      wmaps[2 * e + h] = detail::make_map_2d(we, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<std::uint64_t>(w.k) / 2, w.n,
                                             w.ldw, KC::kBlockK / 2, KC::kWeightBoxRows * (h + 1),
                                             CU_TENSOR_MAP_SWIZZLE_NONE, "weights.w", e);
    scale_blocked[e] = sblk + e * sblk_stride;
    groups[e] = GroupParams{0, w.n, w.k, 0, nullptr, 0, we, w.ldw, nullptr, scale_blocked[e], nullptr, 0,
                            w.alpha_device != nullptr ? w.alpha_device + e : nullptr, w.alpha, 0};
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
  const std::int64_t max_tiles = token_tiles * ((w.n + 127) / 128);
  if (max_tiles > (std::int64_t{1} << 30)) fail("options.capacity", "too many tiles for one plan");
  auto* d_wmaps = p.upload(wmaps, "plan");
  auto* d_amaps = p.upload(amaps, "plan");
  auto* d_groups = p.upload(groups, "plan");
  FusedParams& pr = p.params;
  pr.groups = d_groups;
  pr.tiles = p.allocate<TileDesc>(max_tiles * sizeof(TileDesc), "plan workspace");
  pr.pieces = p.allocate<WorkPiece>(max_tiles * sizeof(WorkPiece), "plan workspace");
  pr.first_pieces = p.allocate<ProducerPiece>(num_ctas * sizeof(ProducerPiece), "plan workspace");
  pr.cta_begin = nullptr;  // the CTAs find their ranges themselves (device/moe_schedule.cuh)
  pr.cta_class = nullptr;
  pr.weight_maps = d_wmaps;
  pr.act_maps = d_amaps;
  pr.c_maps = nullptr;  // the warps' own stores: TMA boxes would reach into the next expert's rows
  pr.c_tma = nullptr;
  pr.scale_blocked = p.upload(scale_blocked, "plan");
  pr.scale_linear = p.upload(scale_linear, "plan");
  pr.partials = nullptr;  // whole tiles only
  pr.flags = p.allocate<int>(max_tiles * sizeof(int), "plan workspace");
  FP4GEMM_CUDA_CHECK(cudaMemset(pr.flags, 0, max_tiles * sizeof(int)), "plan");
  const SchedulePolicy policy;
  // Narrow (<= 128-token) tiles take 256 weight rows when the row blocks of the experts a run can
  // reach alone give every CTA a tile (the pointer-array plan's rule, with one token tile per
  // expert): at most `capacity` experts have rows in the contiguous layout, so decode plans
  // (capacity = tokens x top-k, a few experts) spread each expert's weights over twice the CTAs.
  // (Fixed per plan: the kernel's ring addresses derive from it as a constant, v16.)
  const std::int64_t reachable = o.layout == MoeLayout::contiguous ? std::min(w.experts, o.capacity) : w.experts;
  pr.narrow_rows = reachable * ((w.n + 255) / 256) >= num_ctas ? 256 : 128;
  pr.early_kblocks = KC::kMaxStages;
  pr.layout = ScaleLayout::blocked;
  const std::size_t fixed = 2 * KC::kMaxStages * sizeof(std::uint64_t) + KC::kEpiBytes + 2048;
  if (p.device.smem_per_block_optin < fixed + 2 * KC::kStageBytes)
    throw Error("device", -1, "not enough shared memory for the fused kernel");
  p.smem_bytes = p.device.smem_per_block_optin;
  pr.ring_bytes = static_cast<int>(p.smem_bytes - fixed);
  FP4GEMM_CUDA_CHECK(o.format == Format::nvfp4 ? set_fused_smem<Format::nvfp4>(p.smem_bytes)
                                              : set_fused_smem<Format::mxfp4>(p.smem_bytes),
                     "plan");

  p.error = p.allocate<int>(sizeof(MoeErrorWord), "plan workspace");
  FP4GEMM_CUDA_CHECK(cudaMemset(p.error, 0, sizeof(MoeErrorWord)), "plan");

  if (static_cast<std::size_t>(pr.ring_bytes) < sizeof(MoeScheduleScratch))
    throw Error("device", -1, "not enough shared memory for the MoE GEMM's device schedule");
  MoeScheduleParams& sa = pr.moe;
  sa.experts = w.experts;
  sa.capacity = o.capacity;
  sa.masked = o.layout == MoeLayout::masked;
  sa.n = w.n;
  sa.cols = cols;
  sa.kblocks = kblocks;
  sa.narrow_rows = pr.narrow_rows;
  sa.num_ctas = num_ctas;
  sa.max_tiles = static_cast<int>(max_tiles);
  sa.wide_fixed = static_cast<float>(policy.wide_fixed), sa.wide_per_token = static_cast<float>(policy.wide_per_token);
  sa.narrow_fixed = static_cast<float>(policy.narrow_fixed), sa.narrow_per_token = static_cast<float>(policy.narrow_per_token);
  sa.tiles = const_cast<TileDesc*>(pr.tiles);
  sa.pieces = const_cast<WorkPiece*>(pr.pieces);
  sa.first_pieces = const_cast<ProducerPiece*>(pr.first_pieces);
  sa.weight_maps = d_wmaps;
  sa.scales = sblk;
  sa.scale_stride = sblk_stride;
  sa.error = p.error;

  PrepassArgs& pa = p.prepass;
  pa.inline_count = 1;
  pa.num_groups = 1;
  pa.inline_groups[0] = PrepassGroup{nullptr, nullptr, 0, p.rows, w.k, 0, 0};
  pa.out = workspace;
  pa.out_cols = act_cols;
  pa.layout = ScaleLayout::linear;  // activation scales
  pa.error = p.error;
  p.prepass_grid = dim3(static_cast<unsigned>(4 * num_ctas), 1, 1);  // grid-stride over the rows in use
  p.runs.create();
}

MoeGemm::~MoeGemm() = default;
MoeGemm::MoeGemm(MoeGemm&&) noexcept = default;
MoeGemm& MoeGemm::operator=(MoeGemm&&) noexcept = default;

namespace {

const MoeGemm::Impl& checked(const std::unique_ptr<MoeGemm::Impl>& impl) {
  if (!impl) throw Error("plan", -1, "this MoeGemm was moved from and holds nothing");
  return *impl;
}

}  // namespace

void MoeGemm::run(const MoeArgs& args, cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  detail::check_moe_args(p.weights, p.options, args);
  DeviceGuard guard(p.device.index);
  FusedParams params = p.params;  // the run's routing and output
  params.moe.offsets = args.expert_offsets;
  params.moe.counts = args.expert_counts;
  params.moe.c = args.c;
  params.moe.ldc = args.ldc;
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

  p.runs.run(p.device.index, stream, [&](cudaStream_t s) {
    const Format f = p.options.format;
    const int ctas = p.params.moe.num_ctas;
    const cudaError_t err =
        p.options.activation == MoeActivation::bf16
            ? launch_routed<Format::mxfp4, PrepassSource::routed_bf16>(params, p.options.out_type, ctas, p.smem_bytes,
                                                                       pa, p.prepass_grid, true, s)
        : f == Format::nvfp4
            ? launch_routed<Format::nvfp4, PrepassSource::routed_fp4>(params, p.options.out_type, ctas, p.smem_bytes,
                                                                      pa, p.prepass_grid, true, s)
            : launch_routed<Format::mxfp4, PrepassSource::routed_fp4>(params, p.options.out_type, ctas, p.smem_bytes,
                                                                      pa, p.prepass_grid, true, s);
    FP4GEMM_CUDA_CHECK(err, "run");
  });
}

void MoeGemm::check(cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  DeviceGuard guard(p.device.index);
  MoeErrorWord word{};
  // Read and clear in stream order, after every run enqueued before (on any stream).
  p.runs.after_runs(stream, [&](cudaStream_t s) {
    FP4GEMM_CUDA_CHECK(cudaMemcpyAsync(&word, p.error, sizeof word, cudaMemcpyDeviceToHost, s), "check");
    FP4GEMM_CUDA_CHECK(cudaMemsetAsync(p.error, 0, sizeof word, s), "check");
  });
  FP4GEMM_CUDA_CHECK(cudaStreamSynchronize(stream), "check");
  if (word.bits == 0) return;
  const int E = p.weights.experts;
  std::string also;
  for (int bit : {kMoeBadOffsets, kMoeOverCapacity, kMoeBadCount, kMoeBadGather})
    if ((word.bits & bit) && bit != word.kind)
      also += bit == kMoeBadGather ? "; also a gather index out of range"
                                   : bit == kMoeBadCount ? "; also a count out of range" : "; also bad offsets";
  const std::string i = std::to_string(word.index), v = std::to_string(word.value);
  switch (word.kind) {
    case kMoeBadOffsets:
      throw Error("expert_offsets", word.index,
                  "a run saw expert_offsets[" + i + "] = " + v +
                      (word.index == 0 ? " < 0" : ", less than expert_offsets[" + std::to_string(word.index - 1) + "]") +
                      ": offsets must be non-decreasing from >= 0; that run computed nothing" + also);
    case kMoeOverCapacity:
      throw Error("expert_offsets", E,
                  "a run saw expert_offsets[" + std::to_string(E) + "] = " + v + ", more rows than the plan's capacity " +
                      std::to_string(p.options.capacity) + "; that run computed nothing" + also);
    case kMoeBadCount:
      throw Error("expert_counts", word.index,
                  "a run saw expert_counts[" + i + "] = " + v + ", outside [0, " + std::to_string(p.options.capacity) +
                      "]; that run computed nothing" + also);
    default:
      throw Error("gather_index", -1,
                  "a run saw gather_index[" + i + "] = " + v +
                      ", outside [0, num_tokens); that row's output is undefined (nothing was read out of bounds)" + also);
  }
}

std::string MoeGemm::describe() const {
  const Impl& p = checked(impl_);
  std::ostringstream os;
  os << "sm90_fused_swapab (device-scheduled MoE) on " << p.device.name << ": " << p.weights.experts << " experts, N "
     << p.weights.n << ", K " << p.weights.k << ", " << to_string(p.options.format) << " weights x "
     << (p.options.activation == MoeActivation::fp4 ? to_string(p.options.format) : "bf16") << " activations -> "
     << to_string(p.options.out_type) << ", " << to_string(p.options.layout) << " rows " << p.rows << ", "
     << p.params.moe.num_ctas << " CTAs, up to " << p.params.moe.max_tiles << " tiles, narrow tiles "
     << p.params.narrow_rows << " rows";
  return os.str();
}

const MoeOptions& MoeGemm::options() const { return checked(impl_).options; }
int MoeGemm::experts() const { return checked(impl_).weights.experts; }
int MoeGemm::n() const { return checked(impl_).weights.n; }
int MoeGemm::k() const { return checked(impl_).weights.k; }
int MoeGemm::rows() const { return checked(impl_).rows; }
std::size_t MoeGemm::device_bytes() const { return checked(impl_).device_bytes; }

}  // namespace fp4gemm
