// The kernels a pointer-array Plan can run, behind one interface: each entry says where it runs
// and builds its per-plan set-up; the plan picks one by the requested backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "device/group_params.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail {

// One kernel's set-up for one plan: built once (throws fp4gemm::Error), run many times. `run`
// enqueues only: no allocation, no synchronisation.
class KernelPlan {
 public:
  virtual ~KernelPlan() = default;
  virtual void run(cudaStream_t stream) const = 0;
  virtual std::string describe() const = 0;  // configuration for logs ("" when nothing to say)
  virtual std::size_t device_bytes() const = 0;
};

// What a kernel's build gets: the validated groups, the options, the device, and the plan's device
// copy of the group table (one GroupParams per group).
struct KernelContext {
  std::span<const GroupDesc> groups;
  const Options& options;
  const DeviceInfo& device;
  const GroupParams* d_groups;
  int max_m, max_n;  // over the groups with work
};

struct KernelEntry {
  const char* name;  // Plan::kernel_name()
  Backend backend;   // Backend::fast or Backend::reference
  bool (*runs_on)(const DeviceInfo& device);
  std::unique_ptr<KernelPlan> (*build)(const KernelContext& context);
};

// Every kernel, fast ones first.
std::span<const KernelEntry> kernels();

// The kernel for `requested` on `device`: automatic and fast take the first fast kernel that runs
// there (Error naming options.backend when none does); reference the reference kernel.
const KernelEntry& select_kernel(Backend requested, const DeviceInfo& device);

}  // namespace fp4gemm::detail
