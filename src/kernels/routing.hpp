// The MoE routing's kernel (align_routing_kernel, kernels/routing.cu); the checks and the public
// entry points are host/routing.cpp. Internal.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp4gemm::detail {

// The stable counting sort, arguments already validated (host/routing.cpp): offsets [E + 1],
// gather [count], and order [count] (int64) or row_of [count] (int32) where non-null;
// token_count (device, may be null): pairs of tokens at or past it are absent. One launch of one
// block; or, with grid_scratch (device, routing_grid_scratch_ints(E) ints; its contents are not
// kept between runs) and at least kRoutingGridMinIds ids, three launches over a grid of CTAs
// (the same slots). Returns the launches' error.
cudaError_t launch_align_routing_kernel(const void* topk_ids, bool ids_int64, std::int64_t count, int k, int experts,
                                        int* offsets, int* gather, std::int64_t* order, int* row_of,
                                        const int* token_count, cudaStream_t stream, int* grid_scratch = nullptr);

// The single block: 32 warps for routings of more than kRoutingWideBlockMinIds ids (where their counters fit the
// default 48 KB of shared memory), else 8.
// The grid form: routings of at least kRoutingGridMinIds ids, on ceil(ids / kRoutingIdsPerCta) CTAs, at least
// kRoutingGridMinCtas and at most kRoutingGridMaxCtas (the scratch holds a count per CTA and bucket).
// Measured (bench/micro/routing_grid.cu, graph-timed, E 128, an H100; docs/PERF.md): 2048 ids one block of 32
// warps 5.9 us against 8 warps' 7.0 (at 1024 ids 8 warps are faster: 4.4 against 4.8); the grid form is fastest
// on 16 CTAs at 4096-8192 ids (7.8 / 8.6 us; the single block 8.6 / 14.3), on ~24 at 16384 (9.7) and ~48 at
// 32768 (11.8): about 680 ids per CTA there.
inline constexpr std::int64_t kRoutingWideBlockMinIds = 1024;
inline constexpr std::int64_t kRoutingGridMinIds = 4096;
inline constexpr int kRoutingGridMinCtas = 16;
inline constexpr std::int64_t kRoutingIdsPerCta = 683;
inline constexpr int kRoutingGridMaxCtas = 264;
// CTAs of the grid form for `count` ids (0: one block).
int routing_grid_ctas(std::int64_t count);
inline constexpr std::int64_t routing_grid_scratch_ints(int experts) {
  return std::int64_t{kRoutingGridMaxCtas} * (experts + 2);
}

}  // namespace fp4gemm::detail
