// Host tests of the exact CPU dual GEMM reference (reference::dual_gemm) against an independent
// naive float64 computation: formats:: decoders, element-by-element sums in K order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/reference.hpp"

namespace fp4gemm {
namespace {

using namespace reference;

constexpr std::uint8_t kSentinel = 0xA5;

using ScaleGen = std::uint8_t (*)(std::mt19937&);
// Scale sets whose products and sums are exact in float64 (so the naive K-order sum and the
// reference's block sums agree bitwise), and MXFP4's whole range (they need not).
std::uint8_t nvfp4_any_finite(std::mt19937& rng) { return static_cast<std::uint8_t>((rng() % 0x7F) | (rng() & 0x80)); }
std::uint8_t mxfp4_moderate(std::mt19937& rng) { return static_cast<std::uint8_t>(120 + rng() % 15); }
std::uint8_t mxfp4_any_finite(std::mt19937& rng) { return static_cast<std::uint8_t>(rng() % 255); }
std::uint8_t gpu_mode_scale(std::mt19937& rng) { return rng() & 1 ? 0x38 : 0x40; }  // E4M3 1, 2

struct Operand {  // rows x K packed e2m1 (row stride ld bytes) and its scales in the layout under test
  int rows = 0;
  std::int64_t ld = 0;
  std::vector<std::uint8_t> data, scales;
};

struct DualCase {
  Format f;
  ScaleLayout layout;
  OutType out;
  int m, n, k;
  float alpha1, alpha2;
  Operand a, b1, b2;
  std::int64_t ldc = 0;
  std::vector<std::uint8_t> c;  // bytes, sentinel-filled, 16 elements past the last row
  std::size_t c_elems = 0;
};

Operand make_operand(const DualCase& t, int rows, int pad, ScaleGen gen, std::mt19937& rng) {
  Operand o;
  o.rows = rows;
  o.ld = t.k / 2 + pad;  // bytes past K are junk that must be ignored
  o.data.resize(static_cast<std::size_t>(rows) * o.ld);
  for (auto& v : o.data) v = static_cast<std::uint8_t>(rng());
  const int cols = t.k / scale_block_size(t.f);
  std::vector<std::uint8_t> linear(static_cast<std::size_t>(rows) * cols);
  for (auto& v : linear) v = gen(rng);
  if (t.layout == ScaleLayout::linear) {
    o.scales = linear;
  } else {
    // Padding filled with NaN codes: the reference must never read it.
    o.scales.assign(formats::blocked_scale_bytes(rows, cols), 0xFF);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) o.scales[formats::blocked_offset(r, c, cols)] = linear[r * cols + c];
  }
  return o;
}

DualCase make_case(Format f, ScaleLayout layout, OutType out, int m, int n, int k_blocks, float alpha1, float alpha2,
                   ScaleGen gen, std::mt19937& rng) {
  DualCase t{f, layout, out, m, n, k_blocks * scale_block_size(f), alpha1, alpha2};
  t.a = make_operand(t, m, 16, gen, rng);
  t.b1 = make_operand(t, n, 32, gen, rng);
  t.b2 = make_operand(t, n, 48, gen, rng);
  t.ldc = (n + 7) / 8 * 8 + 8;
  t.c_elems = static_cast<std::size_t>(m) * t.ldc + 16;
  t.c.assign(t.c_elems * out_type_size(out), kSentinel);
  return t;
}

const std::uint8_t* ptr(const std::vector<std::uint8_t>& v) { return v.empty() ? nullptr : v.data(); }

DualHostGroup view(DualCase& t) {
  DualHostGroup d;
  d.m = t.m, d.n = t.n, d.k = t.k;
  d.a = ptr(t.a.data), d.lda = t.a.ld, d.sfa = ptr(t.a.scales);
  d.b1 = ptr(t.b1.data), d.ldb1 = t.b1.ld, d.sfb1 = ptr(t.b1.scales);
  d.b2 = ptr(t.b2.data), d.ldb2 = t.b2.ld, d.sfb2 = ptr(t.b2.scales);
  d.c = t.m == 0 ? nullptr : t.c.data();
  d.ldc = t.ldc;
  d.alpha1 = t.alpha1, d.alpha2 = t.alpha2;
  return d;
}

double dequant(const DualCase& t, const Operand& o, int row, int kk) {
  const int vec = scale_block_size(t.f);
  const double s = formats::scale_to_float(t.f, o.scales[formats::scale_offset(t.layout, row, kk / vec, t.k / vec)]);
  return formats::e2m1_to_float(formats::get_nibble(o.data.data() + row * o.ld, kk)) * s;
}

struct Product {
  double value;    // the sum of the products in K order, float64
  double abs_sum;  // sum of |products|, for the float64 summation bound
};

Product naive_product(const DualCase& t, const Operand& b, int row, int col) {
  double acc = 0, abs_acc = 0;
  for (int kk = 0; kk < t.k; ++kk) {
    const double p = dequant(t, t.a, row, kk) * dequant(t, b, col, kk);
    acc += p;
    abs_acc += std::fabs(p);
  }
  return {acc, abs_acc};
}

// The activations as issue 21 / gpt-oss define them, written out independently of the library.
double naive_act(const DualActivation& act, double g, double u) {
  if (act.kind == Activation::silu) return g / (1.0 + std::exp(-g)) * u;
  const double lim = act.swiglu_limit;
  if (!std::isnan(g)) g = std::fmin(g, lim);
  if (!std::isnan(u)) u = std::fmax(std::fmin(u, lim), -lim);
  return g / (1.0 + std::exp(-act.swiglu_alpha * g)) * (u + 1.0);
}

double round_to(OutType out, double v) {
  switch (out) {
    case OutType::f16: return half_bits_to_double(float_to_half_bits(v));
    case OutType::bf16: return bf16_bits_to_double(float_to_bf16_bits(v));
    case OutType::f32: return static_cast<double>(static_cast<float>(v));
  }
  return std::nan("");
}

int precision_bits(OutType out) { return out == OutType::f32 ? 23 : out == OutType::bf16 ? 7 : 10; }
double smallest_subnormal(OutType out) {
  return std::exp2(out == OutType::f32 ? -149 : out == OutType::bf16 ? -133 : -24);
}

double out_type_largest(OutType out) {
  return out == OutType::f32 ? std::numeric_limits<float>::max() : out == OutType::bf16 ? 0x1.FEp127 : 65504.0;
}

bool same_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

// Checks every element of C against the naive computation and that nothing else was written.
// exact: bitwise equal to the naive float64 value rounded once. Otherwise within one output ulp
// of that value plus the float64 summation error of g and u carried through the activation.
void check(const DualCase& t, const DualActivation& act, bool exact, const std::string& what) {
  const std::size_t esize = out_type_size(t.out);
  for (std::size_t i = 0; i < t.c_elems; ++i) {
    const int row = static_cast<int>(i / t.ldc), col = static_cast<int>(i % t.ldc);
    if (row >= t.m || col >= t.n) {
      for (std::size_t byte = 0; byte < esize; ++byte)
        ASSERT_EQ(t.c[i * esize + byte], kSentinel) << what << ": wrote outside C at " << row << "," << col;
      continue;
    }
    const Product pg = naive_product(t, t.b1, row, col), pu = naive_product(t, t.b2, row, col);
    const double g = t.alpha1 * pg.value, u = t.alpha2 * pu.value;
    const double value = naive_act(act, g, u), expected = round_to(t.out, value);
    const double got = load_output(t.c.data(), t.out, static_cast<std::int64_t>(i));
    const std::string at = what + " at " + std::to_string(row) + "," + std::to_string(col);
    if (exact || std::isnan(value) || std::isnan(got)) {
      ASSERT_TRUE(same_value(got, expected)) << at << ": " << got << " vs " << expected << " (g " << g << ", u " << u << ")";
      continue;
    }
    const double eg = 2.0 * t.k * std::exp2(-53) * pg.abs_sum * std::fabs(t.alpha1);
    const double eu = 2.0 * t.k * std::exp2(-53) * pu.abs_sum * std::fabs(t.alpha2);
    // Lipschitz constants: |silu'| <= 1.1; |d/dg g*sigmoid(a*g)| <= 1 + |a| * limit / 4 below the clamp.
    const double lg = act.kind == Activation::silu ? 1.1 * (std::fabs(u) + eu)
                                                   : (1.0 + std::fabs(act.swiglu_alpha) * act.swiglu_limit / 4) *
                                                         (std::fmin(std::fabs(u), act.swiglu_limit) + 1.0);
    const double lu = std::fabs(g) + eg;
    const double bound = lg * eg + lu * eu + std::fabs(value) * (std::exp2(-precision_bits(t.out)) + 16 * std::exp2(-53)) +
                         smallest_subnormal(t.out);
    if (std::isinf(got)) {
      // Cancellation can leave the float64 sums far apart (the bound is then large): an infinite
      // output is right when the bound reaches past the largest finite value on its side.
      const double max_finite = out_type_largest(t.out);
      ASSERT_GE(std::signbit(got) ? -(value - bound) : value + bound, max_finite) << at << ": " << got << " vs " << value;
      continue;
    }
    ASSERT_LE(std::fabs(got - value), bound) << at << ": " << got << " vs " << value;
  }
}

struct Shape {
  int m, n, k_blocks;
  float alpha1, alpha2;
};

// Tiny; M = 0 (null pointers); rows past one 128-row atom; N past the reference's 256-column
// tile; K blocks not a multiple of 4 (blocked padding); alphas != 1, negative, small enough to
// put g and u on both sides of swigluoai's limit.
const Shape kShapes[] = {{5, 7, 4, 1.0f, 1.0f},     {0, 24, 2, 1.0f, 1.0f},       {33, 19, 3, -0.75f, 2.0f},
                         {130, 3, 5, 0.125f, -1.5f}, {3, 270, 2, 1e-4f, 3e-5f},   {9, 11, 1, 2.5f, 0.5f}};

const DualActivation kActivations[] = {{Activation::silu}, {Activation::swigluoai}, {Activation::swigluoai, 0.5, 2.0}};

std::string label(Format f, ScaleLayout l, OutType o, const DualActivation& a) {
  return std::string(to_string(f)) + "/" + to_string(l) + "/" + to_string(o) + "/" +
         (a.kind == Activation::silu ? "silu" : "swigluoai(" + std::to_string(a.swiglu_alpha) + "," +
                                                    std::to_string(a.swiglu_limit) + ")");
}

// NVFP4 over every finite E4M3 scale and MXFP4 over 2^-7..2^7: g and u are exact float64 sums
// in both, so the reference must equal the naive value rounded once, bit for bit.
TEST(DualReference, MatchesNaiveBitwise) {
  std::mt19937 rng(2101);
  for (Format f : {Format::nvfp4, Format::mxfp4})
    for (ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::blocked})
      for (OutType out : {OutType::f16, OutType::bf16, OutType::f32})
        for (const DualActivation& act : kActivations) {
          std::vector<DualCase> cases;
          for (const Shape& s : kShapes)
            cases.push_back(make_case(f, layout, out, s.m, s.n, s.k_blocks, s.alpha1, s.alpha2,
                                      f == Format::nvfp4 ? nvfp4_any_finite : mxfp4_moderate, rng));
          std::vector<DualHostGroup> groups;
          for (auto& t : cases) groups.push_back(view(t));
          dual_gemm(groups, f, layout, out, act, /*threads=*/3);
          for (std::size_t i = 0; i < cases.size(); ++i)
            check(cases[i], act, /*exact=*/true, label(f, layout, out, act) + " group " + std::to_string(i));
        }
}

