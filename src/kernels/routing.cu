// fp4gemm::align_routing: top-k expert ids -> expert offsets, gather index and order, in one
// single-block kernel (a stable counting sort).
//
// W warps (kThreads / 32); warp w owns the contiguous index range [w * n / W, (w + 1) * n / W).
// Buckets: 0 for negative ids, e + 1 for expert e, E + 1 for ids >= E.
//  1. Each warp counts its range's buckets (shared-memory integer atomics: the counts do not
//     depend on their order).
//  2. An exclusive scan over (bucket, warp) in bucket-major order gives each warp's first slot
//     per bucket; offsets[e] = the first slot of bucket e + 1.
//  3. Each warp walks its range in order, 32 ids at a time: lanes with equal buckets find each
//     other (__match_any_sync), take consecutive slots in lane order, and the group's first lane
//     advances the warp's cursor. Slots therefore follow the index order within each bucket:
//     stable, the same on every run and for any W.
// Both walks load kBatch groups of 32 ids before using them, and routings of more than
// kRoutingWideBlockMinIds (1024) ids take 32 warps (when their counters fit the default 48 KB of
// shared memory: E <= 334), smaller ones 8 (the scan over more threads would only add to a
// launch-bound kernel): with 8 warps and one load
// per step, T 4096 x top-8 (32768 ids) took 139 us on an H200, now 62 us. What bounds it now is
// its one SM's scattered 4-byte stores of `gather`, ~1.9 ns per id.
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "device/ptx/ptx.cuh"
#include "kernels/launch_config.hpp"
#include "kernels/routing.hpp"

namespace fp4gemm {

namespace {

constexpr int kBatch = 4;  // groups of 32 ids loaded per warp before they are used

// One warp's index range [lo, hi) of the routing (warp g of G takes the g-th of G equal ranges,
// so the ranges follow the warps' order) and its steps 1 and 3.
template <typename Id>
struct WarpRange {
  const Id* ids;
  int experts, k, lo, hi, live, present;
  bool routed_only;

