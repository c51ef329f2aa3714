// Host tier: the GLU epilogue's pieces that need no GPU -- plan-time validation of the GLU fields,
// the FP32 activation code the kernel and the reference share (src/device/glu.hpp), and the MoE
// reference's GLU path against the dual-GEMM reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device/glu.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "fp4gemm/reference.hpp"

namespace fp4gemm {
namespace {

const void* fake(std::uintptr_t address) { return reinterpret_cast<const void*>(address); }

std::string plan_error(const MoeWeights& w, const MoeOptions& o) {
  try {
    MoeGemm plan(w, o);
  } catch (const Error& e) {
    return e.argument();
  }
  return "(nothing thrown)";
}

TEST(MoeGluValidation, EachBadFieldNamed) {
  const auto bad = [](const char* argument, const std::function<void(MoeWeights&, MoeOptions&)>& edit) {
    MoeWeights w;
    MoeOptions o;
    w.experts = 4, w.n = 64, w.k = 128, w.w = fake(0x100000), w.scales = fake(0x200000);
    o.capacity = 64, o.epilogue = MoeEpilogue::silu;
    edit(w, o);
    EXPECT_EQ(plan_error(w, o), argument);
  };
  bad("weights.n", [](MoeWeights& w, MoeOptions&) { w.n = 60; });  // I % 8
  bad("options.epilogue", [](MoeWeights&, MoeOptions& o) { o.epilogue = static_cast<MoeEpilogue>(7); });
  bad("options.gate_up", [](MoeWeights&, MoeOptions& o) { o.gate_up = static_cast<GateUpLayout>(7); });
  bad("options.swiglu_limit", [](MoeWeights&, MoeOptions& o) {
    o.epilogue = MoeEpilogue::swigluoai, o.swiglu_limit = 0;
  });
  bad("options.swiglu_limit", [](MoeWeights&, MoeOptions& o) {
    o.epilogue = MoeEpilogue::swigluoai, o.swiglu_limit = std::nanf("");
  });
  bad("options.swiglu_alpha", [](MoeWeights&, MoeOptions& o) {
    o.epilogue = MoeEpilogue::swigluoai, o.swiglu_alpha = std::numeric_limits<float>::infinity();
  });
  bad("weights.w_up", [](MoeWeights&, MoeOptions& o) { o.gate_up = GateUpLayout::separate; });
  bad("weights.scales_up", [](MoeWeights& w, MoeOptions& o) {
    o.gate_up = GateUpLayout::separate, w.w_up = fake(0x300000);
  });
  bad("weights.w_up", [](MoeWeights& w, MoeOptions& o) {
    o.gate_up = GateUpLayout::separate, w.w_up = w.w, w.scales_up = fake(0x400000);
  });
  bad("weights.w_up", [](MoeWeights& w, MoeOptions&) { w.w_up = fake(0x300000); });  // stacked
  bad("weights.alpha_up", [](MoeWeights& w, MoeOptions&) { w.alpha_up = std::numeric_limits<float>::infinity(); });
  bad("weights.alpha_up_device", [](MoeWeights& w, MoeOptions&) { w.alpha_up_device = reinterpret_cast<const float*>(0x500002); });
  bad("weights.alpha_up", [](MoeWeights& w, MoeOptions& o) { o.epilogue = MoeEpilogue::none, w.alpha_up = 2.0f; });
  bad("weights.expert_stride", [](MoeWeights& w, MoeOptions&) { w.expert_stride = 64 * 64; });  // < 2I * ldw
  bad("weights.scale_expert_stride", [](MoeWeights& w, MoeOptions& o) {
    o.scale_layout = ScaleLayout::linear, w.scale_expert_stride = 64 * 8;  // one expert has 2I x K/16
  });
}

TEST(GluActivation, ExpWithinTwoUlpsAndSpecialValues) {
  using detail::glu_exp;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> x(-87.0f, 88.0f);
  double worst = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float v = x(rng);
    const double ref = std::exp(static_cast<double>(v));
    worst = std::max(worst, std::fabs(glu_exp(v) - ref) / ref);
  }
  EXPECT_LT(worst, 2.0 * 0x1p-24 * 2) << "relative error " << worst;
  EXPECT_EQ(glu_exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(glu_exp(std::nanf(""))));
  EXPECT_EQ(glu_exp(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(glu_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(glu_exp(89.0f), std::numeric_limits<float>::infinity());
  // Gradual underflow: exp(-100) = 3.72e-44 is a subnormal float.
  EXPECT_NEAR(glu_exp(-100.0f), std::exp(-100.0), 2e-45);
}

// The GLU divisor 1 + exp(x) by one exponent add instead of glu_exp's two power-of-two
// multiplies must give 1.0f + glu_exp(x)'s bits for every x (checked exhaustively over all 2^32
// patterns while it was written; here every 8191st pattern -- every exponent and sign -- plus every
// pattern of [-90, -85] and [86, 89], where the clamps and the exponent field's ends are).
TEST(GluActivation, OnePlusExpIsOnePlusGluExpBitForBit) {
  auto bits = [](float f) {
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  auto check = [&](std::uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    const float want = 1.0f + detail::glu_exp(x), got = detail::glu_one_plus_exp(x);
    if (want != want) return got != got;
    return bits(want) == bits(got);
  };
  std::int64_t bad = 0, n = 0;
  for (std::uint64_t b = 0; b < (1ull << 32); b += 8191, ++n) bad += !check(static_cast<std::uint32_t>(b));
  for (const auto [lo, hi] : {std::pair{-90.0f, -85.0f}, std::pair{86.0f, 89.0f}}) {
    for (float x = lo; x <= hi; x = std::nextafter(x, hi + 1.0f), ++n) {
      bad += !check(bits(x));
    }
  }
  EXPECT_EQ(bad, 0) << "of " << n;
  EXPECT_GT(n, 1000000);
  EXPECT_EQ(detail::glu_one_plus_exp(88.72283935546875f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(detail::glu_one_plus_exp(-88.0f), 1.0f);
  EXPECT_TRUE(std::isnan(detail::glu_one_plus_exp(std::nanf(""))));
}

// The drain's terms (glu_terms_fast: NaN-propagating clamps, the exponent clamped from below only)
// give glu_terms' bits -- g', u', and the divisor wherever x = -(alpha g') is not NaN; where it is,
// +inf, and the activation is NaN either way. Every 8191st gate pattern and every gate within 4096
// ulps of the thresholds of x, for silu, gpt-oss's swigluoai, alpha 0 / -1 and an infinite limit.
TEST(GluActivation, FastTermsGiveTheTermsBits) {
  const float inf = std::numeric_limits<float>::infinity();
  auto bits = [](float f) {
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  const float us[] = {1.0f, -2.5f, 0.0f, -0.0f, inf, -inf, 3e38f, std::nanf(""), 1e-40f, -7.5f, 7.0f};
  struct Case {
    int kind;
    float alpha, limit;
  };
  long n = 0, nan_x = 0;
  for (const Case c : {Case{detail::kGluSilu, 1.0f, inf}, Case{detail::kGluSwigluOai, 1.702f, 7.0f},
                       Case{detail::kGluSwigluOai, 0.0f, 7.0f}, Case{detail::kGluSwigluOai, -1.0f, 7.0f},
                       Case{detail::kGluSwigluOai, 1.702f, inf}}) {
    const detail::GluParams p = detail::glu_params(c.kind, c.alpha, c.limit);
    std::vector<float> gs = {0.0f, -0.0f, inf, -inf, std::nanf("")};
    for (std::uint64_t b = 0; b < (1ull << 32); b += 8191) {
      float g;
      const std::uint32_t b32 = static_cast<std::uint32_t>(b);
      std::memcpy(&g, &b32, 4);
      gs.push_back(g);
    }
    if (p.alpha != 0.0f)
      for (const float xt : {-87.0f, 88.72283935546875f}) {
        float g = -xt / p.alpha;
        for (int i = 0; i < 4096; ++i) g = std::nextafter(g, -inf);
        for (int i = 0; i < 8192; ++i, g = std::nextafter(g, inf)) gs.push_back(g);
      }
    for (std::size_t i = 0; i < gs.size(); ++i) {
      const float g = gs[i], u = us[i % 11];
      const detail::GluTerms want = detail::glu_terms(g, u, p), got = detail::glu_terms_fast(g, u, p);
      ++n;
      ASSERT_EQ(bits(got.g), bits(want.g)) << "g " << g;
      ASSERT_TRUE(bits(got.u) == bits(want.u) || (got.u != got.u && want.u != want.u)) << "u " << u;
      if (want.d != want.d) {  // x NaN: a NaN gate, or an infinite one with alpha 0
        ++nan_x;
        ASSERT_EQ(got.d, inf) << "g " << g;
        ASSERT_TRUE(g != g || (std::isinf(g) && p.alpha == 0.0f)) << "g " << g;
        const float q = detail::glu_div(got.g, got.d) * got.u;
        ASSERT_TRUE(q != q) << "g " << g << " u " << u;
      } else {
        ASSERT_EQ(bits(got.d), bits(want.d)) << "kind " << c.kind << " alpha " << c.alpha << " g " << g;
      }
    }
  }
  EXPECT_GT(n, 2500000);
  EXPECT_GT(nan_x, 1000);
}

// The first exp (early returns) and the literal IEEE division: the branch-free glu_exp and
// glu_div (an infinite divisor as g * 0) must give the same bits for every input.
float v18_exp(float x) {
  if (x != x) return x;
  if (x > 88.72283935546875f) return std::numeric_limits<float>::infinity();
  if (x < -104.0f) return 0.0f;
  return detail::glu_exp(x);  // in range both compute the same polynomial on x
}

float v18_activate(int kind, float g, float u, float alpha, float limit) {
  if (kind == detail::kGluSwigluOai) {
    g = g > limit ? limit : g;
    u = u > limit ? limit : (u < -limit ? -limit : u);
    const volatile float d = 1.0f + v18_exp(-(alpha * g));
    return g / d * (u + 1.0f);
  }
  const volatile float d = 1.0f + v18_exp(-g);
  return g / d * u;
}

bool same_float(float a, float b) {
  if (a != a || b != b) return a != a && b != b;
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4), std::memcpy(&y, &b, 4);
  return x == y;
}

TEST(GluActivation, BranchFreeFormsGiveTheLiteralBits) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> gs = {0.0f, -0.0f, inf, -inf, std::nanf(""), 88.72283935546875f, -88.72283935546875f, 104.0f,
                           -104.0f, 87.0f, -87.0f, -87.4f, -88.0f, -88.7f, -89.0f, -100.0f, -1e30f, 1e30f, 1e-40f, -1e-40f};
  std::mt19937_64 rng(11);
  for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 4093) {  // ~1M patterns over every binade
    float g;
    const std::uint32_t b = static_cast<std::uint32_t>(bits);
    std::memcpy(&g, &b, 4);
    gs.push_back(g);
  }
  std::normal_distribution<float> n(0.0f, 200.0f);
  for (int i = 0; i < 200000; ++i) gs.push_back(n(rng));
  const float us[] = {1.0f, -2.5f, 0.0f, inf, -inf, 3e38f};
  long checked = 0;
  for (const float g : gs)
    for (const float u : us)
      for (int kind : {detail::kGluSilu, detail::kGluSwigluOai}) {
        const float want = v18_activate(kind, g, u, 1.702f, 7.0f);
        const float got = detail::glu_activate(kind, g, u, 1.702f, 7.0f);
        ASSERT_TRUE(same_float(want, got)) << "kind " << kind << " g " << g << " u " << u << ": " << got << " vs " << want;
        ++checked;
      }
  for (const float x : gs) ASSERT_TRUE(same_float(v18_exp(x), detail::glu_exp(x))) << "exp(" << x << ")";
  EXPECT_GT(checked, 12000000);
}

TEST(GluActivation, Fp32FormulasMatchFloat64) {
  std::mt19937_64 rng(6);
  std::normal_distribution<float> n(0.0f, 4.0f);
  reference::DualActivation silu, oai{reference::Activation::swigluoai};
  for (int i = 0; i < 200000; ++i) {
    const float g = n(rng), u = n(rng);
    const double s64 = reference::activate(silu, g, u), o64 = reference::activate(oai, g, u);
    const float s32 = detail::glu_activate(detail::kGluSilu, g, u, 1.702f, 7.0f);
    const float o32 = detail::glu_activate(detail::kGluSwigluOai, g, u, 1.702f, 7.0f);
    EXPECT_LE(std::fabs(s32 - s64), 8 * 0x1p-24 * std::fabs(s64) + 1e-38) << g << " " << u;
    EXPECT_LE(std::fabs(o32 - o64), 8 * 0x1p-24 * (std::fabs(o64) + std::fabs(g)) + 1e-38) << g << " " << u;
  }
  // NaN passes through the clamps; a large negative gate gives -0 * u.
  EXPECT_TRUE(std::isnan(detail::glu_activate(detail::kGluSwigluOai, std::nanf(""), 1.0f, 1.702f, 7.0f)));
  EXPECT_TRUE(std::isnan(detail::glu_activate(detail::kGluSwigluOai, 1.0f, std::nanf(""), 1.702f, 7.0f)));
  EXPECT_EQ(detail::glu_activate(detail::kGluSilu, -200.0f, 3.0f, 0, 0), 0.0f);
}

// The MoE reference's GLU (gate and up stacked, interleaved or separate) equals the dual GEMM
// reference on the same rows, bit for bit, and its FP32 epilogue mode stays within an output ulp.
TEST(MoeGluReference, MatchesTheDualReference) {
  std::mt19937_64 rng(7);
  const int E = 3, I = 24, K = 64, rows = 20, cols = K / 16;
  for (int layout = 0; layout < 3; ++layout) {
    const int wrows = layout == 2 ? I : 2 * I;
    std::vector<std::uint8_t> w(static_cast<std::size_t>(E) * wrows * K / 2), wu(w.size()), s(static_cast<std::size_t>(E) * wrows * cols),
        su(s.size()), a(static_cast<std::size_t>(rows) * K / 2), sa(static_cast<std::size_t>(rows) * cols);
    for (auto* v : {&w, &wu, &a}) for (auto& b : *v) b = static_cast<std::uint8_t>(rng());
    for (auto* v : {&s, &su, &sa}) for (auto& b : *v) b = static_cast<std::uint8_t>(0x30 + rng() % 16);
    const std::vector<int> offsets = {0, 7, 7, rows};
    const std::vector<float> alpha = {0.5f, 1.25f, 2.0f}, alpha_up = {1.0f, 0.75f, 3.0f};
    std::vector<std::uint16_t> c(static_cast<std::size_t>(rows) * I), c32(c.size());
    reference::DualActivation act{layout == 1 ? reference::Activation::swigluoai : reference::Activation::silu};
    reference::MoeHostProblem p;
    p.experts = E, p.n = I, p.k = K, p.a = a.data(), p.lda = K / 2, p.a_scales = sa.data(), p.a_rows = rows;
    p.w = w.data(), p.ldw = K / 2, p.w_expert_stride = static_cast<std::int64_t>(wrows) * K / 2;
    p.w_scales = s.data(), p.w_layout = ScaleLayout::linear, p.w_scale_expert_stride = static_cast<std::int64_t>(wrows) * cols;
    p.alpha = alpha.data(), p.alpha_up = alpha_up.data(), p.offsets = offsets.data(), p.c = c.data(), p.ldc = I;
    p.glu = &act, p.gate_up = layout, p.w_up = wu.data(), p.w_up_scales = su.data();
    reference::moe_gemm(p);
    p.glu_fp32 = true, p.c = c32.data();
    reference::moe_gemm(p);
    for (int e = 0; e < E; ++e) {
      const int m = offsets[e + 1] - offsets[e];
      if (m == 0) continue;
      // Gate / up rows of expert e as plain [I, K/2] matrices.
      std::vector<std::uint8_t> g(static_cast<std::size_t>(I) * K / 2), u(g.size()), gs(static_cast<std::size_t>(I) * cols), us(gs.size());
      for (int i = 0; i < I; ++i) {
        const int gr = layout == 1 ? 2 * i : i, ur = layout == 0 ? I + i : layout == 1 ? 2 * i + 1 : i;
        const auto& usrc = layout == 2 ? wu : w;
        const auto& ussrc = layout == 2 ? su : s;
        std::memcpy(&g[i * K / 2], &w[(static_cast<std::size_t>(e) * wrows + gr) * K / 2], K / 2);
        std::memcpy(&u[i * K / 2], &usrc[(static_cast<std::size_t>(e) * wrows + ur) * K / 2], K / 2);
        std::memcpy(&gs[i * cols], &s[(static_cast<std::size_t>(e) * wrows + gr) * cols], cols);
        std::memcpy(&us[i * cols], &ussrc[(static_cast<std::size_t>(e) * wrows + ur) * cols], cols);
      }
      std::vector<std::uint16_t> d(static_cast<std::size_t>(m) * I);
      reference::DualHostGroup dg;
      dg.m = m, dg.n = I, dg.k = K, dg.a = a.data() + offsets[e] * K / 2, dg.lda = K / 2, dg.sfa = sa.data() + offsets[e] * cols;
      dg.b1 = g.data(), dg.ldb1 = K / 2, dg.sfb1 = gs.data(), dg.b2 = u.data(), dg.ldb2 = K / 2, dg.sfb2 = us.data();
      dg.c = d.data(), dg.ldc = I, dg.alpha1 = alpha[e], dg.alpha2 = alpha_up[e];
      reference::dual_gemm(std::span<const reference::DualHostGroup>(&dg, 1), Format::nvfp4, ScaleLayout::linear,
                           OutType::bf16, act);
      for (int r = 0; r < m; ++r)
        for (int i = 0; i < I; ++i) {
          const std::size_t at = static_cast<std::size_t>(offsets[e] + r) * I + i;
          EXPECT_EQ(c[at], d[static_cast<std::size_t>(r) * I + i]) << "layout " << layout << " expert " << e;
          const double x = reference::bf16_bits_to_double(c[at]), y = reference::bf16_bits_to_double(c32[at]);
          EXPECT_LE(std::fabs(x - y), std::ldexp(std::fabs(x), -7) + 1e-30) << "FP32 mode, layout " << layout;
        }
    }
  }
}

}  // namespace
}  // namespace fp4gemm