// Guards the tests above against degenerate data: outputs are varied, swigluoai's clamps are
// reached and not reached, and alpha before the activation is not alpha after it.
TEST(DualReference, DataExercisesTheActivations) {
  std::mt19937 rng(7);
  DualCase t = make_case(Format::nvfp4, ScaleLayout::linear, OutType::f32, 3, 270, 2, 1e-4f, 3e-5f, nvfp4_any_finite, rng);
  int clamped_g = 0, free_g = 0, clamped_u = 0, free_u = 0;
  for (int r = 0; r < t.m; ++r)
    for (int c = 0; c < t.n; ++c) {
      const double g = t.alpha1 * naive_product(t, t.b1, r, c).value, u = t.alpha2 * naive_product(t, t.b2, r, c).value;
      (g > 7 ? clamped_g : free_g)++;
      (std::fabs(u) > 7 ? clamped_u : free_u)++;
    }
  EXPECT_GT(clamped_g, 20);
  EXPECT_GT(free_g, 20);
  EXPECT_GT(clamped_u, 20);
  EXPECT_GT(free_u, 20);
  // silu(2 g) u != 2 silu(g) u: the test data tell the two alpha placements apart.
  DualHostGroup d = view(t);
  dual_gemm(std::span(&d, 1), t.f, t.layout, t.out);
  int differs = 0;
  for (int c = 0; c < t.n; ++c) {
    const double g = t.alpha1 * naive_product(t, t.b1, 0, c).value, u = t.alpha2 * naive_product(t, t.b2, 0, c).value;
    const double after = static_cast<float>(t.alpha1 * naive_act({}, g / t.alpha1, u));
    differs += load_output(t.c.data(), t.out, c) != after;
  }
  EXPECT_GT(differs, t.n / 2);
}

