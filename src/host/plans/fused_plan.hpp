// The pointer-array plan on the fused sm_90a kernel: plan-time set-up (schedule, tensor maps,
// workspace) and the launch, as a registry entry.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <span>
#include <string>

#include "fp4gemm/fp4gemm.hpp"
#include "device/group_params.hpp"
#include "host/kernel_registry.hpp"

namespace fp4gemm::detail::sm90 {

// The fused kernel as a registry entry: schedule, TMA descriptors and workspace built at plan
// time (throws fp4gemm::Error); run enqueues the pre-pass and the GEMM.
std::unique_ptr<KernelPlan> make_fused_plan(const KernelContext& context);

// A table of the last launch's per-CTA cycle counters in a trace build (cmake -DFP4GEMM_TRACE=ON,
// docs/PERF.md; device/trace.cuh); "" in any other build.
std::string trace_report(Format format);

}  // namespace fp4gemm::detail::sm90
