// The MoE routing's kernel (align_routing_kernel, kernels/routing.cu); the checks and the public
// entry points are host/routing.cpp. Internal.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp4gemm::detail {

// One launch of the stable counting sort, arguments already validated (host/routing.cpp): offsets
// [E + 1], gather [count], and order [count] (int64) or row_of [count] (int32) where non-null;
// token_count (device, may be null): pairs of tokens at or past it are absent. Returns the
// launch's error.
cudaError_t launch_align_routing_kernel(const void* topk_ids, bool ids_int64, std::int64_t count, int k, int experts,
                                        int* offsets, int* gather, std::int64_t* order, int* row_of,
                                        const int* token_count, cudaStream_t stream);

}  // namespace fp4gemm::detail
