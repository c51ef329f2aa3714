// Host entry points of the fused sm_90a kernel: plan-time set-up and the launch.
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

#ifdef FP4GEMM_TRACE
// Diagnostic build only: a table of the last launch's per-CTA cycle counters (docs/PERF.md).
std::string trace_report(Format format);
#endif

}  // namespace fp4gemm::detail::sm90
