// The fused kernel's host side: schedule, TMA descriptors and workspace at plan time; launch.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/device_memory.hpp"
#include "host/core/schedule.hpp"
#include "host/tensor_map.hpp"
#include "host/plans/fused_plan.hpp"  // (and through the registry, the kernels' entry points)
#include "device/kernel_config.cuh"
#include "device/trace_counters.hpp"

namespace fp4gemm::detail::sm90 {

// ---------------------------------------------------------------------------------------------
// Host side: plan-time set-up and launch
// ---------------------------------------------------------------------------------------------

namespace {

// The plan's device-side metadata in one allocation of 128-byte aligned parts, so that the
// pre-pass can prefetch all of it into L2 for the GEMM (PrepassArgs::meta).
class MetaBlob {
 public:
  template <typename T>
  std::size_t add(const std::vector<T>& v) {
    const std::size_t offset = (bytes_.size() + 127) / 128 * 128;
    bytes_.resize(offset + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(bytes_.data() + offset, v.data(), v.size() * sizeof(T));
    return offset;
  }
  std::size_t size() const { return (bytes_.size() + 127) / 128 * 128; }
  // Copies the parts to `d`, a device allocation of size() bytes.
  void upload(std::uint8_t* d, const char* what) {
    bytes_.resize(size());
    FP4GEMM_CUDA_CHECK(cudaMemcpy(d, bytes_.data(), bytes_.size(), cudaMemcpyHostToDevice), what);
  }

 private:
  std::vector<std::uint8_t> bytes_;
};

// The schedule's policy: the production defaults (device/schedule.hpp) with the knobs of
// Options::tuning (validated in host/core/validate.cpp) applied.
SchedulePolicy schedule_policy(const Tuning& t) {
  SchedulePolicy policy;
  if (t.wide_fixed) policy.wide_fixed = *t.wide_fixed;
  if (t.wide_per_token) policy.wide_per_token = *t.wide_per_token;
  if (t.narrow_fixed) policy.narrow_fixed = *t.narrow_fixed;
  if (t.narrow_per_token) policy.narrow_per_token = *t.narrow_per_token;
  if (t.epilogue_cost) policy.epilogue_per_elem = *t.epilogue_cost;
  if (t.class_round) policy.class_round = *t.class_round;
  if (t.split_k) {  // stream-K always / whole tiles only, instead of the cheaper estimate
    policy.split_k = *t.split_k;
    policy.split_auto = false;
  }
  if (t.handoff_cost) policy.handoff_per_elem = policy.owner_read_per_elem = *t.handoff_cost;
  if (t.owner_cost) policy.owner_read_per_elem = *t.owner_cost;
  if (t.tile_tokens) {  // token tiles at most this wide, no search over narrower widths
    policy.max_tile_tokens = *t.tile_tokens;
    policy.tile_auto = false;
  }
  if (t.narrow_rows) policy.narrow_rows = *t.narrow_rows;
  return policy;
}

}  // namespace

struct FastPlan final : KernelPlan {
  Format format;
  ScaleLayout layout;
  OutType out_type;
  Schedule schedule;
  FusedParams params{};
  PrepassArgs prepass{};
  void* act_workspace = nullptr;
  int act_cols = 0;
  int max_m = 0;
  int max_kblocks = 0;
  std::size_t smem_bytes = 0;
  const ScaleConversion* d_conversions = nullptr;  // linear scales TMA cannot read (see make_fused_plan)
  int num_conversions = 0;
  dim3 conversion_grid{0, 0, 1};
  dim3 prepass_grid{0, 0, 1};  // x: (token row, k-block) units of the largest group / 256; y: groups
  // Dual GEMMs: each group's weight scales copied in paired row order (glu_scales.hpp), at plan
  // time and, with Options::rescale_each_run, before every run.
  std::vector<GluScaleJob> glu_jobs;
  bool rescale_each_run = false;
  DeviceAllocations memory;  // owned (and freed) by the plan

