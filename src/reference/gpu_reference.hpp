// A simple, obviously-correct GPU reference kernel: one thread per output element, FP32 sums.
#pragma once

#include <cuda_runtime_api.h>

#include "fp4gemm/fp4gemm.hpp"
#include "device/group_params.hpp"
#include "host/kernel_registry.hpp"

namespace fp4gemm::detail {

// d_groups: device array of num_groups GroupParams. max_m / max_n bound the launch grid. Returns
// the launch's error.
cudaError_t launch_reference_gemm(const GroupParams* d_groups, int num_groups, int max_m, int max_n,
                                  Format format, ScaleLayout layout, OutType out_type, cudaStream_t stream);

// The reference kernel as a registry entry (one thread per output element over the plan's table).
std::unique_ptr<KernelPlan> make_reference_plan(const KernelContext& context);

}  // namespace fp4gemm::detail
