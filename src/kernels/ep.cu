// fp4gemm::EpExchange (fp4gemm/ep.hpp): the expert-parallel dispatch and combine as kernels that
// write the other ranks' exchange buffers directly (peer-mapped memory over NVLink), with the
// split sizes on the device.
//
// Exchange buffer of every rank (the same offsets on every rank, each region 256-byte aligned):
//   counts  int32 [16]            counts[s]: rows rank s sends here this step (written by s, phase 1);
//                                 counts[8]: their sum (written here, phase 2: the layer's token count)
//   ids     int32 [capacity, k]   per received row, the local expert id of each of the token's k
//                                 slots whose expert is here, -1 for the others (and past the count)
//   rows    bf16 [capacity, H]    or packed e2m1 [capacity, H/2] + linear scales [capacity, H/vec]
//   y       bf16 [capacity * k, H] the local layer's expert output rows, in expert order (phase 3,
//                                 MoeLayerArgs::expert_rows), read in place by the combines of the
//                                 rows' origin ranks (phase 4)
//   row_of  int32 [capacity * k]  where pair (row, slot)'s output is in y (MoeLayerArgs::row_of)
// capacity = W * max_tokens: a token travels once to each rank that holds one of its experts (not
// once per pair), and the local layer expands it to its pairs with its own routing.
#include <cub/block/block_scan.cuh>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "device/quantize_rule.cuh"
#include "fp4gemm/ep.hpp"
#include "fp4gemm/fp4gemm.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/device_memory.hpp"
#include "host/core/validate.hpp"
#include "host/device_guard.hpp"
#include "kernels/combine.cuh"

namespace fp4gemm {

namespace {

constexpr int kMaxWorld = 8, kMaxTopk = 32;
constexpr int kCountThreads = 1024, kSendThreads = 256;

struct Layout {
  std::size_t counts = 0, ids = 0, rows = 0, packed = 0, scales = 0, y = 0, row_of = 0, total = 0;
};

std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }

int vec_of(EpRows r) { return r == EpRows::nvfp4 ? 16 : 32; }

Layout layout_of(const EpConfig& c) {
  Layout l;
  const std::size_t cap = std::size_t{1} * c.world * c.max_tokens, k = static_cast<std::size_t>(c.topk),
                    H = static_cast<std::size_t>(c.hidden);
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t here = at;
    at = align256(at + bytes);
    return here;
  };
  l.counts = take(sizeof(int) * 2 * kMaxWorld);
  l.ids = take(sizeof(int) * cap * k);
  if (c.rows == EpRows::bf16) {
    l.rows = take(cap * H * 2);
  } else {
    l.packed = take(cap * H / 2);
    l.scales = take(cap * (H / vec_of(c.rows)));
  }
  l.y = take(cap * k * H * 2);
  l.row_of = take(sizeof(int) * cap * k);
  l.total = at;
  return l;
}

// Every rank's buffer base as mapped here: a small device table (indexing a kernel parameter array
// with a run-time rank would copy it to the stack).
struct Peers {
  char* const* base;
};

struct Counts {
  int c[kMaxWorld];
};

template <typename Id>
__device__ __forceinline__ int destination(const Id* ids, long long i, int experts, int local) {
  const long long id = static_cast<long long>(ids[i]);
  return id >= 0 && id < experts ? static_cast<int>(id / local) : -1;
}

// Bit q: token t has an expert on rank q.
template <typename Id>
__device__ __forceinline__ unsigned destinations(const Id* ids, int t, int k, int experts, int local) {
  unsigned mask = 0;
  for (int j = 0; j < k; ++j) {
    const int d = destination(ids, static_cast<long long>(t) * k + j, experts, local);
    if (d >= 0) mask |= 1u << d;
  }
  return mask;
}

