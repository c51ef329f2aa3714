// fp4gemm::EpExchange's kernels (kernels/ep.hpp; the buffer layout and the class are
// host/ep_exchange.cpp): they write the other ranks' exchange buffers directly (peer-mapped memory
// over NVLink), with the split sizes on the device.
#include "kernels/ep.hpp"

#include <cub/block/block_scan.cuh>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "device/quantize_rule.cuh"
#include "fp4gemm/fp4gemm.hpp"
#include "kernels/combine.cuh"

namespace fp4gemm {

namespace {

constexpr int kMaxWorld = detail::kEpMaxWorld;
constexpr int kCountThreads = 1024, kSendThreads = 256;
using Layout = detail::EpLayout;

int vec_of(EpRows r) { return r == EpRows::nvfp4 ? 16 : 32; }

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

}  // namespace

namespace detail {

cudaError_t launch_ep_count(const EpKernelArgs& e, const void* ids, bool ids_int64, int tokens, cudaStream_t stream) {
  const Peers peers{e.peers};
  const int local = e.experts / e.world;
  if (ids_int64)
    ep_count_kernel<long long><<<1, kCountThreads, 0, stream>>>(static_cast<const long long*>(ids), tokens, e.topk,
                                                                e.experts, local, e.world, e.rank, peers, e.at.counts,
                                                                e.slot);
  else
    ep_count_kernel<int><<<1, kCountThreads, 0, stream>>>(static_cast<const int*>(ids), tokens, e.topk, e.experts,
                                                          local, e.world, e.rank, peers, e.at.counts, e.slot);
  return cudaGetLastError();
}

cudaError_t launch_ep_send(const EpKernelArgs& e, const void* x, long long ldx, const void* ids, bool ids_int64,
                           int tokens, cudaStream_t stream) {
  SendParams s;
  s.x = static_cast<const __nv_bfloat16*>(x);
  s.ldx = ldx;
  s.ids = ids, s.slot = e.slot, s.pair_row = e.pair_row;
  s.tokens = tokens, s.k = e.topk, s.experts = e.experts, s.local = e.experts / e.world;
  s.world = e.world, s.rank = e.rank, s.hidden = e.hidden, s.capacity = e.capacity;
  s.gs = e.gs;
  s.peers = Peers{e.peers}, s.at = e.at;
  // At least a wave (the padding ids are written by the whole grid), a block per token beyond.
  const unsigned grid = static_cast<unsigned>(std::clamp(tokens, e.multiprocessors, 8 * e.multiprocessors));
  auto go = [&](auto rows_tag, auto id_tag) {
    constexpr EpRows R = decltype(rows_tag)::value;
    const std::size_t stage = R == EpRows::bf16 ? 0 : (e.hidden / 2 + (e.hidden / vec_of(R) + 15) / 16 * 16);
    ep_send_kernel<R, decltype(id_tag)><<<grid, kSendThreads, stage, stream>>>(s);
  };
  using B = std::integral_constant<EpRows, EpRows::bf16>;
  using N = std::integral_constant<EpRows, EpRows::nvfp4>;
  using M = std::integral_constant<EpRows, EpRows::mxfp4>;
  auto with_ids = [&](auto rows_tag) {
    if (ids_int64) go(rows_tag, 0LL);
    else go(rows_tag, 0);
  };
  if (e.rows == EpRows::bf16) with_ids(B{});
  else if (e.rows == EpRows::nvfp4) with_ids(N{});
  else with_ids(M{});
  return cudaGetLastError();
}

cudaError_t launch_ep_combine(const EpKernelArgs& e, const void* ids, bool ids_int64, const void* weights,
                              bool weights_bf16, int tokens, void* out, long long ld_out, cudaStream_t stream) {
  const PeerRows rows{Peers{e.peers}, e.at.y, e.at.row_of, e.hidden, e.topk, e.capacity * e.topk, e.pair_row};
  const unsigned grid = combine_grid(tokens, e.hidden, e.multiprocessors);
  auto go = [&](auto id_tag, auto wt_tag) {
    using Id = decltype(id_tag);
    using Wt = decltype(wt_tag);
    combine_kernel<Id, Wt, PeerRows, false><<<grid, 256, 0, stream>>>(
        rows, e.hidden, static_cast<const Id*>(ids), static_cast<const Wt*>(weights), e.topk, e.experts, tokens,
        static_cast<__nv_bfloat16*>(out), ld_out, nullptr, nullptr, 0);
  };
  if (ids_int64) {
    if (weights_bf16) go(0LL, __nv_bfloat16{}); else go(0LL, 0.0f);
  } else {
    if (weights_bf16) go(0, __nv_bfloat16{}); else go(0, 0.0f);
  }
  return cudaGetLastError();
}

}  // namespace detail

}  // namespace fp4gemm
