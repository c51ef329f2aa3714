// Exact CPU reference for the dual GEMM with a gated activation (reference::dual_gemm): both
// products through the grouped reference's exact code path into float64, the activation in
// float64, one rounding.
#include <cmath>
#include <string>
#include <vector>

#include "fp4gemm/reference.hpp"
#include "reference/cpu_product.hpp"

namespace fp4gemm::reference {
namespace {

// One of the two products of a dual group, as a plain group (alpha applied by the caller).
HostGroup product_group(const DualHostGroup& d, const std::uint8_t* b, std::int64_t ldb, const std::uint8_t* sfb) {
  HostGroup g;
  g.m = d.m, g.n = d.n, g.k = d.k;
  g.a = d.a, g.lda = d.lda, g.sfa = d.sfa;
  g.b = b, g.ldb = ldb, g.sfb = sfb;
  g.c = d.c, g.ldc = d.ldc;
  return g;
}

}  // namespace

// The clamps are written as comparisons that are false for NaN, so NaN passes through them
// (as torch.clamp does) instead of being replaced by a bound.
double activate(const DualActivation& act, double g, double u) {
  switch (act.kind) {
    case Activation::silu: return g / (1.0 + std::exp(-g)) * u;
    case Activation::swigluoai: {
      const double limit = act.swiglu_limit;
      if (g > limit) g = limit;
      if (u > limit) u = limit;
      if (u < -limit) u = -limit;
      return g / (1.0 + std::exp(-act.swiglu_alpha * g)) * (u + 1.0);
    }
  }
  return std::nan("");
}

namespace {

void validate_activation(const DualActivation& act) {
  if (act.kind != Activation::silu && act.kind != Activation::swigluoai)
    throw Error("activation.kind", -1, "is not an Activation");
  if (act.kind != Activation::swigluoai) return;
  if (!std::isfinite(act.swiglu_alpha)) throw Error("activation.swiglu_alpha", -1, "must be finite");
  if (!(act.swiglu_limit > 0)) throw Error("activation.swiglu_limit", -1, "must be > 0 (+inf: no clamping)");
}

}  // namespace

void dual_gemm(std::span<const DualHostGroup> groups, Format format, ScaleLayout layout, OutType out_type,
               const DualActivation& activation, int threads) {
  validate_activation(activation);
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const DualHostGroup& d = groups[i];
    const int index = static_cast<int>(i);
    detail::validate(product_group(d, d.b1, d.ldb1, d.sfb1), index, format, "b1");
    detail::validate(product_group(d, d.b2, d.ldb2, d.sfb2), index, format, "b2");
  }
  threads = detail::resolve_threads(threads);
  std::vector<double> gate, up;
  for (const DualHostGroup& d : groups) {
    if (d.m == 0 || d.n == 0) continue;
    const std::size_t elems = static_cast<std::size_t>(d.m) * d.n;
    gate.resize(elems);
    up.resize(elems);
    // K = 0 gives empty sums (zeros) without reading the operands.
    detail::exact_products(product_group(d, d.b1, d.ldb1, d.sfb1), format, layout, threads, gate.data());
    detail::exact_products(product_group(d, d.b2, d.ldb2, d.sfb2), format, layout, threads, up.data());
    const double alpha1 = d.alpha1, alpha2 = d.alpha2;
    for (std::int64_t r = 0; r < d.m; ++r)
      for (std::int64_t c = 0; c < d.n; ++c) {
        const std::size_t i = static_cast<std::size_t>(r * d.n + c);
        detail::store(d.c, out_type, r * d.ldc + c, activate(activation, alpha1 * gate[i], alpha2 * up[i]));
      }
  }
}

}  // namespace fp4gemm::reference