// Phase 1, one block: for every pair i of token t with its expert on rank d, slot[i] = (the place
// of token t among this rank's tokens going to d, in token order) * 8 + d (-1 for ids outside
// [0, E)); and counts[rank] of every destination's buffer (its tokens from here). Thread u owns a
// contiguous run of tokens: count, block-wide exclusive scan of the per-destination counts, then
// place.
template <typename Id>
__global__ void __launch_bounds__(kCountThreads) ep_count_kernel(const Id* __restrict__ ids, int tokens, int k,
                                                                 int experts, int local, int world, int rank,
                                                                 Peers peers, std::size_t counts_at,
                                                                 int* __restrict__ slot) {
  using Scan = cub::BlockScan<int, kCountThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int per = (tokens + kCountThreads - 1) / kCountThreads;
  const int lo = min(tokens, static_cast<int>(threadIdx.x) * per), hi = min(tokens, lo + per);
  Counts mine;
#pragma unroll
  for (int q = 0; q < kMaxWorld; ++q) mine.c[q] = 0;
  for (int t = lo; t < hi; ++t) {
    const unsigned mask = destinations(ids, t, k, experts, local);
#pragma unroll
    for (int q = 0; q < kMaxWorld; ++q) mine.c[q] += mask >> q & 1u;
  }
  Counts base, total;
#pragma unroll
  for (int q = 0; q < kMaxWorld; ++q) {
    base.c[q] = total.c[q] = 0;
    if (q < world) {  // (uniform over the block)
      Scan(scan).ExclusiveSum(mine.c[q], base.c[q], total.c[q]);
      __syncthreads();  // the scan storage is reused
    }
  }
  for (int t = lo; t < hi; ++t) {
    const unsigned mask = destinations(ids, t, k, experts, local);
    Counts place;
#pragma unroll
    for (int q = 0; q < kMaxWorld; ++q) place.c[q] = mask >> q & 1u ? base.c[q]++ : -1;
    for (int j = 0; j < k; ++j) {
      const long long i = static_cast<long long>(t) * k + j;
      const int d = destination(ids, i, experts, local);
      int s = -1;
#pragma unroll
      for (int q = 0; q < kMaxWorld; ++q)
        if (d == q) s = place.c[q] * 8 + q;
      slot[i] = s;
    }
  }
  if (threadIdx.x < world) {
    int value = 0;
#pragma unroll
    for (int q = 0; q < kMaxWorld; ++q)
      if (q == static_cast<int>(threadIdx.x)) value = total.c[q];
    reinterpret_cast<int*>(peers.base[threadIdx.x] + counts_at)[rank] = value;
  }
}

struct SendParams {
  const __nv_bfloat16* x;
  long long ldx;
  const void* ids;
  const int* slot;
  int2* pair_row;  // [tokens * k] (rank, received row) of each pair's token there; (-1, -1): none
  int tokens, k, experts, local, world, rank, hidden, capacity;
  float gs;
  Peers peers;
  Layout at;
};

__device__ __forceinline__ int own_total(const SendParams& p) {
  const int* counts = reinterpret_cast<const int*>(p.peers.base[p.rank] + p.at.counts);
  int total = 0;
  for (int s = 0; s < p.world; ++s) total += counts[s];
  return total;
}

// The quantised bytes of one scale block of a row: the layer's quantiser's rule
// (device/quantize_rule.cuh), kVec bf16 values -> kVec / 2 packed bytes and a scale code.
template <EpRows R>
struct QuantBlock {
  static constexpr Format F = R == EpRows::nvfp4 ? Format::nvfp4 : Format::mxfp4;
  static constexpr int kVec = R == EpRows::nvfp4 ? 16 : 32;
  std::uint32_t words[kVec / 8];
  std::uint32_t code;
  __device__ __forceinline__ void make(const __nv_bfloat16* src, float gs) {
    float x[kVec];
#pragma unroll
    for (int v = 0; v < kVec / 8; ++v) {
      const uint4 raw = *reinterpret_cast<const uint4*>(src + 8 * v);
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __bfloat1622float2(h[q]);
        x[8 * v + 2 * q] = f.x, x[8 * v + 2 * q + 1] = f.y;
      }
    }
    float m = 0.0f;
    bool nan = false;
#pragma unroll
    for (int e = 0; e < kVec; ++e) m = fmaxf(m, fabsf(x[e])), nan |= x[e] != x[e];
    const float amax = nan ? __uint_as_float(0x7FC00000u) : m;
    code = F == Format::nvfp4 ? detail::quant::nv_scale_code_exact(amax, gs) : detail::quant::mx_scale_code(amax);
#pragma unroll
    for (int w = 0; w < kVec / 8; ++w) {
      std::uint32_t word = 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) word |= detail::quant::element_nibble<F>(x[8 * w + e], code, gs) << (4 * e);
      words[w] = word;
    }
  }
};

