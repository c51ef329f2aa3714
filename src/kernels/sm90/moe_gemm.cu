// The device-driven MoE grouped GEMM: plan (weights bound once), the device scheduler that turns
// the routing into the fused kernel's work list at run time, and the launch.
//
// The fused kernel (fused_kernel.cuh) reads its work as tiles, pieces and per-CTA ranges from
// device memory; the pointer-array plan builds them on the host (host/core/schedule.cpp), this plan
// builds them on the device from the expert offsets of the run (moe_schedule below). Everything the
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

// ---------------------------------------------------------------------------------------------
// Device scheduler
// ---------------------------------------------------------------------------------------------

constexpr int kSchedulerThreads = 512;
using detail::kMaxMoeExperts;  // one scheduler thread per expert (and ~45 KB of shared memory for their prefixes)
static_assert(kMaxMoeExperts == kSchedulerThreads, "one scheduler thread per expert");
constexpr int kClasses = SchedulePolicy::kWidthClasses;

struct MoeScheduleArgs {
  const int* offsets;  // contiguous: [E + 1]
  const int* counts;   // masked: [E]
  int experts, capacity, masked;
  int n, cols, kblocks, narrow_rows, num_ctas, max_tiles;
  float wide_fixed, wide_per_token, narrow_fixed, narrow_per_token;
  TileDesc* tiles;
  WorkPiece* pieces;
  int* cta_begin;
  int* cta_class;
  ProducerPiece* first_pieces;
  GroupParams* groups;
  const CUtensorMap* weight_maps;  // two per expert
  const std::uint8_t* scales;      // blocked, expert e at scales + e * scale_stride
  std::int64_t scale_stride;
  void* c;
  std::int64_t ldc;
  int* error;  // MoeErrorWord
};

// An expert's token tiles (token_tiles in host/core/schedule.cpp, the same rule): `count` tiles of
// `size` tokens (a multiple of 8), the last one `last` tokens.
// With their width classes (0-based; -1: none) and tile counts (token tiles x row blocks): the
// count - 1 full token tiles, and the last one.
struct ExpertTiles {
  int base, rows, count, size, last;
  int class_full, class_last, tiles_full, tiles_last;
};

__device__ __forceinline__ int row_blocks(int ntok, int n, int narrow_rows) {
  const int rows = tile_rows(ntok, narrow_rows);
  return (n + rows - 1) / rows;
}

__device__ __forceinline__ ExpertTiles expert_tiles(int base, int rows, int n, int narrow_rows) {
  ExpertTiles t{base, rows, 0, 0, 0, -1, -1, 0, 0};
  if (rows <= 0) return t;
  constexpr int kMax = SchedulePolicy::kMaxTokens;
  t.count = (rows + kMax - 1) / kMax;
  t.size = ((rows + t.count - 1) / t.count + 7) / 8 * 8;
  t.last = rows - (t.count - 1) * t.size;
  if (t.count > 1) t.class_full = width_class(t.size) - 1, t.tiles_full = (t.count - 1) * row_blocks(t.size, n, narrow_rows);
  t.class_last = width_class(t.last) - 1, t.tiles_last = row_blocks(t.last, n, narrow_rows);
  return t;
}

__device__ __forceinline__ int tiles_of_class(const ExpertTiles& t, int c) {
  return (t.class_full == c ? t.tiles_full : 0) + (t.class_last == c ? t.tiles_last : 0);
}

