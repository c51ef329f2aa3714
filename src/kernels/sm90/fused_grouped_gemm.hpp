// Host entry points of the fused sm_90a kernel: plan-time set-up and the launch.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <span>
#include <string>

#include "fp4gemm/fp4gemm.hpp"
#include "host/group_params.hpp"

namespace fp4gemm::detail::sm90 {

struct FastPlan;  // TMA descriptors, schedule and workspace of one plan

struct FastPlanDeleter {
  void operator()(FastPlan* p) const noexcept;
};
using FastPlanPtr = std::unique_ptr<FastPlan, FastPlanDeleter>;

// Builds everything the launch needs (throws fp4gemm::Error). `d_groups` is the plan's device
// copy of the group parameters.
FastPlanPtr make_fast_plan(std::span<const GroupDesc> groups, const Options& options,
                           const DeviceInfo& device, const GroupParams* d_groups);
// Enqueues the kernels; allocates nothing, never synchronises.
void run_fast_plan(const FastPlan& plan, cudaStream_t stream);
std::string describe_fast_plan(const FastPlan& plan);
std::size_t fast_plan_device_bytes(const FastPlan& plan);

#ifdef FP4GEMM_TRACE
// Diagnostic build only: a table of the last launch's per-CTA cycle counters (docs/PERF.md).
std::string trace_report(Format format);
#endif

}  // namespace fp4gemm::detail::sm90