// GPU MODE's generator: values {0, +-0.5, +-1, +-1.5}, scales {1, 2}. Every partial sum is a
// multiple of 0.25 far below 2^24, so g and u are exact in FP32 in any order (checked here with
// an FP32 accumulation), and the output is bit-identical to the naive value rounded once.
TEST(DualReference, GpuModeDataBitIdentical) {
  const std::uint8_t nibbles[7] = {0x0, 0x1, 0x2, 0x3, 0x9, 0xA, 0xB};
  std::mt19937 rng(5);
  for (ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::blocked})
    for (OutType out : {OutType::f16, OutType::bf16, OutType::f32})
      for (const DualActivation& act : {DualActivation{Activation::silu}, DualActivation{Activation::swigluoai}}) {
        DualCase t = make_case(Format::nvfp4, layout, out, 40, 24, 16, 1.f, 1.f, gpu_mode_scale, rng);
        for (Operand* o : {&t.a, &t.b1, &t.b2})
          for (int r = 0; r < o->rows; ++r)
            for (int kk = 0; kk < t.k; ++kk) formats::set_nibble(o->data.data() + r * o->ld, kk, nibbles[rng() % 7]);
        for (int r = 0; r < t.m; ++r)
          for (int c = 0; c < t.n; ++c)
            for (const Operand* b : {&t.b1, &t.b2}) {
              float fp32 = 0;  // reverse K order, FP32
              for (int kk = t.k - 1; kk >= 0; --kk)
                fp32 += static_cast<float>(dequant(t, t.a, r, kk)) * static_cast<float>(dequant(t, *b, c, kk));
              ASSERT_EQ(static_cast<double>(fp32), naive_product(t, *b, r, c).value);
            }
        DualHostGroup d = view(t);
        dual_gemm(std::span(&d, 1), Format::nvfp4, layout, out, act);
        check(t, act, /*exact=*/true, "gpu mode " + label(Format::nvfp4, layout, out, act));
      }
}