  void run(cudaStream_t stream) const override;
  std::string describe() const override;
  std::size_t device_bytes() const override { return memory.bytes(); }
  template <typename T>
  T* allocate(std::size_t bytes, const char* what) {
    return memory.allocate<T>(bytes, what, 0);  // (a plain cudaMalloc of `bytes`)
  }
};

std::unique_ptr<KernelPlan> make_fused_plan(const KernelContext& context) {
  using C = KernelConfig;
  const std::span<const GroupDesc> groups = context.groups;
  const Options& options = context.options;
  const DeviceInfo& device = context.device;
  const GroupParams* d_groups = context.d_groups;
  const Tuning& tuning = options.tuning;  // measurement and test knobs; defaults: production
  auto plan = std::make_unique<FastPlan>();
  FastPlan& fp = *plan;
  fp.format = options.format;
  fp.layout = options.scale_layout;
  fp.out_type = options.out_type;
  // A dual GEMM's group has 2N kernel rows: 8 gate rows then their 8 up rows per 16, read through
  // a 4-D map (k bytes, 8 rows, gate|up, 8-row blocks) from the lower of b / b_up.
  const bool dual = options.epilogue != Epilogue::none;
  auto krows = [&](const GroupDesc& g) { return dual ? 2 * g.n : g.n; };

  std::vector<ScheduleShape> shapes;
  for (const GroupDesc& g : groups) {
    shapes.push_back({g.m, krows(g), g.k});
    fp.max_m = std::max(fp.max_m, g.m);
  }
  // Tuning::max_ctas (test knob): fewer CTAs, so that CTAs take several pieces and reuse their
  // ring's stages (the sanitizer test).
  const int max_ctas = std::min(device.multiprocessors, tuning.max_ctas.value_or(device.multiprocessors));
  SchedulePolicy policy = schedule_policy(tuning);
  policy.share_epilogue = dual && tuning.share_epilogue;  // (GLU epilogues: SchedulePolicy)
  fp.schedule = build_schedule(shapes, max_ctas, policy);
  const Schedule& s = fp.schedule;
  fp.max_kblocks = s.max_kblocks;
  if (s.tiles.empty()) return plan;
  if (static_cast<std::int64_t>(fp.max_m) * fp.max_kblocks > (std::int64_t{1} << 31) - 256)
    throw Error("groups[].m", -1, "too many tokens x k-blocks in one group for the activation pre-pass (max 2^31)");

  // Shared memory: all the device allows; each CTA fits as many stages of its width class as the
  // ring takes (a 256-token stage is 36.5 KB, a 128-token one 25 KB, a 64-token one 17 KB).
  // (SmemLayout, kernel_config.cuh: the barriers, the epilogue buffer and alignment slack beyond it)
  const std::size_t fixed = SmemLayout::kFixedBytes;
  if (device.smem_per_block_optin < fixed + SmemLayout::kMinRingBytes)
    throw Error("device", -1, "not enough shared memory for the fused kernel");
  fp.smem_bytes = device.smem_per_block_optin;
  fp.smem_bytes -= kTraceSmemBytes;  // (a trace build's static counters)
  int ring_bytes = static_cast<int>(fp.smem_bytes - fixed);
  if (tuning.ring_kb)  // measurement knob: a shallower ring
    ring_bytes = static_cast<int>(std::clamp<std::int64_t>(std::int64_t{*tuning.ring_kb} * 1024, SmemLayout::kMinRingBytes, ring_bytes));

  // Activation workspace [total rows, K padded to 64] of 16-bit values, one TMA map over it.
  fp.act_cols = s.max_kblocks * C::kBlockK;
  const std::size_t act_bytes = static_cast<std::size_t>(s.total_act_rows) * fp.act_cols * 2;
  fp.act_workspace = fp.allocate<void>(act_bytes, "plan workspace");
  // One map per width class n16 (box 16 * n16 rows): a stage's activations are one TMA load.
  std::vector<CUtensorMap> amaps(SchedulePolicy::kWidthClasses);
  for (int c = 1; c <= SchedulePolicy::kWidthClasses; ++c)
    amaps[c - 1] = make_map_2d(fp.act_workspace,
                               options.format == Format::nvfp4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                               fp.act_cols, s.total_act_rows, static_cast<std::uint64_t>(fp.act_cols) * 2, C::kBlockK,
                               C::kActClassRows * c, CU_TENSOR_MAP_SWIZZLE_128B, "plan workspace", -1);

  // Two weight (B) maps per group over [N rows, K/2 bytes], no swizzle: box 128 rows x 32 bytes
  // (one tile half) and box 256 rows x 32 bytes (a whole 2-half tile in one load).
  std::vector<CUtensorMap> wmaps(2 * groups.size());
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const GroupDesc& g = groups[i];
    if (g.m <= 0) continue;
    for (int w = 0; w < 2; ++w) {
      const std::uint32_t box_rows = C::kWeightBoxRows * (w + 1);
      if (!dual) {
        wmaps[2 * i + w] = make_map_2d(g.b, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<std::uint64_t>(g.k) / 2, g.n,
                                       g.ldb, C::kBlockK / 2, box_rows, CU_TENSOR_MAP_SWIZZLE_NONE, "groups[].b",
                                       static_cast<int>(i));
        continue;
      }
      const auto* b = static_cast<const std::uint8_t*>(g.b);
      const auto* b_up = static_cast<const std::uint8_t*>(g.b_up);
      const std::uint64_t dims[4] = {static_cast<std::uint64_t>(g.k) / 2, 8, 2, static_cast<std::uint64_t>(g.n) / 8};
      const std::uint64_t strides[3] = {static_cast<std::uint64_t>(g.ldb),
                                        static_cast<std::uint64_t>(b_up < b ? b - b_up : b_up - b),
                                        static_cast<std::uint64_t>(8 * g.ldb)};
      const std::uint32_t box[4] = {C::kBlockK / 2, 8, 2, box_rows / 16};
      wmaps[2 * i + w] = make_map(std::min(b, b_up), CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, dims, strides, box,
                                  CU_TENSOR_MAP_SWIZZLE_NONE, "groups[].b", static_cast<int>(i));
    }
  }