// Phase 2: every token's row once to each rank holding one of its experts, at offset(destination)
// + its place there, with the token's k slots' local ids (-1 for the slots whose experts are
// elsewhere) -- the pairs' (rank, row) noted here for the combine; then ids -1 past this rank's
// own received count.
template <EpRows R, typename Id>
__global__ void __launch_bounds__(kSendThreads) ep_send_kernel(SendParams p) {
  __shared__ int offset[kMaxWorld];
  __shared__ char* dest[kMaxWorld];
  __shared__ int row_at[kMaxWorld];
  __shared__ int dests;
  if (threadIdx.x < p.world) {  // rows ranks before this one send to destination d come first
    const int* counts = reinterpret_cast<const int*>(p.peers.base[threadIdx.x] + p.at.counts);
    int before = 0;
    for (int s = 0; s < p.rank; ++s) before += counts[s];
    offset[threadIdx.x] = before;
  }
  {
    const int total = own_total(p);
    if (blockIdx.x == 0 && threadIdx.x == 0) reinterpret_cast<int*>(p.peers.base[p.rank] + p.at.counts)[kMaxWorld] = total;
    int* ids = reinterpret_cast<int*>(p.peers.base[p.rank] + p.at.ids);
    const long long slots = static_cast<long long>(p.capacity) * p.k;
    for (long long r = static_cast<long long>(total) * p.k + blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
         r < slots; r += static_cast<long long>(gridDim.x) * blockDim.x)
      ids[r] = -1;
  }
  __syncthreads();
  const Id* ids = static_cast<const Id*>(p.ids);
  const int H = p.hidden;
  const int lane = static_cast<int>(threadIdx.x);
  for (int t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    if (threadIdx.x < 32) {  // warp 0: lane j < k is the token's slot j
      const long long i = static_cast<long long>(t) * p.k + lane;
      int d = -1, r = 0, local_id = -1;
      if (lane < p.k) {
        d = destination(ids, i, p.experts, p.local);
        const int s = p.slot[i];
        // (a slot not placed for this destination: the ids changed since send_counts -- the pair
        // gets no row)
        if (d >= 0 && (s < 0 || (s & 7) != d)) d = -1;
        if (d >= 0) r = offset[d] + (s >> 3), local_id = static_cast<int>(static_cast<long long>(ids[i]) - static_cast<long long>(d) * p.local);
        p.pair_row[i] = d >= 0 ? make_int2(d, r) : make_int2(-1, -1);
      }
      unsigned mask = __reduce_or_sync(0xFFFFFFFFu, d >= 0 ? 1u << d : 0u);
      int n = 0;
      while (mask != 0) {
        const int q = __ffs(mask) - 1;
        mask &= mask - 1;
        const int from = __ffs(__ballot_sync(0xFFFFFFFFu, d == q)) - 1;
        const int row = __shfl_sync(0xFFFFFFFFu, r, from);
        char* base = p.peers.base[q];
        if (lane < p.k) reinterpret_cast<int*>(base + p.at.ids)[static_cast<long long>(row) * p.k + lane] = d == q ? local_id : -1;
        if (lane == 0) dest[n] = base, row_at[n] = row;
        ++n;
      }
      if (lane == 0) dests = n;
    }
    __syncthreads();
    const int nd = dests;
    const __nv_bfloat16* x = p.x + t * p.ldx;
    if constexpr (R == EpRows::bf16) {
      for (int c = threadIdx.x; c < H / 8; c += blockDim.x) {
        const uint4 v = *reinterpret_cast<const uint4*>(x + 8 * c);
        for (int j = 0; j < nd; ++j)
          reinterpret_cast<uint4*>(dest[j] + p.at.rows)[static_cast<long long>(row_at[j]) * (H / 8) + c] = v;
      }
    } else {
      // The row is quantised into shared memory once, then copied to each destination with the
      // widest stores the row's bytes allow (16-byte packed chunks; scales 16, 8, 4 or 2 bytes):
      // remote writes of a few bytes each would cost NVLink a transaction apiece.
      constexpr int kVec = QuantBlock<R>::kVec;
      const int blocks = H / kVec;
      extern __shared__ uint4 stage[];  // packed [H / 2] bytes, then scales [blocks] (16-byte padded)
      char* sp = reinterpret_cast<char*>(stage);
      std::uint8_t* ss = reinterpret_cast<std::uint8_t*>(sp + H / 2);
      for (int b = threadIdx.x; b < blocks; b += blockDim.x) {
        QuantBlock<R> q;
        q.make(x + b * kVec, p.gs);
        if constexpr (kVec == 16) *reinterpret_cast<uint2*>(sp + b * 8) = make_uint2(q.words[0], q.words[1]);
        else *reinterpret_cast<uint4*>(sp + b * 16) = make_uint4(q.words[0], q.words[1], q.words[2], q.words[3]);
        ss[b] = static_cast<std::uint8_t>(q.code);
      }
      __syncthreads();
      const int chunks = H / 32;  // 16-byte chunks of the packed row (H % 64 == 0)
      for (int u = threadIdx.x; u < nd * chunks; u += blockDim.x) {
        const int j = u / chunks, c = u - j * chunks;
        reinterpret_cast<uint4*>(dest[j] + p.at.packed + static_cast<long long>(row_at[j]) * (H / 2))[c] = stage[c];
      }
      auto copy_scales = [&](auto word) {  // blocks % sizeof(word) == 0: every row's scales aligned to it
        using W = decltype(word);
        const int n = blocks / static_cast<int>(sizeof(W));
        for (int u = threadIdx.x; u < nd * n; u += blockDim.x) {
          const int j = u / n, c = u - j * n;
          reinterpret_cast<W*>(dest[j] + p.at.scales + static_cast<long long>(row_at[j]) * blocks)[c] =
              reinterpret_cast<const W*>(ss)[c];
        }
      };
      if (blocks % 16 == 0) copy_scales(uint4{});
      else if (blocks % 8 == 0) copy_scales(uint2{});
      else if (blocks % 4 == 0) copy_scales(std::uint32_t{});
      else copy_scales(std::uint16_t{});  // (H % 64 == 0: blocks is even)
    }
    __syncthreads();  // dest / row_at are the next token's
  }
}

