// Placeholder for the fused sm_90a kernel (issue 3).
#include "kernels/sm90/fused_grouped_gemm.hpp"

namespace fp4gemm::detail::sm90 {
struct FastPlan {};
void FastPlanDeleter::operator()(FastPlan* p) const noexcept { delete p; }
FastPlanPtr make_fast_plan(std::span<const GroupDesc>, const Options&, const DeviceInfo&, const GroupParams*) {
  throw Error("options.backend", -1, "the fused kernel is not built yet; use Backend::reference");
}
void run_fast_plan(const FastPlan&, cudaStream_t) {}
std::string describe_fast_plan(const FastPlan&) { return {}; }
}  // namespace fp4gemm::detail::sm90
