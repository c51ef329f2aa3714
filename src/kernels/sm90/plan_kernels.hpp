// Kernels the fused GEMM's plans run at plan time (and on reload): scale-layout conversions and the
// MXFP4 scale-code check (definitions in plan_kernels.cu). Plain C++ includes this through the
// kernel registry.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device/prepass_args.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail::sm90 {

// Linear expert scales -> blocked (the pre-pass's conversion kernel, one job per expert).
template <Format F>
cudaError_t convert_expert_scales(const ScaleConversion* jobs, int experts, int rows, int cols, cudaStream_t stream);

// The largest byte of the blocks [p + e * stride, + n) over experts e into *out (zeroed by the
// caller): the plan's check that every MXFP4 scale code the kernel can read is <= 128
// (FusedParams::small_mx_scales).
cudaError_t launch_max_byte(const std::uint8_t* p, std::int64_t n, std::int64_t stride, int experts, unsigned* out,
                            cudaStream_t stream);

}  // namespace fp4gemm::detail::sm90