// Phase 4's rows: pair i's expert output where its expert's rank left it -- the row of that rank's
// y that its row_of names for (received row, slot), both read over NVLink for the other ranks (the
// lanes of a warp on one token ask for the same row_of entry: one load per warp, two where a warp
// spans two tokens); null for a pair without
// one (its ids changed since phase 1, or that rank's layer has not written row_of for this step's
// rows: an entry outside y).
struct PeerRows {
  Peers peers;
  std::size_t y_at, row_of_at;
  int hidden, k, y_rows;
  const int2* pair_row;
  __device__ __forceinline__ const __nv_bfloat16* operator()(long long i) const {
    const int2 at = pair_row[i];
    if (at.x < 0) return nullptr;
    const char* base = peers.base[at.x];
    const int row = reinterpret_cast<const int*>(base + row_of_at)[static_cast<long long>(at.y) * k + i % k];
    if (row < 0 || row >= y_rows) return nullptr;
    return reinterpret_cast<const __nv_bfloat16*>(base + y_at) + static_cast<long long>(row) * hidden;
  }
};

[[noreturn]] void fail(const char* argument, const std::string& message) { throw Error(argument, -1, message); }

void validate_config(const EpConfig& c) {
  if (c.world < 1 || c.world > kMaxWorld) fail("config.world", "must be in 1..8, got " + std::to_string(c.world));
  if (c.rank < 0 || c.rank >= c.world)
    fail("config.rank", "must be in 0..world-1 = " + std::to_string(c.world - 1) + ", got " + std::to_string(c.rank));
  if (c.experts < 1 || c.experts % c.world != 0)
    fail("config.experts", "must be a positive multiple of world = " + std::to_string(c.world) + ", got " +
                               std::to_string(c.experts));
  if (c.topk < 1 || c.topk > kMaxTopk) fail("config.topk", "must be in 1..32, got " + std::to_string(c.topk));
  if (c.hidden < 64 || c.hidden % 64 != 0 || c.hidden > 65536)
    fail("config.hidden", "must be a multiple of 64 in 64..65536, got " + std::to_string(c.hidden));
  if (c.max_tokens < 1 || c.max_tokens >= (1 << 28))  // (send_counts notes place * 8 + rank in an int)
    fail("config.max_tokens", "must be in 1..2^28 - 1, got " + std::to_string(c.max_tokens));
  // (the local layer plans world * max_tokens tokens of k pairs: at most 2^30 pairs)
  if (std::int64_t{c.world} * c.max_tokens * c.topk > (std::int64_t{1} << 30))
    fail("config.max_tokens", "world * max_tokens * topk must be at most 2^30, got " +
                                  std::to_string(std::int64_t{c.world} * c.max_tokens * c.topk));
  if (c.rows == EpRows::nvfp4 && !(c.global_scale > 0.0f && c.global_scale < INFINITY))
    fail("config.global_scale", "must be a positive finite number, got " + std::to_string(c.global_scale));
}

}  // namespace