  // C maps for the TMA-store epilogue (16-bit outputs): two per group, boxes of 64 n x 64 and
  // 64 n x 8 tokens, 128-byte swizzle (the epilogue buffer's layout). Taken when CTAs run at
  // least 4 pieces on average: then the epilogues recur between mainloops and TMA lets the warps
  // go on (dense 8192^2 x 1024, 16 tiles per CTA: 205 -> 194 us on the H200); with 1-3 pieces
  // per CTA (seed cases 1-4) it measured 0-2 % slower than the warps' own stores. TMA needs
  // 16-byte multiples for C's row pitch, and it clips a row's end in 16-byte steps: a store would
  // write up to 7 padding elements past an N that is not a multiple of 8 (measured), so such
  // groups keep the warps' stores (c_tma[group] = 0). Tuning::tma_store (measurement and test
  // knob) turns it off / on wherever allowed.
  std::vector<CUtensorMap> cmaps;
  std::vector<std::uint8_t> c_tma;
  int active_ctas = 0;
  for (int c = 0; c < s.num_ctas; ++c) active_ctas += s.cta_begin[c + 1] > s.cta_begin[c] ? 1 : 0;
  bool tma_store = s.pieces.size() >= 4 * static_cast<std::size_t>(std::max(1, active_ctas));
  if (tuning.tma_store) tma_store = *tuning.tma_store;
  if (options.out_type == OutType::f32 || dual) tma_store = false;  // (the GLU epilogue stores itself)
  if (tma_store) {
    cmaps.resize(2 * groups.size());
    c_tma.assign(groups.size(), 0);
    const auto type = options.out_type == OutType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const GroupDesc& g = groups[i];
      if (g.m <= 0 || (g.ldc * 2) % 16 != 0 || g.n % 8 != 0) continue;
      c_tma[i] = 1;
      for (int w = 0; w < 2; ++w)
        cmaps[2 * i + w] = make_map_2d(g.c, type, g.n, g.m, static_cast<std::uint64_t>(g.ldc) * 2, 64, w == 0 ? 64 : 8,
                                       CU_TENSOR_MAP_SWIZZLE_128B, "groups[].c", static_cast<int>(i));
    }
    if (std::find(c_tma.begin(), c_tma.end(), 1) == c_tma.end()) cmaps.clear(), c_tma.clear();  // no group qualifies
  }