// One block of kSchedulerThreads. Thread e reads expert e's rows and validates them; warp c scans
// class c's tile counts over the experts, giving each expert its place in every width-class bucket (tiles of one class run on CTAs of that
// class: device/schedule.hpp); thread 0 shares the CTAs among the classes by cost; all threads
// write the tiles (whole tiles, one piece each: no split-K, so no hand-offs) and each CTA's range
// and first-piece record. A bad routing leaves every CTA without work and sets the error word.
__global__ void __launch_bounds__(kSchedulerThreads) moe_schedule(const __grid_constant__ MoeScheduleArgs a) {
  static_assert(kSchedulerThreads == 32 * kClasses, "one warp per width class");
  __shared__ ExpertTiles experts[kMaxMoeExperts];
  // prefix[c][e]: tiles of class c before expert e's (class-major: the binary searches of a warp
  // read one class row, not 64-byte strided structs that share two banks).
  __shared__ int prefix[kClasses][kMaxMoeExperts + 1];
  __shared__ int bucket_base[kClasses + 1], cta_base[kClasses + 1], ctas_of[kClasses], class_tiles[kClasses],
      total_tiles;
  const int e = threadIdx.x;

  // 1. This expert's rows, validated.
  int base = 0, rows = 0;
  bool bad = false;
  if (e < a.experts) {
    if (a.masked) {
      rows = a.counts[e];
      base = e * a.capacity;
      if (rows < 0 || rows > a.capacity) {
        moe_report(a.error, kMoeBadCount, e, rows);
        bad = true;
      }
    } else {
      base = a.offsets[e];
      const int next = a.offsets[e + 1];
      rows = next - base;
      if ((e == 0 && base < 0) || next < base) {
        moe_report(a.error, kMoeBadOffsets, e == 0 && base < 0 ? 0 : e + 1, e == 0 && base < 0 ? base : next);
        bad = true;
      }
      if (e == a.experts - 1 && next > a.capacity) {
        moe_report(a.error, kMoeOverCapacity, a.experts, next);
        bad = true;
      }
    }
  }
  if (__syncthreads_or(bad)) {  // nothing runs; C stays untouched
    for (int i = threadIdx.x; i <= a.num_ctas; i += blockDim.x) a.cta_begin[i] = 0;
    return;
  }
  if (e < a.experts) experts[e] = expert_tiles(base, rows, a.n, a.narrow_rows);
  __syncthreads();

  // 2. Warp c: the exclusive prefix of class c's tile counts over the experts (lane l sums a run
  //    of ceil(E / 32) experts, one warp scan, then the run's prefixes). A short dependent chain:
  //    a block scan of 16-class vectors made this kernel ~1500 instructions per warp (20 us).
  {
    const int c = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int run = (a.experts + 31) / 32, first = lane * run, last = min(a.experts, first + run);
    int sum = 0;
    for (int x = first; x < last; ++x) sum += tiles_of_class(experts[x], c);
    int incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int v = __shfl_up_sync(0xFFFFFFFFu, incl, o);
      if (lane >= o) incl += v;
    }
    int at = incl - sum;
    for (int x = first; x < last; ++x) {
      prefix[c][x] = at;
      at += tiles_of_class(experts[x], c);
    }
    if (lane == 31) prefix[c][a.experts] = class_tiles[c] = incl;
  }
  __syncthreads();

  // 3. CTAs per class in proportion to the class's cost, at least one per class with tiles: warp 0,
  //    lane c for class c; the CTAs the floors leave over go to the largest remainders.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, c = lane < kClasses ? lane : 0;
    const int tiles = lane < kClasses ? class_tiles[c] : 0;
    const int tokens = 16 * (c + 1);
    const bool narrow_tile = tile_rows(tokens, a.narrow_rows) == 256;
    const float cost = static_cast<float>(tiles) *
                       (narrow_tile ? a.narrow_fixed + a.narrow_per_token * tokens : a.wide_fixed + a.wide_per_token * tokens);
    float total = cost;
    int present = tiles > 0;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      total += __shfl_xor_sync(0xFFFFFFFFu, total, o);
      present += __shfl_xor_sync(0xFFFFFFFFu, present, o);
    }
    const int spare = max(0, a.num_ctas - present);
    const float share = total > 0 ? spare * (cost / total) : 0.f;
    int mine = tiles > 0 ? min(tiles, 1 + static_cast<int>(share)) : 0;
    int sum = mine;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    // Largest remainder first (ties by class), among the classes that can take one more CTA.
    const float rem = mine < tiles ? share - floorf(share) : -1.f;
    int rank = 0;
    for (int other = 0; other < kClasses; ++other) {
      const float r = __shfl_sync(0xFFFFFFFFu, rem, other);
      rank += r > rem || (r == rem && other < lane);
    }
    if (rem >= 0.f && rank < a.num_ctas - sum) ++mine;
    // Exclusive prefix sums of tiles and CTAs over the classes.
    int tiles_before = tiles, ctas_before = mine;
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int t = __shfl_up_sync(0xFFFFFFFFu, tiles_before, o), k = __shfl_up_sync(0xFFFFFFFFu, ctas_before, o);
      if (lane >= o) tiles_before += t, ctas_before += k;
    }
    if (lane < kClasses) {
      bucket_base[c] = tiles_before - tiles, cta_base[c] = ctas_before - mine, ctas_of[c] = mine;
    }
    if (lane == kClasses - 1) bucket_base[kClasses] = total_tiles = tiles_before, cta_base[kClasses] = ctas_before;
  }
  __syncthreads();
  if (total_tiles > a.max_tiles) {  // cannot happen for a routing that passed step 1 (plan sizing)
    if (threadIdx.x == 0) moe_report(a.error, kMoeOverCapacity, a.experts, total_tiles);
    for (int i = threadIdx.x; i <= a.num_ctas; i += blockDim.x) a.cta_begin[i] = 0;
    return;
  }

  // 4. The tiles, bucket by bucket: expert-major, then row block, then token tile (the token tiles
  //    of one weight row block are adjacent, so their weight reads are close in time).
  for (int c = 0; c < kClasses; ++c) {
    const int count = class_tiles[c];
    for (int t = threadIdx.x; t < count; t += blockDim.x) {
      int lo = 0, hi = a.experts - 1;  // the last expert whose prefix in class c is <= t
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (prefix[c][mid] <= t) lo = mid;
        else hi = mid - 1;
      }
      const ExpertTiles x = experts[lo];
      const int local = t - prefix[c][lo];
      int rb, j;
      if (x.class_full == c && x.class_last == c) {
        rb = local / x.count, j = local % x.count;
      } else if (x.class_full == c) {
        rb = local / (x.count - 1), j = local % (x.count - 1);
      } else {
        rb = local, j = x.count - 1;
      }
      const int ntok = j == x.count - 1 ? x.last : x.size;
      const int tok0 = x.base + j * x.size;
      const int index = bucket_base[c] + t;
      a.tiles[index] = TileDesc{lo, rb * tile_rows(ntok, a.narrow_rows), tok0, ntok, tok0, a.kblocks, 0, -1};
      a.pieces[index] = WorkPiece{index, 0, a.kblocks, -1};
    }
  }
  for (int x = threadIdx.x; x < a.experts; x += blockDim.x) {
    a.groups[x].c = a.c;
    a.groups[x].ldc = a.ldc;
  }
  __syncthreads();  // the tiles above are read back below (global writes of this block: visible)

  // 5. Each CTA's range: the CTAs of class c split its bucket evenly (whole tiles of one class cost
  //    alike); CTAs past the last class get none.
  for (int cta = threadIdx.x; cta < a.num_ctas; cta += blockDim.x) {
    int c = 0;
    while (c < kClasses - 1 && cta >= cta_base[c + 1]) ++c;
    int begin = total_tiles, end = total_tiles, n16 = 1;
    if (cta < cta_base[kClasses]) {
      const std::int64_t k = cta - cta_base[c], n = ctas_of[c], count = class_tiles[c];
      begin = bucket_base[c] + static_cast<int>(count * k / n);
      end = bucket_base[c] + static_cast<int>(count * (k + 1) / n);
      n16 = c + 1;
    }
    a.cta_begin[cta] = begin;
    if (cta == a.num_ctas - 1) a.cta_begin[a.num_ctas] = end;
    a.cta_class[cta] = n16;
    if (begin < end) {
      const TileDesc tile = a.tiles[begin];
      a.first_pieces[cta] =
          make_producer_piece(a.pieces[begin], tile, a.n, a.cols, halves_of_class(n16, a.narrow_rows),
                              a.weight_maps + 2 * tile.group, a.scales + tile.group * a.scale_stride, nullptr);
    }
  }
}

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
  MoeScheduleArgs schedule{};
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
  int* cta_begin = p.allocate<int>((num_ctas + 1) * sizeof(int), "plan workspace");
  FP4GEMM_CUDA_CHECK(cudaMemset(cta_begin, 0, (num_ctas + 1) * sizeof(int)), "plan");
  pr.cta_begin = cta_begin;
  int* cta_class = p.allocate<int>(num_ctas * sizeof(int), "plan workspace");
  pr.cta_class = cta_class;
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
  // Narrow (<= 128-token) tiles take 256 weight rows when the experts' row blocks alone give every
  // CTA a tile (the pointer-array plan's rule, with one token tile per expert).
  pr.narrow_rows = std::int64_t{w.experts} * ((w.n + 255) / 256) >= num_ctas ? 256 : 128;
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

  MoeScheduleArgs& sa = p.schedule;
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
  sa.cta_begin = cta_begin;
  sa.cta_class = cta_class;
  sa.first_pieces = const_cast<ProducerPiece*>(pr.first_pieces);
  sa.groups = d_groups;
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
  MoeScheduleArgs sa = p.schedule;
  sa.offsets = args.expert_offsets;
  sa.counts = args.expert_counts;
  sa.c = args.c;
  sa.ldc = args.ldc;
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
    moe_schedule<<<1, kSchedulerThreads, 0, s>>>(sa);
    FP4GEMM_CUDA_CHECK(cudaGetLastError(), "run");
    const Format f = p.options.format;
    const int ctas = p.schedule.num_ctas;
    const cudaError_t err =
        p.options.activation == MoeActivation::bf16
            ? launch_routed<Format::mxfp4, PrepassSource::routed_bf16>(p.params, p.options.out_type, ctas, p.smem_bytes,
                                                                       pa, p.prepass_grid, true, s)
        : f == Format::nvfp4
            ? launch_routed<Format::nvfp4, PrepassSource::routed_fp4>(p.params, p.options.out_type, ctas, p.smem_bytes,
                                                                      pa, p.prepass_grid, true, s)
            : launch_routed<Format::mxfp4, PrepassSource::routed_fp4>(p.params, p.options.out_type, ctas, p.smem_bytes,
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
     << p.schedule.num_ctas << " CTAs, up to " << p.schedule.max_tiles << " tiles, narrow tiles "
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