  // Warp g of G over n ids; pairs of tokens at or past *token_count are absent.
  // 32-bit index arithmetic (n < 2^31, validated): no 64-bit division per id.
  __device__ __forceinline__ WarpRange(const Id* ids_, long long n, int k_, int experts_, int g, int G, const int* token_count,
                       bool routed_only_)
      : ids(ids_), experts(experts_), k(k_), routed_only(routed_only_) {
    const int n32 = static_cast<int>(n);
    const int per = static_cast<int>((static_cast<long long>(n32) + G - 1) / G);
    lo = static_cast<int>(min(static_cast<long long>(n32), static_cast<long long>(g) * per));
    hi = min(n32, lo + per);
    present = token_count != nullptr ? static_cast<int>(min(n, static_cast<long long>(max(*token_count, 0)) * k)) : n32;
    // The layer's variant (row_of, no order) needs the slots of routed ids only: ids outside
    // [0, E) and absent tokens are counted (they still take their buckets' slots) but get no
    // stores, and the absent ones are not walked at all. (Expert parallelism's received rows are
    // half -1 ids on 2 ranks, and the rows past the received count absent.)
    live = routed_only ? min(hi, max(lo, present)) : hi;  // [lo, live): walked
  }
  // Bucket of index i (-1 past the walked range): 0 for negative ids, e + 1 for expert e, E + 1
  // for ids >= E and absent pairs. (indices as unsigned: base + 127 stays exact for any n < 2^31)
  __device__ __forceinline__ int bucket_of(unsigned i) const {
    if (i >= static_cast<unsigned>(live)) return -1;
    if (i >= static_cast<unsigned>(present)) return experts + 1;
    const long long id = static_cast<long long>(ids[i]);
    return id < 0 ? 0 : id >= experts ? experts + 1 : static_cast<int>(id) + 1;
  }
  // Step 1: adds the range's bucket counts to counts[] (shared memory; integer atomics, so the
  // counts do not depend on their order and warps may share one array).
  __device__ __forceinline__ void count(int* counts) const {
    const int lane = threadIdx.x % 32;
    for (int base = lo; base < live; base += 32 * kBatch) {
      int b[kBatch];
#pragma unroll
      for (int q = 0; q < kBatch; ++q) b[q] = bucket_of(static_cast<unsigned>(base) + 32 * q + lane);
#pragma unroll
      for (int q = 0; q < kBatch; ++q)
        if (b[q] >= 0) atomicAdd(&counts[b[q]], 1);
    }
    if (lane == 0 && hi > live) atomicAdd(&counts[experts + 1], hi - live);  // (the absent ones, counted at once)
  }
  // Step 3: stable placement from cursor[b] (this warp's first slot per bucket, advanced as it
  // goes), kBatch groups of 32 ids per load round, the groups in index order.
  __device__ __forceinline__ void place(int* cursor, int* __restrict__ gather, long long* __restrict__ order,
                        int* __restrict__ row_of) const {
    const int lane = threadIdx.x % 32;
    const unsigned ku = static_cast<unsigned>(k);
    for (int base = lo; base < live; base += 32 * kBatch) {
      int bs[kBatch];
#pragma unroll
      for (int q = 0; q < kBatch; ++q) bs[q] = bucket_of(static_cast<unsigned>(base) + 32 * q + lane);
#pragma unroll
      for (int q = 0; q < kBatch; ++q) {
        const int b = bs[q];
        const int i = base + 32 * q + lane;  // (< hi wherever it is used: b >= 0)
        const bool valid = b >= 0;
        const unsigned group = __match_any_sync(0xFFFFFFFFu, b);
        const int rank = __popc(group & ((1u << lane) - 1u));
        const int first = valid ? cursor[b] : 0;
        if (valid && !(routed_only && (b == 0 || b == experts + 1))) {
          const int slot = first + rank;
          gather[slot] = static_cast<int>(static_cast<unsigned>(i) / ku);
          if (order != nullptr) order[slot] = i;
          if (row_of != nullptr) row_of[i] = slot;
        }
        __syncwarp();
        if (valid && rank == 0) cursor[b] = first + __popc(group);
        __syncwarp();
      }
    }
  }
};

// Step 1 per warp: zeroes cursor [kWarps][buckets] and counts warp w's range into its row w (every
// thread of the block calls it; it ends with a barrier).
template <int kThreads, typename Id>
__device__ __forceinline__ void count_per_warp(int* cursor, int buckets, const WarpRange<Id>& r) {
  for (int i = threadIdx.x; i < (kThreads / 32) * buckets; i += kThreads) cursor[i] = 0;
  __syncthreads();
  r.count(cursor + (threadIdx.x / 32) * buckets);
  __syncthreads();
}

// Step 2 over `takers` ordered takers (warps of one block, or CTAs of the grid) per bucket:
// counts[t * buckets + b] becomes taker t's first slot in bucket b (bucket-major, then taker
// order: stable), offsets[e] = the first slot of bucket e + 1. One block; every thread calls it.
template <int kThreads>
__device__ __forceinline__ void scan_buckets(int* counts, int takers, int buckets, int* __restrict__ offsets) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const int tid = threadIdx.x;
  // Thread t scans a run of consecutive buckets (all takers' counts of each).
  const int run = (buckets + kThreads - 1) / kThreads, b0 = min(buckets, tid * run), b1 = min(buckets, b0 + run);
  int sum = 0;
  for (int b = b0; b < b1; ++b)
    for (int w = 0; w < takers; ++w) sum += counts[w * buckets + b];
  int at = 0;
  Scan(scan_storage).ExclusiveSum(sum, at);
  for (int b = b0; b < b1; ++b) {
    if (b >= 1) offsets[b - 1] = at;  // offsets[e] = ids below e = first slot of bucket e + 1
    for (int w = 0; w < takers; ++w) {
      const int c = counts[w * buckets + b];
      counts[w * buckets + b] = at;
      at += c;
    }
  }
}

// The whole routing in one block (small routings: one launch).
template <typename Id, int kThreads>
__global__ void __launch_bounds__(kThreads, 1) align_routing_kernel(const Id* __restrict__ ids, long long n, int k,
                                                                  int experts, int* __restrict__ offsets,
                                                                  int* __restrict__ gather,
                                                                  long long* __restrict__ order,
                                                                  int* __restrict__ row_of,
                                                                  const int* __restrict__ token_count) {
  constexpr int kWarps = kThreads / 32;
  ptx::launch_dependents();  // (the layer's pre-pass may start; it waits for this grid before reading its output)
  extern __shared__ int cursor[];  // [kWarps][buckets]: counts, then each warp's next slot
  const int buckets = experts + 2, warp = threadIdx.x / 32;
  const WarpRange<Id> r(ids, n, k, experts, warp, kWarps, token_count, row_of != nullptr && order == nullptr);
  count_per_warp<kThreads>(cursor, buckets, r);
  scan_buckets<kThreads>(cursor, kWarps, buckets, offsets);
  __syncthreads();
  r.place(cursor + warp * buckets, gather, order, row_of);
}

// Large routings over a grid of C CTAs (the single block is bound by its one SM's scattered
// stores): (1) each CTA counts its range per bucket into cta_counts[b][c]; (2) one block scans
// them (bucket-major, then CTA order) into each CTA's first slot per bucket and writes offsets;
// (3) each CTA counts again per warp, turns its first slots into each warp's, and places. The
// ranges are the single block's split over C x W warps, so the slots are the same: stable.
// (2) and (3) are programmatic dependents of the launch before them: each kernel lets the next
// one start at once, and waits for its predecessor (griddepcontrol.wait: that grid complete, its
// writes visible) before it reads what that one wrote -- (3) counts its ids first, which only
// the caller wrote. Every thread of a dependent reaches its wait, so when a dependent completes,
// every launch before it has (the layer's GEMM reads the offsets on that basis: the pre-pass
// lets it start only after waiting for the routing).
template <typename Id, int kThreads>
__global__ void __launch_bounds__(kThreads) routing_grid_count(const Id* __restrict__ ids, long long n, int k,
                                                                int experts, int* __restrict__ cta_counts,
                                                                bool routed_only, const int* __restrict__ token_count) {
  constexpr int kWarps = kThreads / 32;
  ptx::launch_dependents();
  extern __shared__ int counts[];  // [buckets]
  const int buckets = experts + 2;
  for (int i = threadIdx.x; i < buckets; i += kThreads) counts[i] = 0;
  __syncthreads();
  const int g = blockIdx.x * kWarps + threadIdx.x / 32, G = gridDim.x * kWarps;
  WarpRange<Id>(ids, n, k, experts, g, G, token_count, routed_only).count(counts);
  __syncthreads();
  for (int b = threadIdx.x; b < buckets; b += kThreads) cta_counts[static_cast<long long>(b) * gridDim.x + blockIdx.x] = counts[b];
}

// Step 2 of the grid form: the counts are stored bucket-major ([b][c]), so the slots' order
// (bucket, then CTA) is a plain exclusive scan of the array, in tiles with a running carry;
// offsets[e] = the first slot of bucket e + 1 = the scanned value at (e + 1) * ctas.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) routing_grid_scan(int* __restrict__ cta_counts, int ctas, int experts,
                                                               int* __restrict__ offsets) {
  constexpr int kItems = 4;
  ptx::launch_dependents();
  ptx::wait_prerequisites();  // the counts
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  const long long total = static_cast<long long>(experts + 2) * ctas;
  int carry = 0;
  for (long long base = 0; base < total; base += kThreads * kItems) {
    int v[kItems];
    const long long i0 = base + static_cast<long long>(threadIdx.x) * kItems;
#pragma unroll
    for (int q = 0; q < kItems; ++q) v[q] = i0 + q < total ? cta_counts[i0 + q] : 0;
    int tile_sum = 0;
    Scan(scan_storage).ExclusiveSum(v, v, tile_sum);
#pragma unroll
    for (int q = 0; q < kItems; ++q) {
      const long long i = i0 + q;
      if (i >= total) continue;
      cta_counts[i] = carry + v[q];
      if (i % ctas == 0 && i >= ctas) offsets[i / ctas - 1] = carry + v[q];
    }
    carry += tile_sum;  // (every thread holds the tile's sum)
    __syncthreads();    // (scan_storage is reused by the next tile)
  }
}