// MXFP4 scales over 2^-127..2^127: the float64 sums are no longer exact, so within one output
// rounding of the naive float64 value plus the summation error carried through the activation.
TEST(DualReference, MxfpFullRangeWithinOneRounding) {
  std::mt19937 rng(77);
  for (ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::blocked})
    for (OutType out : {OutType::f16, OutType::bf16, OutType::f32})
      for (const DualActivation& act : kActivations) {
        std::vector<DualCase> cases;
        for (const Shape& s : kShapes)
          cases.push_back(make_case(Format::mxfp4, layout, out, s.m, s.n, s.k_blocks, s.alpha1, s.alpha2, mxfp4_any_finite, rng));
        std::vector<DualHostGroup> groups;
        for (auto& t : cases) groups.push_back(view(t));
        dual_gemm(groups, Format::mxfp4, layout, out, act);
        for (std::size_t i = 0; i < cases.size(); ++i)
          check(cases[i], act, /*exact=*/false, label(Format::mxfp4, layout, out, act) + " group " + std::to_string(i));
      }
}

// Known values: g and u set through a one-element K block (A = [1, 0, ...], scales 1).
TEST(DualReference, KnownValues) {
  auto run = [](const DualActivation& act, float g, float u) {
    std::vector<std::uint8_t> a(8, 0), b1(8, 0), b2(8, 0), s(1, 0x38);  // E4M3 0x38 = 1
    a[0] = 0x2;  // 1.0
    b1[0] = b2[0] = 0x2;
    float c = 0;
    DualHostGroup d;
    d.m = d.n = 1, d.k = 16;
    d.a = a.data(), d.b1 = b1.data(), d.b2 = b2.data(), d.sfa = d.sfb1 = d.sfb2 = s.data();
    d.lda = d.ldb1 = d.ldb2 = 8;
    d.c = &c, d.ldc = 1;
    d.alpha1 = g, d.alpha2 = u;  // g = alpha1 * 1, u = alpha2 * 1
    dual_gemm(std::span(&d, 1), Format::nvfp4, ScaleLayout::linear, OutType::f32, act);
    return c;
  };
  const DualActivation silu{Activation::silu}, oai{Activation::swigluoai};
  EXPECT_EQ(run(silu, 1.f, 1.f), static_cast<float>(0.7310585786300049));  // 1 / (1 + e^-1)
  EXPECT_EQ(run(silu, 0.f, 5.f), 0.f);
  EXPECT_EQ(run(silu, -800.f, 2.f), -0.f);  // exp(800) overflows: g / inf = -0, no NaN
  EXPECT_TRUE(std::signbit(run(silu, -800.f, 2.f)));
  // swigluoai: g = 10 is clamped to 7, u = -9 to -7; the lower side of g is not clamped.
  EXPECT_EQ(run(oai, 10.f, -9.f), static_cast<float>(7.0 / (1.0 + std::exp(-1.702 * 7.0)) * -6.0));
  EXPECT_EQ(run(oai, -10.f, 9.f), static_cast<float>(-10.0 / (1.0 + std::exp(17.02)) * 8.0));
  EXPECT_EQ(run(oai, 1.f, -1.f), 0.f);  // u + 1 = 0
  EXPECT_EQ(run({Activation::swigluoai, 1.0, std::numeric_limits<double>::infinity()}, 10.f, 9.f),
            static_cast<float>(10.0 / (1.0 + std::exp(-10.0)) * 10.0));  // limit = inf: no clamp
}