struct EpExchange::Impl {
  EpConfig config;
  Layout at;
  Peers peers{nullptr};
  DeviceInfo device;
  detail::DeviceAllocations memory;
  int* slot = nullptr;     // [max_tokens * k] phase 1's places (this rank's own)
  int2* pair_row = nullptr;  // [max_tokens * k] phase 2: (rank, received row) of each pair's token there
  float* ones = nullptr;   // [capacity * k] 1.0f
  int capacity = 0;        // received rows: W * max_tokens
  char** table = nullptr;  // [kMaxWorld] device copy of the buffer bases (Peers::base)
  std::vector<char*> bases;
  void check_step(const EpStepArgs& a, bool ids, bool hidden) const {
    const EpConfig& c = config;
    if (a.tokens < 0 || a.tokens > c.max_tokens)
      fail("tokens", "must be in 0..max_tokens = " + std::to_string(c.max_tokens) + ", got " + std::to_string(a.tokens));
    if (a.tokens == 0) return;
    if (ids && a.topk_ids == nullptr) fail("topk_ids", "null pointer");
    if (hidden) {
      const std::int64_t ld = a.ld_hidden == 0 ? c.hidden : a.ld_hidden;
      if (a.hidden == nullptr || reinterpret_cast<std::uintptr_t>(a.hidden) % 16 != 0)
        fail("hidden", "must be a 16-byte aligned device pointer");
      if (ld < c.hidden || ld % 8 != 0)
        fail("ld_hidden", "must be a multiple of 8 and >= hidden, got " + std::to_string(ld));
    }
  }
  char* own() const { return bases[config.rank]; }
};

std::size_t EpExchange::buffer_bytes(const EpConfig& config) {
  validate_config(config);
  return layout_of(config).total;
}

EpExchange::EpExchange(const EpConfig& config, std::span<void* const> buffers) : impl_(std::make_unique<Impl>()) {
  validate_config(config);
  Impl& p = *impl_;
  p.config = config;
  p.at = layout_of(config);
  p.device = device_info(config.device);
  p.config.device = p.device.index;
  p.capacity = config.world * config.max_tokens;
  if (static_cast<int>(buffers.size()) != config.world)
    fail("buffers", "needs one buffer per rank (" + std::to_string(config.world) + "), got " + std::to_string(buffers.size()));
  for (int r = 0; r < config.world; ++r) {
    if (buffers[r] == nullptr || reinterpret_cast<std::uintptr_t>(buffers[r]) % 256 != 0)
      fail("buffers", "buffer of rank " + std::to_string(r) + " must be a 256-byte aligned device pointer");
    p.bases.push_back(static_cast<char*>(buffers[r]));
  }
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, buffers[config.rank]) != cudaSuccess || attr.type != cudaMemoryTypeDevice ||
      attr.device != p.device.index) {
    (void)cudaGetLastError();
    fail("buffers", "this rank's buffer (rank " + std::to_string(config.rank) + ") is not device memory of device " +
                        std::to_string(p.device.index));
  }
  detail::DeviceGuard guard(p.device.index);
  p.slot = p.memory.allocate<int>(sizeof(int) * config.max_tokens * config.topk, "EpExchange workspace");
  p.pair_row = p.memory.allocate<int2>(sizeof(int2) * config.max_tokens * config.topk, "EpExchange workspace");
  // No place and no pair yet (-1): phases run out of order (a combine before any send_rows, or
  // send_rows before any send_counts) find nothing instead of uninitialised memory.
  FP4GEMM_CUDA_CHECK(cudaMemset(p.slot, 0xFF, sizeof(int) * config.max_tokens * config.topk), "EpExchange workspace");
  FP4GEMM_CUDA_CHECK(cudaMemset(p.pair_row, 0xFF, sizeof(int2) * config.max_tokens * config.topk), "EpExchange workspace");
  p.ones = p.memory.upload(std::vector<float>(static_cast<std::size_t>(p.capacity) * config.topk, 1.0f),
                           "EpExchange workspace");
  std::vector<char*> table(p.bases);
  table.resize(kMaxWorld, nullptr);
  p.table = p.memory.upload(table, "EpExchange workspace");
  p.peers.base = p.table;
  // This rank's own rows start empty (ids -1, no counts, row_of -1): a layer run on them before a
  // first step reads nothing, and a combine before any layer run finds no rows.
  const std::size_t slots = std::size_t{1} * p.capacity * config.topk;
  FP4GEMM_CUDA_CHECK(cudaMemset(p.own() + p.at.counts, 0, sizeof(int) * 2 * kMaxWorld), "buffers");
  FP4GEMM_CUDA_CHECK(cudaMemset(p.own() + p.at.ids, 0xFF, sizeof(int) * slots), "buffers");
  FP4GEMM_CUDA_CHECK(cudaMemset(p.own() + p.at.row_of, 0xFF, sizeof(int) * slots), "buffers");
  FP4GEMM_CUDA_CHECK(cudaDeviceSynchronize(), "buffers");
}