template <typename Id, int kThreads>
__global__ void __launch_bounds__(kThreads) routing_grid_place(const Id* __restrict__ ids, long long n, int k,
                                                                int experts, const int* __restrict__ cta_first,
                                                                int* __restrict__ gather, long long* __restrict__ order,
                                                                int* __restrict__ row_of,
                                                                const int* __restrict__ token_count) {
  constexpr int kWarps = kThreads / 32;
  extern __shared__ int cursor[];  // [kWarps][buckets]: counts, then each warp's next slot
  const int buckets = experts + 2, warp = threadIdx.x / 32;
  const int g = blockIdx.x * kWarps + warp, G = gridDim.x * kWarps;
  ptx::launch_dependents();
  const WarpRange<Id> r(ids, n, k, experts, g, G, token_count, row_of != nullptr && order == nullptr);
  count_per_warp<kThreads>(cursor, buckets, r);
  ptx::wait_prerequisites();  // the scan's first slots
  for (int b = threadIdx.x; b < buckets; b += kThreads) {  // the CTA's first slot, then each warp's
    int at = cta_first[static_cast<long long>(b) * gridDim.x + blockIdx.x];
    for (int w = 0; w < kWarps; ++w) {
      const int c = cursor[w * buckets + b];
      cursor[w * buckets + b] = at;
      at += c;
    }
  }
  __syncthreads();
  r.place(cursor + warp * buckets, gather, order, row_of);
}

}  // namespace