  // Weight scales: blocked -> 512-byte bulk copies straight from the user's buffer; linear with
  // rows of a multiple of 4 bytes (K % 64 == 0 for NVFP4, % 128 for MXFP4) -> the producer warp
  // gathers them with 4-byte cp.async into the blocked atom of each stage; other linear scales ->
  // a per-run conversion to blocked into plan workspace (scales_to_blocked), ~2 bytes of traffic
  // per scale byte. (A TMA map over linear scales, box 16 columns x 128 rows, faulted with
  // "illegal instruction" on H200 although it encoded fine -- see docs/PERF.md.)
  const int vec = options.format == Format::nvfp4 ? 16 : 32;
  const bool force_conversion = tuning.convert_scales;  // test/measurement knob
  std::vector<const std::uint8_t*> sblocked(groups.size(), nullptr), slinear(groups.size(), nullptr);
  std::vector<ScaleConversion> conversions;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const GroupDesc& g = groups[i];
    if (g.m <= 0) continue;
    const int cols = g.k / vec;
    const auto* sfb = static_cast<const std::uint8_t*>(g.sfb);
    if (dual) {
      // A paired blocked copy (glu_scales.hpp) made at plan time: the producer bulk-loads its
      // atoms (the fastest kernel). With rescale_each_run the producer instead gathers the user's
      // gate / up scales in the kernel's row order at every k-block (linear rows of a multiple of
      // 4 bytes, or blocked): scale_linear = the map's first half's, scale_blocked = the second's
      // -- no per-run copy, a slower kernel (H200, 256 x 4096 x 7168: ~74 vs ~80 us); other
      // layouts copy before every run.
      const auto* sfb_up = static_cast<const std::uint8_t*>(g.sfb_up);
      const bool swap = g.b_up < g.b;
      const std::uint8_t* first = swap ? sfb_up : sfb;
      const std::uint8_t* second = swap ? sfb : sfb_up;
      const bool words = options.scale_layout == ScaleLayout::blocked ||
                         (cols % 4 == 0 && reinterpret_cast<std::uintptr_t>(first) % 4 == 0 &&
                          reinterpret_cast<std::uintptr_t>(second) % 4 == 0);
      if (words && options.rescale_each_run && !force_conversion) {
        slinear[i] = first, sblocked[i] = second;
        continue;
      }
      std::uint8_t* dst = fp.allocate<std::uint8_t>(formats::blocked_scale_bytes(2 * g.n, cols), "plan workspace");
      fp.glu_jobs.push_back(GluScaleJob{first, second, 0, dst, 0, g.n, cols, g.n,
                                        static_cast<int>(GateUpLayout::separate), options.scale_layout});
      sblocked[i] = dst;
    } else if (options.scale_layout == ScaleLayout::blocked) {
      sblocked[i] = sfb;
    } else if (cols % 4 == 0 && reinterpret_cast<std::uintptr_t>(sfb) % 4 == 0 && !force_conversion) {
      slinear[i] = sfb;  // the producer warp gathers 4-byte row pieces with cp.async
    } else {
      const std::size_t bytes = formats::blocked_scale_bytes(g.n, cols);
      std::uint8_t* dst = fp.allocate<std::uint8_t>(bytes, "plan workspace");
      conversions.push_back(ScaleConversion{sfb, dst, g.n, cols});
      sblocked[i] = dst;
    }
  }
  std::int64_t max_words = 0;
  for (const ScaleConversion& c : conversions)
    max_words = std::max<std::int64_t>(max_words, static_cast<std::int64_t>((c.rows + 127) / 128) * (((c.cols + 3) / 4 + 7) / 8) * 128);
  fp.num_conversions = static_cast<int>(conversions.size());
  fp.conversion_grid = dim3(static_cast<unsigned>((max_words + 255) / 256),
                            static_cast<unsigned>(std::min<std::size_t>(conversions.size(), PrepassArgs::kMaxGridY)));

  // Everything the kernels read of the plan in one allocation (MetaBlob), the group table copied
  // in from the plan's.
  // The pre-pass's table: the groups with work only (an empty group costs nothing and its fields,
  // K = 0 included, are never read).
  std::vector<PrepassGroup> prepass_groups;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const GroupDesc& g = groups[i];
    if (g.m > 0)
      prepass_groups.push_back(PrepassGroup{static_cast<const std::uint8_t*>(g.a), static_cast<const std::uint8_t*>(g.sfa),
                                            g.lda, g.m, g.k, s.act_row0[i], 0});
  }
  MetaBlob blob;
  const std::size_t o_conv = blob.add(conversions), o_sblk = blob.add(sblocked), o_slin = blob.add(slinear),
                    o_tiles = blob.add(s.tiles), o_pieces = blob.add(s.pieces), o_begin = blob.add(s.cta_begin),
                    o_class = blob.add(s.cta_class), o_wmaps = blob.add(wmaps), o_amaps = blob.add(amaps),
                    o_pre = blob.add(prepass_groups), o_cmaps = blob.add(cmaps), o_ctma = blob.add(c_tma),
                    o_groups = blob.add(std::vector<GroupParams>(groups.size())),
                    o_first = blob.add(std::vector<ProducerPiece>(s.num_ctas));
  std::uint8_t* meta = fp.allocate<std::uint8_t>(blob.size(), "plan");
  blob.upload(meta, "plan");
  FP4GEMM_CUDA_CHECK(cudaMemcpy(meta + o_groups, d_groups, groups.size() * sizeof(GroupParams), cudaMemcpyDeviceToDevice),
                     "plan");
  auto at = [&]<typename T>(std::size_t offset, const std::vector<T>& v) {
    return v.empty() ? nullptr : reinterpret_cast<T*>(meta + offset);
  };
  fp.d_conversions = at(o_conv, conversions);
  FusedParams& pr = fp.params;
  pr.scale_blocked = at(o_sblk, sblocked);
  pr.scale_linear = at(o_slin, slinear);
  pr.groups = reinterpret_cast<const GroupParams*>(meta + o_groups);
  pr.tiles = at(o_tiles, s.tiles);
  pr.pieces = at(o_pieces, s.pieces);
  // The producers' record of each CTA's first piece (it holds device addresses inside the blob,
  // so it is written after the upload).
  if (!s.pieces.empty()) {
    std::vector<ProducerPiece> first(s.num_ctas, ProducerPiece{});
    for (int cta = 0; cta < s.num_ctas; ++cta) {
      const int halves = halves_of_class(s.cta_class[cta], s.narrow_rows);
      if (const int pi = s.cta_begin[cta]; pi < s.cta_begin[cta + 1]) {
        const WorkPiece& piece = s.pieces[pi];
        const TileDesc& tile = s.tiles[piece.tile];
        const GroupDesc& g = groups[tile.group];
        first[cta] = make_producer_piece(piece, tile, krows(g), g.k / vec, halves,
                                         reinterpret_cast<const CUtensorMap*>(meta + o_wmaps) + 2 * tile.group,
                                         sblocked[tile.group], slinear[tile.group]);
      }
    }
    FP4GEMM_CUDA_CHECK(cudaMemcpy(meta + o_first, first.data(), first.size() * sizeof(ProducerPiece), cudaMemcpyHostToDevice),
                       "plan");
    pr.first_pieces = reinterpret_cast<const ProducerPiece*>(meta + o_first);
  }
  pr.cta_begin = at(o_begin, s.cta_begin);
  pr.cta_class = at(o_class, s.cta_class);
  pr.weight_maps = at(o_wmaps, wmaps);
  pr.act_maps = at(o_amaps, amaps);
  pr.c_maps = at(o_cmaps, cmaps);
  pr.c_tma = at(o_ctma, c_tma);

  // The pre-pass's arguments: the first PrepassArgs::kInline groups by value.
  PrepassArgs& pa = fp.prepass;
  pa.num_groups = static_cast<int>(prepass_groups.size());
  pa.inline_count = std::min(PrepassArgs::kInline, pa.num_groups);
  std::copy_n(prepass_groups.begin(), pa.inline_count, pa.inline_groups);
  // The groups by value and the metadata's L2 prefetch shorten the start: without them the GEMM
  // producer's first TMA sits behind 4-5 dependent DRAM misses on the plan's metadata (together,
  // H200: -2 % on seed case 3, -4 % on case 4).
  pa.groups = at(o_pre, prepass_groups);
  // One thread per (token row, k-block) of the largest group; make_fused_plan checked that the
  // count fits an int.
  const std::int64_t units = static_cast<std::int64_t>(fp.max_m) * fp.max_kblocks;
  fp.prepass_grid = dim3(static_cast<unsigned>((units + 255) / 256),
                         static_cast<unsigned>(std::min(pa.num_groups, PrepassArgs::kMaxGridY)));
  pa.out = fp.act_workspace;
  pa.out_cols = fp.act_cols;
  pa.layout = options.scale_layout;
  pa.meta = meta;
  pa.meta_lines = static_cast<int>(blob.size() / 128);
  if (s.num_slots > 0) {
    pr.partials = fp.allocate<float>(static_cast<std::size_t>(s.num_slots) * C::kPartialFloats * sizeof(float),
                                     "plan workspace");
  }
  pr.flags = fp.allocate<int>(s.tiles.size() * sizeof(int), "plan workspace");
  FP4GEMM_CUDA_CHECK(cudaMemset(pr.flags, 0, s.tiles.size() * sizeof(int)), "plan workspace");
  pr.ring_bytes = ring_bytes;
  pr.narrow_rows = s.narrow_rows;
  // The ring's first fill of weights is issued while the pre-pass runs, so those loads overlap it
  // (H200: -0.7 to -1.6 % on seed cases 1, 2 and 4, +1.2 % on case 3).
  pr.early_kblocks = C::kMaxStages;
  pr.layout = options.scale_layout;
  if (dual) {  // read by the GLU epilogue and the weight loads (the work list stays the host's)
    pr.moe.glu = static_cast<int>(options.epilogue);  // = detail::GluKind
    pr.moe.swiglu_alpha = options.swiglu_alpha;
    pr.moe.swiglu_limit = options.swiglu_limit;
    fp.rescale_each_run = options.rescale_each_run;
    // The paired scale copies, once now.
    detail::run_on_private_stream("plan", context.after, [&](cudaStream_t st) {
      for (const GluScaleJob& job : fp.glu_jobs)
        if (const cudaError_t e = launch_glu_scales(job, 1, st); e != cudaSuccess) return e;
      return cudaSuccess;
    });
  }

  FP4GEMM_CUDA_CHECK(options.format == Format::nvfp4 ? set_fused_smem<Format::nvfp4>(fp.smem_bytes)
                                                    : set_fused_smem<Format::mxfp4>(fp.smem_bytes),
                     "plan");
  return plan;
}

