// Plan: validation, one-time set-up and dispatch to a kernel of the registry (host/kernel_registry).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <sstream>
#include <vector>

#include "fp4gemm/fp4gemm.hpp"
#include "fp4gemm/formats.hpp"
#include "host/core/device_memory.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/validate.hpp"
#include "device/group_params.hpp"
#include "host/device_guard.hpp"
#include "host/graph_cache.hpp"
#include "host/kernel_registry.hpp"
#include "host/run_serializer.hpp"

namespace fp4gemm {

using detail::GroupParams;

struct Plan::Impl {
  Options options;
  DeviceInfo device;
  std::vector<GroupDesc> groups;
  const detail::KernelEntry* kernel = nullptr;
  detail::DeviceAllocations memory;  // the group table
  GroupParams* d_groups = nullptr;
  int max_m = 0, max_n = 0;
  std::unique_ptr<detail::KernelPlan> kernel_plan;
  double flops = 0, min_bytes = 0;
  // Runs of one plan share its workspace (activations, partials, tile flags): never overlapping.
  detail::RunSerializer runs;
  // Every eager run enqueues the same launches (the plan bakes in every pointer): from the
  // second run on they are one graph launch (pre-pass + GEMM: ~7 -> ~3 us of host time).
  mutable detail::GraphCache<int> graphs;

  ~Impl() {
    kernel_plan.reset();
  }
};

namespace {

using detail::DeviceGuard;

// A moved-from Plan holds no Impl.
const Plan::Impl& checked(const std::unique_ptr<Plan::Impl>& impl) {
  if (!impl) throw Error("plan", -1, "this Plan was moved from and holds nothing; use the Plan it was moved to");
  return *impl;
}

}  // namespace

Plan::Plan(std::span<const GroupDesc> groups, const Options& options, cudaStream_t stream)
    : impl_(std::make_unique<Impl>()) {
  Impl& p = *impl_;
  p.options = options;
  if (device_count() == 0)
    throw Error("device", -1, "no CUDA device is available (no GPU or no driver)");
  p.device = device_info(options.device);
  p.options.device = p.device.index;
  DeviceGuard guard(p.device.index);

  detail::validate_groups(groups, p.options, /*check_pointers=*/true);
  p.groups.assign(groups.begin(), groups.end());

  p.kernel = &detail::select_kernel(options.backend, p.device);

  // Dual GEMMs (Options::epilogue): the kernel sees 2N weight rows through one map from the lower
  // of b / b_up (device/group_params.hpp), each group twice the products.
  const bool dual = options.epilogue != Epilogue::none;
  std::vector<GroupParams> params(groups.size());
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const GroupDesc& g = groups[i];
    const bool swap = dual && g.b_up < g.b;
    params[i] = GroupParams{g.m, dual ? 2 * g.n : g.n, g.k, swap ? 1 : 0,
                            static_cast<const std::uint8_t*>(g.a), g.lda,
                            static_cast<const std::uint8_t*>(swap ? g.b_up : g.b), g.ldb,
                            static_cast<const std::uint8_t*>(g.sfa), static_cast<const std::uint8_t*>(g.sfb),
                            g.c, g.ldc, g.alpha_device, g.alpha, g.alpha_up, dual ? g.alpha_up_device : nullptr};
    p.max_m = std::max(p.max_m, g.m);
    p.max_n = std::max(p.max_n, g.m > 0 ? g.n : 0);
    const double m = g.m, n = g.n, k = g.k, products = dual ? 2 : 1;
    const double vec = scale_block_size(options.format);
    p.flops += 2.0 * m * n * k * products;
    if (g.m > 0)
      p.min_bytes += (m + products * n) * (k / 2 + k / vec) + m * n * out_type_size(options.out_type);
  }
  if (!params.empty()) {
    p.d_groups = p.memory.upload(params, "plan");
  }
  p.kernel_plan = p.kernel->build(
      detail::KernelContext{groups, p.options, p.device, p.d_groups, p.max_m, p.max_n, stream});
  p.runs.create();
}

Plan::~Plan() = default;
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;

void Plan::run(cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  if (p.max_m == 0 || p.max_n == 0) return;  // nothing to compute
  DeviceGuard guard(p.device.index);
  p.runs.run(p.device.index, stream, [&](cudaStream_t s) {
    p.graphs.run(0, /*capacity=*/1, s, [&](cudaStream_t q) { p.kernel_plan->run(q); });
  });
}

std::size_t Plan::graph_replays() const { return checked(impl_).graphs.replays(); }

std::string Plan::kernel_name() const {
  return checked(impl_).kernel->name;
}

std::string Plan::describe() const {
  const Impl& p = checked(impl_);
  std::ostringstream os;
  os << kernel_name() << " on " << p.device.name << ": " << p.groups.size() << " groups, "
     << to_string(p.options.format) << "/" << to_string(p.options.scale_layout) << " -> "
     << to_string(p.options.out_type);
  if (const std::string config = p.kernel_plan->describe(); !config.empty()) os << "; " << config;
  return os.str();
}

const Options& Plan::options() const { return checked(impl_).options; }
int Plan::num_groups() const { return static_cast<int>(checked(impl_).groups.size()); }
double Plan::flops() const { return checked(impl_).flops; }
double Plan::min_bytes() const { return checked(impl_).min_bytes; }
std::size_t Plan::device_bytes() const {
  const Impl& p = checked(impl_);
  return p.groups.size() * sizeof(GroupParams) + p.kernel_plan->device_bytes();
}

void grouped_gemm(std::span<const GroupDesc> groups, const Options& options, cudaStream_t stream) {
  Plan(groups, options).run(stream);
}

}  // namespace fp4gemm