namespace detail {

int routing_grid_ctas(std::int64_t count) {
  if (count < kRoutingGridMinIds) return 0;
  const std::int64_t ctas = (count + kRoutingIdsPerCta - 1) / kRoutingIdsPerCta;
  return static_cast<int>(std::clamp<std::int64_t>(ctas, kRoutingGridMinCtas, kRoutingGridMaxCtas));
}

cudaError_t launch_align_routing_kernel(const void* topk_ids, bool ids_int64, std::int64_t count, int k, int experts,
                                        int* offsets, int* gather, std::int64_t* order, int* row_of,
                                        const int* token_count, cudaStream_t stream, int* grid_scratch) {
  auto* ord = reinterpret_cast<long long*>(order);
  const int ctas = grid_scratch != nullptr ? routing_grid_ctas(count) : 0;
  if (ctas > 0) {  // a grid of CTAs of 8 warps, each warp ~kRoutingIdsPerCta / 8 ids
    constexpr int kThreads = 256;
    const std::size_t buckets = static_cast<std::size_t>(experts) + 2;
    const bool routed_only = row_of != nullptr && order == nullptr;
    auto go = [&](auto id_tag) {
      using Id = decltype(id_tag);
      const Id* ids = static_cast<const Id*>(topk_ids);
      routing_grid_count<Id, kThreads><<<ctas, kThreads, buckets * sizeof(int), stream>>>(
          ids, count, k, experts, grid_scratch, routed_only, token_count);
      if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
      const LaunchConfig scan(dim3(1), dim3(1024), 0, stream);  // steps 2 and 3: programmatic dependents
      if (const cudaError_t e =
              cudaLaunchKernelEx(&scan.config, routing_grid_scan<1024>, grid_scratch, ctas, experts, offsets);
          e != cudaSuccess)
        return e;
      const LaunchConfig place(dim3(ctas), dim3(kThreads), (kThreads / 32) * buckets * sizeof(int), stream);
      return cudaLaunchKernelEx(&place.config, routing_grid_place<Id, kThreads>, ids, count, k, experts,
                                static_cast<const int*>(grid_scratch), gather, ord, row_of, token_count);
    };
    return ids_int64 ? go(0LL) : go(0);
  }
  auto go = [&](auto threads, auto id_tag) {
    constexpr int kThreads = decltype(threads)::value;
    using Id = decltype(id_tag);
    const std::size_t smem = static_cast<std::size_t>(kThreads / 32) * (experts + 2) * sizeof(int);
    align_routing_kernel<Id, kThreads><<<1, kThreads, smem, stream>>>(static_cast<const Id*>(topk_ids), count, k,
                                                                     experts, offsets, gather, ord, row_of,
                                                                     token_count);
  };
  // (the counters and the scan's static storage, ~5 KB, within the default 48 KB)
  const bool wide = count > kRoutingWideBlockMinIds && std::size_t{32} * (experts + 2) * sizeof(int) <= 42 * 1024;
  if (wide) {
    if (ids_int64) go(std::integral_constant<int, 1024>{}, 0LL); else go(std::integral_constant<int, 1024>{}, 0);
  } else {
    if (ids_int64) go(std::integral_constant<int, 256>{}, 0LL); else go(std::integral_constant<int, 256>{}, 0);
  }
  return cudaGetLastError();
}

}  // namespace detail

}  // namespace fp4gemm