void FastPlan::run(cudaStream_t stream) const {
  const FastPlan& fp = *this;
  const Schedule& s = fp.schedule;
  if (s.tiles.empty()) return;
  if (fp.rescale_each_run)
    for (const GluScaleJob& job : fp.glu_jobs) FP4GEMM_CUDA_CHECK(launch_glu_scales(job, 1, stream), "run");
  const cudaError_t err =
      fp.format == Format::nvfp4
          ? launch_fused<Format::nvfp4>(fp.params, fp.out_type, s.num_ctas, fp.smem_bytes, fp.prepass, fp.prepass_grid,
                                        fp.d_conversions, fp.num_conversions, fp.conversion_grid, stream)
          : launch_fused<Format::mxfp4>(fp.params, fp.out_type, s.num_ctas, fp.smem_bytes, fp.prepass, fp.prepass_grid,
                                        fp.d_conversions, fp.num_conversions, fp.conversion_grid, stream);
  FP4GEMM_CUDA_CHECK(err, "run");
}

std::string FastPlan::describe() const {
  const FastPlan& fp = *this;
  using C = KernelConfig;
  std::ostringstream os;
  os << "tiles " << fp.schedule.tiles.size() << " (" << fp.schedule.narrow_rows << " weight rows x <=128 tokens or 128 x <="
     << fp.schedule.max_tile_tokens << "), " << fp.schedule.pieces.size()
     << " pieces on " << fp.schedule.num_ctas << " CTAs (" << (fp.schedule.split() ? "stream-K" : "whole tiles") << ", imbalance " << fp.schedule.imbalance
     << "), ring " << fp.params.ring_bytes / 1024 << " KiB (" << fp.params.ring_bytes / C::kStageBytes << " to "
     << std::min(C::kMaxStages, fp.params.ring_bytes / (2 * (C::kHalfWeightBytes + C::kScaleAtomBytes) + C::kActClassBytes))
     << " stages by tile width), " << fp.smem_bytes / 1024 << " KiB smem"
     << (fp.params.c_maps != nullptr ? ", TMA-store epilogue" : "")
     << (fp.params.moe.glu != 0 ? std::string(", dual GEMM with ") + to_string(static_cast<Epilogue>(fp.params.moe.glu)) +
                                      " epilogue (gate/up row pairs)"
                                : std::string());
  const auto shared = std::count_if(fp.schedule.tiles.begin(), fp.schedule.tiles.end(),
                                    [](const TileDesc& t) { return t.owner_slot >= 0; });
  if (shared > 0) os << ", " << shared << " split tiles share their epilogue";
  return os.str();
}

