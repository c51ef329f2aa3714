// Exact CPU reference for the MoE grouped GEMM (reference::moe_gemm): the routed rows of each
// expert become one group of the grouped reference (FP4 activations), or a direct float64 product
// (bf16 activations).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "device/glu.hpp"
#include "fp4gemm/reference.hpp"
#include "reference/cpu_product.hpp"

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

// Exact products of rows [base, base + rows) (A rows through src_row) with the `n` weight rows
// wrow(i) (packed rows of ldw... given as one packed [n, K/2] matrix and linear scales [n, cols]):
// out[r * n + i], float64.
template <typename SrcRow>
void expert_products(const MoeHostProblem& p, std::int64_t base, int rows, const SrcRow& src_row,
                     const std::vector<std::uint8_t>& wq, const std::vector<std::uint8_t>& ws_lin, int n, int threads,
                     std::vector<double>& out) {
  const std::int64_t vec = scale_block_size(p.format), cols = p.k / vec;
  out.assign(static_cast<std::size_t>(rows) * n, 0.0);
  if (!p.bf16_activations) {
    std::vector<std::uint8_t> a(static_cast<std::size_t>(rows) * (p.k / 2)), sa(static_cast<std::size_t>(rows) * cols);
    for (int i = 0; i < rows; ++i) {
      const std::int64_t s = src_row(base + i);
      std::memcpy(&a[static_cast<std::size_t>(i) * (p.k / 2)], p.a + s * p.lda, p.k / 2);
      std::memcpy(&sa[static_cast<std::size_t>(i) * cols], p.a_scales + s * cols, cols);
    }
    HostGroup g;
    g.m = rows, g.n = n, g.k = p.k;
    g.a = a.data(), g.lda = p.k / 2, g.b = wq.data(), g.ldb = p.k / 2, g.sfa = sa.data(), g.sfb = ws_lin.data();
    detail::exact_products(g, p.format, ScaleLayout::linear, threads, out.data());
    return;
  }
  std::vector<double> wd(static_cast<std::size_t>(n) * p.k);
  for (int r = 0; r < n; ++r)
    for (std::int64_t k = 0; k < p.k; ++k)
      wd[static_cast<std::size_t>(r) * p.k + k] =
          static_cast<double>(formats::e2m1_to_float(formats::get_nibble(wq.data() + r * (p.k / 2), k))) *
          formats::scale_to_float(p.format, ws_lin[static_cast<std::size_t>(r * cols + k / vec)]);
  for (int i = 0; i < rows; ++i) {
    const auto* arow = reinterpret_cast<const std::uint16_t*>(p.a + src_row(base + i) * p.lda);
    for (int r = 0; r < n; ++r) {
      double acc = 0;
      const double* wr = &wd[static_cast<std::size_t>(r) * p.k];
      for (std::int64_t k = 0; k < p.k; ++k) acc += bf16_value(arow[k]) * wr[k];
      out[static_cast<std::size_t>(i) * n + r] = acc;
    }
  }
}

// One expert of a GLU problem (see MoeHostProblem::glu).
template <typename SrcRow>
void glu_expert(const MoeHostProblem& p, int e, std::int64_t base, int rows, const SrcRow& src_row, int threads) {
  const int I = p.n;
  const std::int64_t vec = scale_block_size(p.format), cols = p.k / vec, kb = p.k / 2;
  const bool separate = p.gate_up == 2;
  const int wrows = separate ? I : 2 * I;
  // Linear scales of the expert's weight rows (and of w_up's).
  auto linear_scales = [&](const std::uint8_t* src) {
    std::vector<std::uint8_t> lin(static_cast<std::size_t>(wrows) * cols);
    if (p.w_layout == ScaleLayout::blocked) formats::blocked_to_linear(src, wrows, cols, lin.data());
    else std::memcpy(lin.data(), src, lin.size());
    return lin;
  };
  const std::vector<std::uint8_t> s_main = linear_scales(p.w_scales + e * p.w_scale_expert_stride);
  const std::vector<std::uint8_t> s_up = separate ? linear_scales(p.w_up_scales + e * p.w_scale_expert_stride)
                                                  : std::vector<std::uint8_t>{};
  const std::uint8_t* w_main = p.w + e * p.w_expert_stride;
  const std::uint8_t* w_upp = separate ? p.w_up + e * p.w_expert_stride : nullptr;
  std::vector<std::uint8_t> gq(static_cast<std::size_t>(I) * kb), uq(gq.size()), gs(static_cast<std::size_t>(I) * cols),
      us(gs.size());
  for (int i = 0; i < I; ++i) {
    const int grow = p.gate_up == 1 ? 2 * i : i;
    const int urow = p.gate_up == 0 ? I + i : p.gate_up == 1 ? 2 * i + 1 : i;
    std::memcpy(&gq[static_cast<std::size_t>(i) * kb], w_main + grow * p.ldw, kb);
    std::memcpy(&uq[static_cast<std::size_t>(i) * kb], (separate ? w_upp : w_main) + urow * p.ldw, kb);
    std::memcpy(&gs[static_cast<std::size_t>(i) * cols], &s_main[static_cast<std::size_t>(grow) * cols], cols);
    std::memcpy(&us[static_cast<std::size_t>(i) * cols], &(separate ? s_up : s_main)[static_cast<std::size_t>(urow) * cols],
                cols);
  }
  std::vector<double> gate, up;
  expert_products(p, base, rows, src_row, gq, gs, I, threads, gate);
  expert_products(p, base, rows, src_row, uq, us, I, threads, up);
  const float alpha = p.alpha != nullptr ? p.alpha[e] : 1.0f;
  const float alpha_up = p.alpha_up != nullptr ? p.alpha_up[e] : alpha;
  const DualActivation& act = *p.glu;
  const int kind = act.kind == Activation::silu ? fp4gemm::detail::kGluSilu : fp4gemm::detail::kGluSwigluOai;
  // the bias of output column i's gate and up rows (-0: none; x + -0 = x for every x)
  auto bias_of = [&](int row) { return p.bias != nullptr ? p.bias[std::int64_t{e} * 2 * I + row] : -0.0f; };
  std::vector<float> bg(I), bu(I);
  for (int i = 0; i < I; ++i) {
    bg[i] = bias_of(p.gate_up == 1 ? 2 * i : i);
    bu[i] = bias_of(p.gate_up == 1 ? 2 * i + 1 : I + i);
  }
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < I; ++i) {
      const std::size_t at = static_cast<std::size_t>(r) * I + i;
      double v;
      if (p.glu_fp32) {  // the kernel's epilogue: one fma of the FP32 sum, its alpha and the bias
        const float g = std::fma(static_cast<float>(gate[at]), alpha, bg[i]);
        const float u = std::fma(static_cast<float>(up[at]), alpha_up, bu[i]);
        v = fp4gemm::detail::glu_activate(kind, g, u, static_cast<float>(act.swiglu_alpha),
                                          static_cast<float>(act.swiglu_limit));
      } else {
        v = activate(act, static_cast<double>(alpha) * gate[at] + bg[i], static_cast<double>(alpha_up) * up[at] + bu[i]);
      }
      store(p.c, p.out_type, (base + r) * p.ldc + i, v);
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
    if (p.glu != nullptr) {
      glu_expert(p, e, x.base, x.rows, src_row, threads);
      continue;
    }
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