// A NaN scale makes the rows / columns it contributes to NaN, through either product and
// through swigluoai's clamps.
TEST(DualReference, NanScalesPropagate) {
  for (Format f : {Format::nvfp4, Format::mxfp4})
    for (ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::blocked})
      for (const DualActivation& act : kActivations) {
        std::mt19937 rng(8);
        DualCase t = make_case(f, layout, OutType::bf16, 6, 9, 3, 1e-3f, 1e-3f,
                               f == Format::nvfp4 ? nvfp4_any_finite : mxfp4_moderate, rng);
        const int cols = 3;
        t.a.scales[formats::scale_offset(layout, 1, 2, cols)] = 0xFF;   // row 1 of C
        t.b1.scales[formats::scale_offset(layout, 4, 0, cols)] = 0xFF;  // column 4 (gate)
        t.b2.scales[formats::scale_offset(layout, 7, 1, cols)] = 0xFF;  // column 7 (up)
        DualHostGroup d = view(t);
        dual_gemm(std::span(&d, 1), f, layout, t.out, act);
        for (int r = 0; r < t.m; ++r)
          for (int c = 0; c < t.n; ++c)
            EXPECT_EQ(std::isnan(load_output(t.c.data(), t.out, r * t.ldc + c)), r == 1 || c == 4 || c == 7)
                << label(f, layout, t.out, act) << " at " << r << "," << c;
        check(t, act, /*exact=*/true, "nan " + label(f, layout, t.out, act));
      }
}