std::string trace_report(Format format) {
  if constexpr (!kTraceBuild) return {};
  std::vector<unsigned long long> v(static_cast<std::size_t>(kTraceCtas) * kTraceRoles * kTraceCounters + 2);
  FP4GEMM_CUDA_CHECK(cudaDeviceSynchronize(), "trace");
  FP4GEMM_CUDA_CHECK(format == Format::nvfp4 ? read_trace<Format::nvfp4>(v.data()) : read_trace<Format::mxfp4>(v.data()),
                     "trace");
  auto at = [&](int cta, int role, int c) { return v[(static_cast<std::size_t>(cta) * kTraceRoles + role) * kTraceCounters + c]; };
  std::ostringstream os;
  os << "trace (cycles; per k-block figures are per consumer warpgroup)\n"
     << " cta  kblocks pieces  N*H/kb  loop/kb  full/kb  handoff  epilogue    busy   total  prod_empty/kb prod_loop/kb prod_issue/kb\n";
  double sum_busy = 0, max_busy = 0, min_busy = 1e30;
  int active = 0;
  for (int cta = 0; cta < kTraceCtas; ++cta) {
    const unsigned long long kb = at(cta, 0, kTraceKblocks);
    if (kb == 0) continue;
    ++active;
    const double loop = 0.5 * (at(cta, 0, kTraceMainloop) + at(cta, 1, kTraceMainloop));
    const double full = 0.5 * (at(cta, 0, kTraceBarrier) + at(cta, 1, kTraceBarrier));
    const double hand = 0.5 * (at(cta, 0, kTraceHandoff) + at(cta, 1, kTraceHandoff));
    const double epi = 0.5 * (at(cta, 0, kTraceEpilogue) + at(cta, 1, kTraceEpilogue));
    const double busy = loop + hand + epi;
    sum_busy += busy, max_busy = std::max(max_busy, busy), min_busy = std::min(min_busy, busy);
    const unsigned long long pkb = std::max(1ull, at(cta, 2, kTraceKblocks));
    char line[240];
    std::snprintf(line, sizeof line, "%4d %8llu %6llu %7.0f %8.0f %8.0f %8.0f %9.0f %7.0f %7.0f %8.0f %8.0f %8.0f\n", cta, kb,
                  at(cta, 0, kTracePieces), double(at(cta, 0, kTraceTokenKblocks)) / kb, loop / kb, full / kb, hand, epi,
                  busy, double(at(cta, 0, kTraceTotal)), double(at(cta, 2, kTraceBarrier)) / pkb,
                  double(at(cta, 2, kTraceMainloop)) / pkb,
                  double(at(cta, 2, kTraceIssue)) / pkb);
    os << line;
  }
  if (active > 0) {
    os << "busy cycles over " << active << " CTAs: min " << min_busy << " avg " << sum_busy / active << " max " << max_busy
       << " (max/avg " << max_busy / (sum_busy / active) << ")\n";
    // Timeline (%globaltimer, ns from the pre-pass's first block): when the GEMM's CTAs entered,
    // got their first stage (consumers) / passed the pre-pass wait (producer), and exited.
    const unsigned long long t0 = v[v.size() - 2], prepass_end = v[v.size() - 1];
    auto stats = [&](int role, int c) {
      double lo = 1e30, hi = -1e30, sum = 0;
      int n = 0;
      for (int cta = 0; cta < kTraceCtas; ++cta) {
        if (at(cta, 0, kTraceKblocks) == 0 || at(cta, role, c) == 0) continue;
        const double x = static_cast<double>(static_cast<long long>(at(cta, role, c) - t0));  // (in integers: ns since boot exceed a double's precision)
        lo = std::min(lo, x), hi = std::max(hi, x), sum += x, ++n;
      }
      char line[160];
      std::snprintf(line, sizeof line, "min %8.0f avg %8.0f max %8.0f", lo, n ? sum / n : 0.0, hi);
      return std::string(line);
    };
    os << "timeline (ns from the pre-pass start; pre-pass last store at " << static_cast<long long>(prepass_end - t0)
       << "):\n  GEMM entry        " << stats(0, kTraceEntryNs) << "\n  work known        " << stats(0, kTracePrologueNs)
       << "\n  producer past wait " << stats(2, kTraceFirstNs)
       << "\n  first stage full  " << stats(0, kTraceFirstNs) << "\n  consumer exit     " << stats(0, kTraceExitNs) << "\n";
    auto cycles = [&](int role, int c) {  // cycles since the CTA's entry
      double lo = 1e30, hi = 0, sum = 0;
      int n = 0;
      for (int cta = 0; cta < kTraceCtas; ++cta) {
        if (at(cta, 0, kTraceKblocks) == 0) continue;
        const double x = static_cast<double>(at(cta, role, c));
        lo = std::min(lo, x), hi = std::max(hi, x), sum += x, ++n;
      }
      char line[160];
      std::snprintf(line, sizeof line, "min %7.0f avg %7.0f max %7.0f", n ? lo : 0.0, n ? sum / n : 0.0, hi);
      return std::string(line);
    };
    os << "start-up (cycles from the CTA's entry):\n  MoE schedule step 1    " << cycles(0, kTraceCyclesStep1)
       << "\n  MoE schedule step 2    " << cycles(0, kTraceCyclesStep2) << "\n  MoE schedule step 3    "
       << cycles(0, kTraceCyclesStep3) << "\n  MoE schedule step 4    " << cycles(0, kTraceCyclesStep4)
       << "\n  work known (producer)  " << cycles(2, kTraceCyclesWork)
       << "\n  barriers set up        " << cycles(2, kTraceCyclesSetup) << "\n  early weights issued   "
       << cycles(2, kTraceCyclesIssued) << "\n  producer branch        " << cycles(2, kTraceCyclesBranch)
       << "\n  producer past wait     " << cycles(2, kTraceCyclesFirst) << "\n  consumer branch        "
       << cycles(0, kTraceCyclesBranch) << "\n  first stage full       " << cycles(0, kTraceCyclesFirst) << "\n";
  }
  return os.str();
}

}  // namespace fp4gemm::detail::sm90