EpExchange::~EpExchange() = default;
EpExchange::EpExchange(EpExchange&&) noexcept = default;
EpExchange& EpExchange::operator=(EpExchange&&) noexcept = default;

static const EpExchange::Impl& checked(const std::unique_ptr<EpExchange::Impl>& p) {
  if (!p) throw Error("exchange", -1, "used after being moved from");
  return *p;
}

void EpExchange::send_counts(const EpStepArgs& a, cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  p.check_step(a, true, false);
  const EpConfig& c = p.config;
  detail::DeviceGuard guard(p.device.index);
  const int local = c.experts / c.world;
  if (a.ids_int64)
    ep_count_kernel<long long><<<1, kCountThreads, 0, stream>>>(static_cast<const long long*>(a.topk_ids), a.tokens,
                                                                c.topk, c.experts, local, c.world, c.rank, p.peers,
                                                                p.at.counts, p.slot);
  else
    ep_count_kernel<int><<<1, kCountThreads, 0, stream>>>(static_cast<const int*>(a.topk_ids), a.tokens, c.topk,
                                                          c.experts, local, c.world, c.rank, p.peers, p.at.counts,
                                                          p.slot);
  FP4GEMM_CUDA_CHECK(cudaGetLastError(), "send_counts");
}

void EpExchange::send_rows(const EpStepArgs& a, cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  p.check_step(a, true, true);
  const EpConfig& c = p.config;
  detail::DeviceGuard guard(p.device.index);
  SendParams s;
  s.x = static_cast<const __nv_bfloat16*>(a.hidden);
  s.ldx = a.ld_hidden == 0 ? c.hidden : a.ld_hidden;
  s.ids = a.topk_ids, s.slot = p.slot, s.pair_row = p.pair_row;
  s.tokens = a.tokens, s.k = c.topk, s.experts = c.experts, s.local = c.experts / c.world;
  s.world = c.world, s.rank = c.rank, s.hidden = c.hidden, s.capacity = p.capacity;
  s.gs = c.rows == EpRows::nvfp4 ? c.global_scale : 1.0f;
  s.peers = p.peers, s.at = p.at;
  // At least a wave (the padding ids are written by the whole grid), a block per token beyond.
  const unsigned grid = static_cast<unsigned>(std::clamp(a.tokens, p.device.multiprocessors, 8 * p.device.multiprocessors));
  auto go = [&](auto rows_tag, auto id_tag) {
    constexpr EpRows R = decltype(rows_tag)::value;
    const std::size_t stage = R == EpRows::bf16 ? 0 : (c.hidden / 2 + (c.hidden / vec_of(R) + 15) / 16 * 16);
    ep_send_kernel<R, decltype(id_tag)><<<grid, kSendThreads, stage, stream>>>(s);
  };
  using B = std::integral_constant<EpRows, EpRows::bf16>;
  using N = std::integral_constant<EpRows, EpRows::nvfp4>;
  using M = std::integral_constant<EpRows, EpRows::mxfp4>;
  auto with_ids = [&](auto rows_tag) {
    if (a.ids_int64) go(rows_tag, 0LL);
    else go(rows_tag, 0);
  };
  if (c.rows == EpRows::bf16) with_ids(B{});
  else if (c.rows == EpRows::nvfp4) with_ids(N{});
  else with_ids(M{});
  FP4GEMM_CUDA_CHECK(cudaGetLastError(), "send_rows");
}

