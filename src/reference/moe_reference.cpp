// Exact CPU reference for the MoE grouped GEMM (reference::moe_gemm): the routed rows of each
// expert become one group of the grouped reference (FP4 activations), or a direct float64 product
// (bf16 activations).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/reference.hpp"

namespace fp4gemm::reference {
namespace {

struct ExpertRows {
  std::int64_t base = 0;
  int rows = 0;
};

std::vector<ExpertRows> expert_rows(const MoeHostProblem& p) {
  std::vector<ExpertRows> out(p.experts);
  for (int e = 0; e < p.experts; ++e) {
    if (p.counts != nullptr) {
      if (p.counts[e] < 0 || p.counts[e] > p.capacity)
        throw Error("expert_counts", e, "count " + std::to_string(p.counts[e]) + " outside [0, capacity]");
      out[e] = {std::int64_t{e} * p.capacity, p.counts[e]};
    } else {
      if (p.offsets[e + 1] < p.offsets[e] || p.offsets[0] < 0)
        throw Error("expert_offsets", e + 1, "offsets must be non-decreasing from >= 0");
      out[e] = {p.offsets[e], p.offsets[e + 1] - p.offsets[e]};
    }
  }
  return out;
}

double bf16_value(std::uint16_t bits) { return bf16_bits_to_double(bits); }

void store(void* c, OutType type, std::int64_t i, double v) {
  switch (type) {
    case OutType::f16: static_cast<std::uint16_t*>(c)[i] = float_to_half_bits(v); break;
    case OutType::bf16: static_cast<std::uint16_t*>(c)[i] = float_to_bf16_bits(v); break;
    case OutType::f32: static_cast<float*>(c)[i] = static_cast<float>(v); break;
  }
}

}  // namespace

void moe_gemm(const MoeHostProblem& p, int threads) {
  const std::vector<ExpertRows> experts = expert_rows(p);
  const std::int64_t vec = scale_block_size(p.format), cols = p.k / vec;
  auto src_row = [&](std::int64_t r) -> std::int64_t {
    const std::int64_t s = p.gather != nullptr ? p.gather[r] : r;
    if (s < 0 || s >= p.a_rows) {
      if (p.gather != nullptr)
        throw Error("gather_index", -1, "gather_index[" + std::to_string(r) + "] = " + std::to_string(s) +
                                            " is outside [0, " + std::to_string(p.a_rows) + ")");
      throw Error("expert_offsets", -1, "row " + std::to_string(r) + " is past the " + std::to_string(p.a_rows) +
                                            " rows of A");
    }
    return s;
  };
  for (int e = 0; e < p.experts; ++e) {
    const ExpertRows x = experts[e];
    if (x.rows == 0) continue;
    const std::uint8_t* w = p.w + e * p.w_expert_stride;
    const std::uint8_t* ws = p.w_scales + e * p.w_scale_expert_stride;
    const double alpha = p.alpha != nullptr ? p.alpha[e] : 1.0;
    if (!p.bf16_activations) {
      // The expert's rows of A, gathered, as one group of the grouped reference.
      std::vector<std::uint8_t> a(static_cast<std::size_t>(x.rows) * (p.k / 2)), sa(static_cast<std::size_t>(x.rows) * cols);
      for (int i = 0; i < x.rows; ++i) {
        const std::int64_t s = src_row(x.base + i);
        std::memcpy(&a[static_cast<std::size_t>(i) * (p.k / 2)], p.a + s * p.lda, p.k / 2);
        std::memcpy(&sa[static_cast<std::size_t>(i) * cols], p.a_scales + s * cols, cols);
      }
      // The weights' scales in linear layout (the grouped reference takes one layout for both).
      std::vector<std::uint8_t> sw(static_cast<std::size_t>(p.n) * cols);
      if (p.w_layout == ScaleLayout::blocked) formats::blocked_to_linear(ws, p.n, cols, sw.data());
      else std::memcpy(sw.data(), ws, sw.size());
      HostGroup g;
      g.m = x.rows, g.n = p.n, g.k = p.k;
      g.a = a.data(), g.lda = p.k / 2, g.b = w, g.ldb = p.ldw, g.sfa = sa.data(), g.sfb = sw.data();
      g.c = static_cast<std::uint8_t*>(p.c) + x.base * p.ldc * static_cast<std::int64_t>(out_type_size(p.out_type));
      g.ldc = p.ldc;
      g.alpha = static_cast<float>(alpha);
      if (p.alpha != nullptr && static_cast<double>(g.alpha) != alpha)
        throw Error("alpha", e, "alpha must be a float");
      grouped_gemm(std::span<const HostGroup>(&g, 1), p.format, ScaleLayout::linear, p.out_type, threads);
      continue;
    }
    // bf16 activations: dequantise the expert's weights once, then float64 dot products (each
    // product of a bf16 value and an exact dequantised weight is exact in float64).
    std::vector<double> wd(static_cast<std::size_t>(p.n) * p.k);
    for (int n = 0; n < p.n; ++n)
      for (std::int64_t k = 0; k < p.k; ++k) {
        const double s = formats::scale_to_float(p.format, ws[formats::scale_offset(p.w_layout, n, k / vec, cols)]);
        wd[static_cast<std::size_t>(n) * p.k + k] =
            static_cast<double>(formats::e2m1_to_float(formats::get_nibble(w + n * p.ldw, k))) * s;
      }
    for (int i = 0; i < x.rows; ++i) {
      const auto* arow = reinterpret_cast<const std::uint16_t*>(p.a + src_row(x.base + i) * p.lda);
      for (int n = 0; n < p.n; ++n) {
        double acc = 0;
        const double* wr = &wd[static_cast<std::size_t>(n) * p.k];
        for (std::int64_t k = 0; k < p.k; ++k) acc += bf16_value(arow[k]) * wr[k];
        store(p.c, p.out_type, (x.base + i) * p.ldc + n, acc * alpha);
      }
    }
  }
}

}  // namespace fp4gemm::reference
