// The fused sm_90a kernel's host entry points, as the plans call them (host/plans/, through the
// kernel registry): declarations only, so plain C++ can include them. The definitions are in
// fused_kernel.cuh, instantiated per format in fused_nvfp4.cu / fused_mxfp4.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "device/params.cuh"
#include "device/prepass_args.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail::sm90 {

// Enqueues the pointer-array plan's scale conversions (if any), its pre-pass and the GEMM (the
// table row launch_gemm picks from the plan). Returns the first launch's error.
template <Format F>
cudaError_t launch_fused(const FusedParams& params, OutType out_type, int num_ctas, std::size_t smem_bytes,
                         const PrepassArgs& prepass, dim3 pre_grid, const ScaleConversion* conversions,
                         int num_conversions, dim3 conversion_grid, cudaStream_t stream);

// The MoE plan's launch: the routed pre-pass reading source S, then the GEMM with the MoE device
// schedule.
template <Format F, PrepassSource S>
cudaError_t launch_routed(const FusedParams& params, OutType out_type, int num_ctas, std::size_t smem_bytes,
                          const PrepassArgs& prepass, dim3 pre_grid, cudaStream_t stream);

// The MoE plan's GEMM alone, its activations already in the workspace (the layer's hand-over:
// GEMM1's GLU epilogue wrote them); a programmatic dependent of the stream's previous kernel.
template <Format F>
cudaError_t launch_routed_prepared(const FusedParams& params, OutType out_type, int num_ctas, std::size_t smem_bytes,
                                   cudaStream_t stream);

// Opts every kernel of format F in to smem_bytes of dynamic shared memory.
template <Format F>
cudaError_t set_fused_smem(std::size_t smem_bytes);

// Copies the last launch's trace counters out (cudaErrorNotSupported unless a trace build).
template <Format F>
cudaError_t read_trace(unsigned long long* out);

}  // namespace fp4gemm::detail::sm90