TEST(DualReference, DeterministicAcrossThreadCounts) {
  std::mt19937 rng(61);
  DualCase t = make_case(Format::mxfp4, ScaleLayout::blocked, OutType::f32, 70, 300, 4, 0.3f, -0.7f, mxfp4_any_finite, rng);
  std::vector<std::vector<std::uint8_t>> results;
  for (int threads : {1, 2, 5, 0}) {
    std::fill(t.c.begin(), t.c.end(), kSentinel);
    DualHostGroup d = view(t);
    dual_gemm(std::span(&d, 1), t.f, t.layout, t.out, {Activation::swigluoai}, threads);
    results.push_back(t.c);
  }
  for (std::size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]) << i;
}

// Errors name the argument (and group) and are raised before anything is written.
TEST(DualReference, RejectsBadArguments) {
  std::vector<std::uint8_t> buf(4096);
  std::vector<float> c(64, 42.f);
  DualHostGroup ok;
  ok.m = ok.n = 2, ok.k = 32;
  ok.a = ok.b1 = ok.b2 = ok.sfa = ok.sfb1 = ok.sfb2 = buf.data();
  ok.lda = ok.ldb1 = ok.ldb2 = 16;
  ok.c = c.data();
  ok.ldc = 8;
  EXPECT_NO_THROW(dual_gemm(std::span(&ok, 1), Format::nvfp4, ScaleLayout::linear, OutType::f32));
  std::fill(c.begin(), c.end(), 42.f);
  auto expect_error = [&](DualHostGroup bad, Format f, const DualActivation& act, const std::string& argument, int group) {
    const DualHostGroup groups[2] = {ok, bad};
    try {
      dual_gemm(groups, f, ScaleLayout::linear, OutType::f32, act);
      ADD_FAILURE() << "no error for " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument);
      EXPECT_EQ(e.group(), group);
    }
    for (float v : c) ASSERT_EQ(v, 42.f) << argument << ": wrote before failing";
  };
  const DualActivation silu{Activation::silu};
  DualHostGroup bad = ok;
  bad.b2 = nullptr;
  expect_error(bad, Format::nvfp4, silu, "groups[1].b2", 1);
  bad = ok;
  bad.b1 = nullptr;
  expect_error(bad, Format::nvfp4, silu, "groups[1].b1", 1);
  bad = ok;
  bad.ldb2 = 8;  // B2's rows shorter than K/2: its shape does not match B1's
  expect_error(bad, Format::nvfp4, silu, "groups[1].ldb2", 1);
  bad = ok;
  bad.ldb1 = 15;
  expect_error(bad, Format::nvfp4, silu, "groups[1].ldb1", 1);
  bad = ok;
  bad.sfb2 = nullptr;
  expect_error(bad, Format::nvfp4, silu, "groups[1].sfb2", 1);
  bad = ok;
  bad.sfb1 = nullptr;
  expect_error(bad, Format::nvfp4, silu, "groups[1].sfb1", 1);
  bad = ok;
  bad.sfa = nullptr;
  expect_error(bad, Format::nvfp4, silu, "groups[1].sfa", 1);
  bad = ok;
  bad.k = 16;
  expect_error(bad, Format::mxfp4, silu, "groups[1].k", 1);
  bad = ok;
  bad.ldc = 1;
  expect_error(bad, Format::nvfp4, silu, "groups[1].ldc", 1);
  bad = ok;
  bad.m = -1;
  expect_error(bad, Format::nvfp4, silu, "groups[1].m", 1);
  expect_error(ok, Format::nvfp4, {Activation::swigluoai, 1.702, 0.0}, "activation.swiglu_limit", -1);
  expect_error(ok, Format::nvfp4, {Activation::swigluoai, 1.702, std::nan("")}, "activation.swiglu_limit", -1);
  expect_error(ok, Format::nvfp4, {Activation::swigluoai, std::numeric_limits<double>::infinity(), 7.0},
               "activation.swiglu_alpha", -1);
  expect_error(ok, Format::nvfp4, {static_cast<Activation>(9)}, "activation.kind", -1);
  // silu ignores the swigluoai parameters.
  EXPECT_NO_THROW(dual_gemm(std::span(&ok, 1), Format::nvfp4, ScaleLayout::linear, OutType::f32,
                            {Activation::silu, std::nan(""), -1.0}));
}

}  // namespace
}  // namespace fp4gemm
