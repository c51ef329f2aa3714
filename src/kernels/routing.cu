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
// Both walks load kBatch groups of 32 ids before using them, and routings of more than 2048 ids take
// 32 warps (when their counters fit the default 48 KB of shared memory: E <= 334), smaller ones 8
// (the scan over more threads would only add to a launch-bound kernel): with 8 warps and one load
// per step, T 4096 x top-8 (32768 ids) took 139 us on an H200, now 62 us. What bounds it now is
// its one SM's scattered 4-byte stores of `gather`, ~1.9 ns per id.
#include <cub/block/block_scan.cuh>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/routing.hpp"

namespace fp4gemm {

namespace {

constexpr int kBatch = 4;  // groups of 32 ids loaded per warp before they are used

template <typename Id, int kThreads>
__global__ void __launch_bounds__(kThreads) align_routing_kernel(const Id* __restrict__ ids, long long n, int k,
                                                                  int experts, int* __restrict__ offsets,
                                                                  int* __restrict__ gather,
                                                                  long long* __restrict__ order,
                                                                  int* __restrict__ row_of,
                                                                  const int* __restrict__ token_count) {
  constexpr int kWarps = kThreads / 32;
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  extern __shared__ int cursor[];  // [kWarps][buckets]: counts, then each warp's next slot
  const int buckets = experts + 2;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int i = tid; i < kWarps * buckets; i += kThreads) cursor[i] = 0;
  __syncthreads();

  // 32-bit index arithmetic (n < 2^31, validated): no 64-bit division per id.
  const int n32 = static_cast<int>(n);
  const int per = (n32 + kWarps - 1) / kWarps;
  const int lo = min(n32, warp * per), hi = min(n32, lo + per);
  // Pairs of tokens at or past *token_count are absent: the last bucket, their ids unread.
  const int present = token_count != nullptr ? static_cast<int>(min(n, static_cast<long long>(max(*token_count, 0)) * k)) : n32;
  const unsigned ku = static_cast<unsigned>(k);
  // Bucket of index i (-1 past the warp's range).
  // (indices as unsigned: base + 127 stays exact for any n < 2^31)
  // The layer's variant (row_of, no order) needs the slots of routed ids only: ids outside [0, E)
  // and absent tokens are counted (they still take their buckets' slots) but get no stores, and
  // the absent ones are not walked at all. (Expert parallelism's received rows are half -1 ids on
  // 2 ranks, and the rows past the received count absent.)
  const bool routed_only = row_of != nullptr && order == nullptr;
  const int live = routed_only ? min(hi, max(lo, present)) : hi;  // [lo, live): walked
  auto bucket_of = [&](unsigned i) {
    if (i >= static_cast<unsigned>(live)) return -1;
    if (i >= static_cast<unsigned>(present)) return experts + 1;
    const long long id = static_cast<long long>(ids[i]);
    return id < 0 ? 0 : id >= experts ? experts + 1 : static_cast<int>(id) + 1;
  };
  int* mine = cursor + warp * buckets;
  for (int base = lo; base < live; base += 32 * kBatch) {
    int b[kBatch];
#pragma unroll
    for (int q = 0; q < kBatch; ++q) b[q] = bucket_of(static_cast<unsigned>(base) + 32 * q + lane);
#pragma unroll
    for (int q = 0; q < kBatch; ++q)
      if (b[q] >= 0) atomicAdd(&mine[b[q]], 1);
  }
  if (lane == 0 && hi > live) atomicAdd(&mine[experts + 1], hi - live);  // (the absent ones, counted at once)
  __syncthreads();

  // 2. Thread t scans a run of consecutive buckets (all warps' counts of each).
  const int run = (buckets + kThreads - 1) / kThreads, b0 = min(buckets, tid * run), b1 = min(buckets, b0 + run);
  int sum = 0;
  for (int b = b0; b < b1; ++b)
    for (int w = 0; w < kWarps; ++w) sum += cursor[w * buckets + b];
  int at = 0;
  Scan(scan_storage).ExclusiveSum(sum, at);
  for (int b = b0; b < b1; ++b) {
    if (b >= 1) offsets[b - 1] = at;  // offsets[e] = ids below e = first slot of bucket e + 1
    for (int w = 0; w < kWarps; ++w) {
      const int c = cursor[w * buckets + b];
      cursor[w * buckets + b] = at;
      at += c;
    }
  }
  __syncthreads();

  // 3. Stable placement, kBatch groups of 32 ids per load round, the groups in index order.
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
      const int first = valid ? mine[b] : 0;
      if (valid && !(routed_only && (b == 0 || b == experts + 1))) {
        const int slot = first + rank;
        gather[slot] = static_cast<int>(static_cast<unsigned>(i) / ku);
        if (order != nullptr) order[slot] = i;
        if (row_of != nullptr) row_of[i] = slot;
      }
      __syncwarp();
      if (valid && rank == 0) mine[b] = first + __popc(group);
      __syncwarp();
    }
  }
}

}  // namespace

namespace detail {

cudaError_t launch_align_routing_kernel(const void* topk_ids, bool ids_int64, std::int64_t count, int k, int experts,
                                        int* offsets, int* gather, std::int64_t* order, int* row_of,
                                        const int* token_count, cudaStream_t stream) {
  auto* ord = reinterpret_cast<long long*>(order);
  auto go = [&](auto threads, auto id_tag) {
    constexpr int kThreads = decltype(threads)::value;
    using Id = decltype(id_tag);
    const std::size_t smem = static_cast<std::size_t>(kThreads / 32) * (experts + 2) * sizeof(int);
    align_routing_kernel<Id, kThreads><<<1, kThreads, smem, stream>>>(static_cast<const Id*>(topk_ids), count, k,
                                                                     experts, offsets, gather, ord, row_of,
                                                                     token_count);
  };
  // (the counters and the scan's static storage, ~5 KB, within the default 48 KB)
  const bool wide = count > 2048 && std::size_t{32} * (experts + 2) * sizeof(int) <= 42 * 1024;
  if (wide) {
    if (ids_int64) go(std::integral_constant<int, 1024>{}, 0LL); else go(std::integral_constant<int, 1024>{}, 0);
  } else {
    if (ids_int64) go(std::integral_constant<int, 256>{}, 0LL); else go(std::integral_constant<int, 256>{}, 0);
  }
  return cudaGetLastError();
}

}  // namespace detail

}  // namespace fp4gemm
