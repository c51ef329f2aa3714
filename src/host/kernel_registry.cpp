// The kernel registry (kernel_registry.hpp).
#include "host/kernel_registry.hpp"

#include <string>

#include "host/plans/fused_plan.hpp"
#include "host/plans/moe_plan.hpp"
#include "reference/gpu_reference.hpp"

namespace fp4gemm::detail {
namespace {

bool is_sm90(const DeviceInfo& device) { return device.has_fast_kernel; }
bool any_gpu(const DeviceInfo&) { return true; }

constexpr KernelEntry kKernels[] = {
    {"sm90_fused_swapab", Backend::fast, is_sm90, sm90::make_fused_plan},
    {"reference", Backend::reference, any_gpu, make_reference_plan},
};

constexpr MoeKernelEntry kMoeKernels[] = {
    {"sm90_fused_swapab_moe", is_sm90, sm90::make_fused_moe_plan},
};

}  // namespace

std::span<const KernelEntry> kernels() { return kKernels; }

std::span<const MoeKernelEntry> moe_kernels() { return kMoeKernels; }

const MoeKernelEntry& select_moe_kernel(const DeviceInfo& device) {
  for (const MoeKernelEntry& k : kMoeKernels)
    if (k.runs_on(device)) return k;
  throw Error("options.device", -1,
              "no fast kernel for " + device.name + " (sm_" + std::to_string(device.sm_major) +
                  std::to_string(device.sm_minor) + "): fp4gemm's MoE GEMM needs sm_90 (H100/H200)");
}

void MoeKernelPlan::enqueue_prepared(const MoeArgs&, cudaStream_t) const {
  throw Error("plan", -1, "internal: this MoE kernel plan has no prepared-input run (prepared_input() is null)");
}

const KernelEntry& select_kernel(Backend requested, const DeviceInfo& device) {
  const Backend wanted = requested == Backend::reference ? Backend::reference : Backend::fast;
  for (const KernelEntry& k : kKernels)
    if (k.backend == wanted && k.runs_on(device)) return k;
  throw Error("options.backend", -1,
              "no fast kernel for " + device.name + " (sm_" + std::to_string(device.sm_major) +
                  std::to_string(device.sm_minor) +
                  "); fp4gemm's fused kernel needs sm_90 (H100/H200). Pass Backend::reference to run the (slow) "
                  "reference kernel.");
}

}  // namespace fp4gemm::detail