EpReceived EpExchange::received() const {
  const Impl& p = checked(impl_);
  EpReceived r;
  r.capacity = p.capacity;
  r.topk = p.config.topk;
  r.counts = reinterpret_cast<const int*>(p.own() + p.at.counts);
  r.count = r.counts + kMaxWorld;
  r.ids = reinterpret_cast<const int*>(p.own() + p.at.ids);
  r.ones = p.ones;
  if (p.config.rows == EpRows::bf16) {
    r.rows = p.own() + p.at.rows;
  } else {
    r.packed = p.own() + p.at.packed;
    r.scales = p.own() + p.at.scales;
  }
  r.y = p.own() + p.at.y;
  r.row_of = reinterpret_cast<int*>(p.own() + p.at.row_of);
  return r;
}

void EpExchange::combine(const EpStepArgs& a, cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  p.check_step(a, true, false);
  const EpConfig& c = p.config;
  if (a.tokens == 0) return;
  if (a.topk_weights == nullptr) fail("topk_weights", "null pointer");
  const std::int64_t ld_out = a.ld_out == 0 ? c.hidden : a.ld_out;
  if (a.out == nullptr || reinterpret_cast<std::uintptr_t>(a.out) % 16 != 0) fail("out", "must be a 16-byte aligned device pointer");
  if (ld_out < c.hidden || ld_out % 8 != 0) fail("ld_out", "must be a multiple of 8 and >= hidden, got " + std::to_string(ld_out));
  detail::DeviceGuard guard(p.device.index);
  const std::int64_t pairs = std::int64_t{a.tokens} * c.topk;
  detail::check_device_buffer("out", -1, a.out, ((std::int64_t{a.tokens} - 1) * ld_out + c.hidden) * 2, p.device.index);
  detail::check_device_buffer("topk_ids", -1, a.topk_ids, pairs * (a.ids_int64 ? 8 : 4), p.device.index);
  detail::check_device_buffer("topk_weights", -1, a.topk_weights, pairs * (a.weights_bf16 ? 2 : 4), p.device.index);
  const PeerRows rows{p.peers, p.at.y, p.at.row_of, c.hidden, c.topk, p.capacity * c.topk, p.pair_row};
  const unsigned grid = detail::combine_grid(a.tokens, c.hidden, p.device.multiprocessors);
  auto go = [&](auto id_tag, auto wt_tag) {
    using Id = decltype(id_tag);
    using Wt = decltype(wt_tag);
    detail::combine_kernel<Id, Wt, PeerRows, false><<<grid, 256, 0, stream>>>(
        rows, c.hidden, static_cast<const Id*>(a.topk_ids), static_cast<const Wt*>(a.topk_weights), c.topk, c.experts,
        a.tokens, static_cast<__nv_bfloat16*>(a.out), ld_out, nullptr, nullptr, 0);
  };
  if (a.ids_int64) {
    if (a.weights_bf16) go(0LL, __nv_bfloat16{}); else go(0LL, 0.0f);
  } else {
    if (a.weights_bf16) go(0, __nv_bfloat16{}); else go(0, 0.0f);
  }
  FP4GEMM_CUDA_CHECK(cudaGetLastError(), "combine");
}

const EpConfig& EpExchange::config() const { return checked(impl_).config; }

std::string EpExchange::describe() const {
  const Impl& p = checked(impl_);
  const EpConfig& c = p.config;
  std::ostringstream os;
  os << "EpExchange rank " << c.rank << " of " << c.world << ": " << c.experts << " experts (" << c.experts / c.world
     << " here), top-" << c.topk << ", H " << c.hidden << ", up to " << c.max_tokens << " tokens per rank; rows travel as "
     << (c.rows == EpRows::bf16 ? "bf16" : c.rows == EpRows::nvfp4 ? "NVFP4 (packed e2m1 + E4M3 scales)" : "MXFP4 (packed e2m1 + UE8M0 scales)")
     << "; each token sent once per rank holding one of its experts; receive capacity " << p.capacity
     << " rows; exchange buffer " << p.at.total / 1024 << " KiB per rank";
  return os.str();
}

}  // namespace fp4gemm
