// The GPU activation quantiser's kernels (kernels/quantize.cu); the checks and the public entry
// points are host/quantize.cpp. Internal.
#pragma once
#include <cuda_runtime_api.h>

#include "fp4gemm/quantize.hpp"

namespace fp4gemm::detail {

// The quantiser's launches on `stream` for arguments already resolved (ldx, ld_packed set) and
// validated, with at least one element (host/quantize.cpp): rows [*row_begin, *row_end) when both
// are non-null (device ints), else all. Returns the first launch error.
// chain: QuantizeChain (fp4gemm/quantize.hpp); not none: launched as a programmatic dependent.
cudaError_t launch_quantize_kernel(const QuantizeArgs& args, const int* row_begin, const int* row_end, cudaStream_t stream,
                                   QuantizeChain chain = QuantizeChain::none);

}  // namespace fp4gemm::detail
