// Host tests of the exact CPU reference: output conversions and grouped GEMM vs a naive loop.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/reference.hpp"

namespace fp4gemm {
namespace {

using namespace reference;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- independent decoders --------------------------------------------------------------------

double half_expected(std::uint16_t h) {  // IEEE binary16: 1.5.10, bias 15
  const int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 31 ? (m ? kNaN : kInf) : e == 0 ? m * std::exp2(-24) : (1.0 + m / 1024.0) * std::exp2(e - 15);
  return (h & 0x8000) ? -v : v;
}

double bf16_expected(std::uint16_t h) {  // bfloat16: 1.8.7, bias 127
  const int e = (h >> 7) & 255, m = h & 127;
  double v = e == 255 ? (m ? kNaN : kInf) : e == 0 ? m * std::exp2(-133) : (1.0 + m / 128.0) * std::exp2(e - 127);
  return (h & 0x8000) ? -v : v;
}

bool same_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

struct Codec {
  const char* name;
  std::uint16_t (*encode)(double);
  double (*decode)(std::uint16_t);
  double (*expected)(std::uint16_t);
  std::uint16_t inf;  // +inf bits; the largest finite is inf - 1
};

const Codec kCodecs[] = {
    {"f16", float_to_half_bits, half_bits_to_double, half_expected, 0x7C00},
    {"bf16", float_to_bf16_bits, bf16_bits_to_double, bf16_expected, 0x7F80},
};

TEST(OutputConversion, DecodeEveryPatternAndRoundTrip) {
  for (const Codec& c : kCodecs) {
    int nans = 0;
    for (std::uint32_t h = 0; h < 65536; ++h) {
      const auto bits = static_cast<std::uint16_t>(h);
      const double v = c.decode(bits);
      ASSERT_TRUE(same_value(v, c.expected(bits))) << c.name << " " << h;
      if (std::isnan(v)) {
        ++nans;
        const std::uint16_t back = c.encode(v);
        EXPECT_TRUE(std::isnan(c.decode(back))) << c.name << " " << h;
      } else {
        ASSERT_EQ(c.encode(v), bits) << c.name << " " << h;
      }
    }
    EXPECT_EQ(nans, 2 * (c.inf == 0x7C00 ? 1023 : 127)) << c.name;
  }
}

// Every midpoint between neighbours goes to the even code; just off it, to the nearer one. The
// midpoint between the largest finite value and the next (non-existent) binade overflows.
TEST(OutputConversion, TiesSubnormalsAndOverflow) {
  for (const Codec& c : kCodecs) {
    for (std::uint16_t h = 0; h < c.inf; ++h) {
      const double lo = c.expected(h);
      const double hi = h + 1 < c.inf ? c.expected(h + 1) : 2 * lo - c.expected(h - 1);  // one more step
      const double mid = 0.5 * (lo + hi);
      const std::uint16_t even = (h & 1) ? static_cast<std::uint16_t>(h + 1) : h;
      for (double sign : {1.0, -1.0}) {
        const std::uint16_t s = sign < 0 ? 0x8000 : 0;
        ASSERT_EQ(c.encode(sign * mid), even | s) << c.name << " " << h;
        ASSERT_EQ(c.encode(sign * std::nextafter(mid, 0.0)), h | s) << c.name << " " << h;
        ASSERT_EQ(c.encode(sign * std::nextafter(mid, kInf)), (h + 1) | s) << c.name << " " << h;
      }
    }
    EXPECT_EQ(c.encode(kInf), c.inf);
    EXPECT_EQ(c.encode(-kInf), c.inf | 0x8000);
    EXPECT_EQ(c.encode(1e300), c.inf);
    EXPECT_EQ(c.encode(-1e300), c.inf | 0x8000);
    EXPECT_EQ(c.encode(0.0), 0);
    EXPECT_EQ(c.encode(-0.0), 0x8000);
    EXPECT_EQ(c.encode(std::numeric_limits<double>::denorm_min()), 0);
    EXPECT_EQ(c.encode(-std::numeric_limits<double>::denorm_min()), 0x8000);
    EXPECT_TRUE(std::isnan(c.decode(c.encode(kNaN))));
    EXPECT_TRUE(std::isnan(c.decode(c.encode(-kNaN))));
  }
  // Hand-worked f16 values.
  EXPECT_EQ(float_to_half_bits(65504.0), 0x7BFF);
  EXPECT_EQ(float_to_half_bits(65519.99), 0x7BFF);
  EXPECT_EQ(float_to_half_bits(65520.0), 0x7C00);
  EXPECT_EQ(float_to_half_bits(std::exp2(-24)), 0x0001);
  EXPECT_EQ(float_to_half_bits(std::exp2(-25)), 0x0000);       // tie -> even (0)
  EXPECT_EQ(float_to_half_bits(3 * std::exp2(-25)), 0x0002);   // tie -> even (2)
  EXPECT_EQ(float_to_half_bits(std::exp2(-25) * 1.0000001), 0x0001);
  EXPECT_EQ(float_to_half_bits(-std::exp2(-26)), 0x8000);
  EXPECT_EQ(float_to_half_bits(std::exp2(-14) - std::exp2(-25)), 0x0400);  // tie -> min normal
  EXPECT_EQ(float_to_half_bits(1.0), 0x3C00);
  EXPECT_EQ(float_to_half_bits(-2.5), 0xC100);
  // Hand-worked bf16 values.
  EXPECT_EQ(float_to_bf16_bits(1.0), 0x3F80);
  EXPECT_EQ(float_to_bf16_bits(1.0 + std::exp2(-8)), 0x3F80);  // tie -> even
  EXPECT_EQ(float_to_bf16_bits(1.0 + 3 * std::exp2(-8)), 0x3F82);
  EXPECT_EQ(float_to_bf16_bits(std::exp2(-133)), 0x0001);      // smallest subnormal
  EXPECT_EQ(float_to_bf16_bits(std::exp2(-134)), 0x0000);      // tie -> 0
  EXPECT_EQ(float_to_bf16_bits(std::exp2(128)), 0x7F80);
  EXPECT_EQ(float_to_bf16_bits(3.0e38), 0x7F62);
}

// Rounding straight from double: a value just above a tie must not be rounded to the tie first
// (as a detour through float would do) and then to even.
TEST(OutputConversion, NoDoubleRounding) {
  EXPECT_EQ(float_to_half_bits(1.0 + std::exp2(-11) + std::exp2(-40)), 0x3C01);
  EXPECT_EQ(float_to_bf16_bits(1.0 + std::exp2(-8) + std::exp2(-40)), 0x3F81);
  EXPECT_EQ(float_to_bf16_bits(-(1.0 + std::exp2(-8) + std::exp2(-40))), 0xBF81);
  EXPECT_EQ(float_to_bf16_bits(std::exp2(-134) + std::exp2(-170)), 0x0001);
}

TEST(OutputConversion, RandomDoublesRoundToNearest) {
  std::mt19937_64 rng(41);
  std::uniform_real_distribution<double> log_mag(-140.0, 130.0), frac(1.0, 2.0);
  for (const Codec& c : kCodecs) {
    for (int i = 0; i < 200000; ++i) {
      const double x = std::ldexp(frac(rng), static_cast<int>(log_mag(rng)));
      const std::uint16_t r = c.encode(x);
      if (r == c.inf) {  // overflowed: must be at least the midpoint above the largest finite
        const double top = c.expected(c.inf - 1), step = top - c.expected(c.inf - 2);
        ASSERT_GE(x, top + step / 2) << c.name << " " << x;
        continue;
      }
      ASSERT_LT(r, c.inf);
      const double v = c.expected(r), d = std::fabs(x - v);
      const double up = r + 1 < c.inf ? c.expected(r + 1) : v + (v - c.expected(r - 1));
      ASSERT_LE(d, std::fabs(up - x)) << c.name << " " << x;
      if (r > 0) ASSERT_LE(d, std::fabs(x - c.expected(r - 1))) << c.name << " " << x;
      if (r > 0 && d == std::fabs(x - c.expected(r - 1))) ASSERT_EQ(r & 1, 0);
      if (d == std::fabs(up - x)) ASSERT_EQ(r & 1, 0);
    }
  }
#ifdef __FLT16_MANT_DIG__
  // The compiler's own double -> _Float16 conversion (libgcc, RNE) as a second oracle.
  std::uniform_real_distribution<double> small_log(-30.0, 17.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = (rng() & 1 ? -1 : 1) * std::ldexp(frac(rng), static_cast<int>(small_log(rng)));
    const _Float16 h = static_cast<_Float16>(x);
    std::uint16_t bits;
    std::memcpy(&bits, &h, 2);
    ASSERT_EQ(float_to_half_bits(x), bits) << x;
  }
#endif
}

TEST(OutputConversion, LoadOutput) {
  const std::uint16_t halves[3] = {0x3C00, 0xC100, 0x7C00};
  EXPECT_EQ(load_output(halves, OutType::f16, 0), 1.0);
  EXPECT_EQ(load_output(halves, OutType::f16, 1), -2.5);
  EXPECT_EQ(load_output(halves, OutType::f16, 2), kInf);
  const std::uint16_t bf[2] = {0x3F80, 0xC020};
  EXPECT_EQ(load_output(bf, OutType::bf16, 0), 1.0);
  EXPECT_EQ(load_output(bf, OutType::bf16, 1), -2.5);
  const float f[2] = {0.1f, -3.0f};
  EXPECT_EQ(load_output(f, OutType::f32, 0), static_cast<double>(0.1f));
  EXPECT_EQ(load_output(f, OutType::f32, 1), -3.0);
}

// ---- grouped GEMM vs a naive triple loop ------------------------------------------------------

using ScaleGen = std::uint8_t (*)(std::mt19937&);

std::uint8_t nvfp4_any_finite(std::mt19937& rng) {  // every finite E4M3 code, both signs
  return static_cast<std::uint8_t>((rng() % 0x7F) | (rng() & 0x80));
}
std::uint8_t mxfp4_moderate(std::mt19937& rng) {  // 2^-7 .. 2^7: all sums exact in float64
  return static_cast<std::uint8_t>(120 + rng() % 15);
}
std::uint8_t mxfp4_any_finite(std::mt19937& rng) { return static_cast<std::uint8_t>(rng() % 255); }

struct TestGroup {
  int m = 0, n = 0, k = 0;
  float alpha = 1.f;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::vector<std::uint8_t> a, b, sfa, sfb;  // sfa / sfb in the layout under test
  std::vector<std::uint8_t> c;               // bytes; filled with a sentinel
  std::size_t c_elems = 0;
};

constexpr std::uint8_t kSentinel = 0xA5;

std::vector<std::uint8_t> make_scales(Format f, ScaleLayout layout, int rows, int cols, ScaleGen gen,
                                      std::mt19937& rng) {
  std::vector<std::uint8_t> linear(static_cast<std::size_t>(rows) * cols);
  for (auto& v : linear) v = gen(rng);
  if (layout == ScaleLayout::linear) return linear;
  std::vector<std::uint8_t> blocked(formats::blocked_scale_bytes(rows, cols));
  formats::linear_to_blocked(linear.data(), rows, cols, blocked.data());
  // Poison the padding with NaN codes: the reference must never read it.
  std::vector<bool> used(blocked.size(), false);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) used[formats::blocked_offset(r, c, cols)] = true;
  for (std::size_t i = 0; i < blocked.size(); ++i)
    if (!used[i]) blocked[i] = f == Format::nvfp4 ? 0x7F : 0xFF;
  return blocked;
}

TestGroup make_group(Format f, ScaleLayout layout, OutType out, int m, int n, int k_blocks, float alpha,
                     ScaleGen gen, std::mt19937& rng) {
  TestGroup g;
  g.m = m;
  g.n = n;
  g.k = k_blocks * scale_block_size(f);
  g.alpha = alpha;
  g.lda = g.k / 2 + 16;  // the 16 bytes past K are junk that must be ignored
  g.ldb = g.k / 2 + 32;
  g.ldc = (n + 7) / 8 * 8 + 8;
  if (m > 0) {
    g.a.resize(static_cast<std::size_t>(m) * g.lda);
    for (auto& v : g.a) v = static_cast<std::uint8_t>(rng());
    g.sfa = make_scales(f, layout, m, k_blocks, gen, rng);
  }
  g.b.resize(static_cast<std::size_t>(n) * g.ldb);
  for (auto& v : g.b) v = static_cast<std::uint8_t>(rng());
  g.sfb = make_scales(f, layout, n, k_blocks, gen, rng);
  g.c_elems = static_cast<std::size_t>(m) * g.ldc + 16;  // and 16 elements past the last row
  g.c.assign(g.c_elems * out_type_size(out), kSentinel);
  return g;
}

HostGroup host_view(TestGroup& g) {
  HostGroup h;
  h.m = g.m;
  h.n = g.n;
  h.k = g.k;
  h.a = g.a.empty() ? nullptr : g.a.data();
  h.lda = g.lda;
  h.b = g.b.empty() ? nullptr : g.b.data();
  h.ldb = g.ldb;
  h.sfa = g.sfa.empty() ? nullptr : g.sfa.data();
  h.sfb = g.sfb.empty() ? nullptr : g.sfb.data();
  h.c = g.m == 0 ? nullptr : g.c.data();
  h.ldc = g.ldc;
  h.alpha = g.alpha;
  return h;
}

struct Naive {
  double value;    // alpha * sum, float64, element by element in K order
  double abs_sum;  // |alpha| * sum of |terms|, for error bounds
};

Naive naive_element(const TestGroup& g, Format f, ScaleLayout layout, int row, int col) {
  const int vec = scale_block_size(f);
  const int cols = g.k / vec;
  double acc = 0, abs_acc = 0;
  for (int kk = 0; kk < g.k; ++kk) {
    const double sa = formats::scale_to_float(f, g.sfa[formats::scale_offset(layout, row, kk / vec, cols)]);
    const double sb = formats::scale_to_float(f, g.sfb[formats::scale_offset(layout, col, kk / vec, cols)]);
    const double a = formats::e2m1_to_float(formats::get_nibble(g.a.data() + row * g.lda, kk)) * sa;
    const double b = formats::e2m1_to_float(formats::get_nibble(g.b.data() + col * g.ldb, kk)) * sb;
    acc += a * b;
    abs_acc += std::fabs(a * b);
  }
  return {acc * static_cast<double>(g.alpha), abs_acc * std::fabs(static_cast<double>(g.alpha))};
}

double round_to(OutType out, double v) {
  switch (out) {
    case OutType::f16: return half_expected(float_to_half_bits(v));
    case OutType::bf16: return bf16_expected(float_to_bf16_bits(v));
    case OutType::f32: return static_cast<double>(static_cast<float>(v));
  }
  return kNaN;
}

// Checks every element of C against the naive loop (bitwise when `exact`, else within the
// float64 summation error bound plus one output ulp), and that nothing else was written.
void check_group(const TestGroup& g, Format f, ScaleLayout layout, OutType out, bool exact,
                 const std::string& what) {
  const std::size_t esize = out_type_size(out);
  for (std::size_t i = 0; i < g.c_elems; ++i) {
    const std::int64_t row = static_cast<std::int64_t>(i) / g.ldc, col = static_cast<std::int64_t>(i) % g.ldc;
    const bool inside = row < g.m && col < g.n;
    if (!inside) {
      for (std::size_t byte = 0; byte < esize; ++byte)
        ASSERT_EQ(g.c[i * esize + byte], kSentinel) << what << ": wrote outside C at " << row << "," << col;
      continue;
    }
    const Naive ref = naive_element(g, f, layout, static_cast<int>(row), static_cast<int>(col));
    const double expected = round_to(out, ref.value);
    const double got = load_output(g.c.data(), out, static_cast<std::int64_t>(i));
    if (std::isnan(expected) || std::isnan(got)) {
      ASSERT_TRUE(std::isnan(expected) && std::isnan(got)) << what << " at " << row << "," << col;
      continue;
    }
    if (exact) {
      ASSERT_TRUE(same_value(got, expected)) << what << " at " << row << "," << col << ": " << got << " vs " << expected;
    } else if (std::isinf(expected) || std::isinf(got)) {
      ASSERT_EQ(got, expected) << what << " at " << row << "," << col;
    } else {
      const double ulp = std::fabs(expected) * std::exp2(out == OutType::f32 ? -23 : out == OutType::bf16 ? -7 : -10);
      const double tiny = std::exp2(out == OutType::f32 ? -149 : out == OutType::bf16 ? -133 : -24);
      const double bound = 2.0 * g.k * std::exp2(-53) * ref.abs_sum + ulp + tiny;
      ASSERT_LE(std::fabs(got - expected), bound) << what << " at " << row << "," << col;
    }
  }
}

struct Shape {
  int m, n, k_blocks;
  float alpha;
};

// Shapes: tiny; M = 0 (null pointers); rows past one 128-row atom; N past one and two 256-column
// tiles of the reference; K blocks not a multiple of 4 (scale-column padding in the blocked
// layout); alpha != 1.
const Shape kShapes[] = {{5, 7, 4, 1.0f},      {0, 24, 2, 1.0f},    {33, 19, 3, -0.75f},
                         {1, 70, 5, 2.5f},     {130, 3, 9, 0.125f}, {17, 129, 1, 3.0f},
                         {6, 300, 2, -1.5f},   {3, 530, 3, 1.0f}};

const char* name(ScaleLayout l) { return to_string(l); }

TEST(ReferenceGemm, MatchesNaiveLoopExactly) {
  std::mt19937 rng(1234);
  for (Format f : {Format::nvfp4, Format::mxfp4})
    for (ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::blocked})
      for (OutType out : {OutType::f16, OutType::bf16, OutType::f32}) {
        std::vector<TestGroup> groups;
        for (const Shape& s : kShapes)
          groups.push_back(make_group(f, layout, out, s.m, s.n, s.k_blocks, s.alpha,
                                      f == Format::nvfp4 ? nvfp4_any_finite : mxfp4_moderate, rng));
        std::vector<HostGroup> views;
        for (auto& g : groups) views.push_back(host_view(g));
        grouped_gemm(views, f, layout, out, /*threads=*/3);
        const std::string what = std::string(to_string(f)) + "/" + name(layout) + "/" + to_string(out);
        for (std::size_t i = 0; i < groups.size(); ++i)
          check_group(groups[i], f, layout, out, /*exact=*/true, what + " group " + std::to_string(i));
      }
}

// Outputs of this set are not all zero or all equal (guards the exact test against a degenerate
// generator that would let a wrong implementation pass).
TEST(ReferenceGemm, OutputsAreNonTrivial) {
  std::mt19937 rng(99);
  TestGroup g = make_group(Format::nvfp4, ScaleLayout::linear, OutType::f32, 8, 8, 2, 1.f, nvfp4_any_finite, rng);
  HostGroup h = host_view(g);
  grouped_gemm(std::span(&h, 1), Format::nvfp4, ScaleLayout::linear, OutType::f32);
  std::set<double> distinct;
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c) distinct.insert(load_output(g.c.data(), OutType::f32, r * g.ldc + c));
  EXPECT_GT(distinct.size(), 40u);
}

// MXFP4 scales over the whole range 2^-127 .. 2^127: sums are no longer exact in float64, so
// compare within the float64 summation bound (plus one output ulp).
TEST(ReferenceGemm, MxfpFullScaleRangeWithinSummationBound) {
  std::mt19937 rng(77);
  for (ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::blocked})
    for (OutType out : {OutType::f32, OutType::bf16}) {
      std::vector<TestGroup> groups;
      for (const Shape& s : kShapes)
        groups.push_back(make_group(Format::mxfp4, layout, out, s.m, s.n, s.k_blocks, s.alpha, mxfp4_any_finite, rng));
      std::vector<HostGroup> views;
      for (auto& g : groups) views.push_back(host_view(g));
      grouped_gemm(views, Format::mxfp4, layout, out);
      for (std::size_t i = 0; i < groups.size(); ++i)
        check_group(groups[i], Format::mxfp4, layout, out, /*exact=*/false, "mxfp4 full range group " + std::to_string(i));
    }
}

// GPU MODE's generator: values {0, +-0.5, +-1, +-1.5}, scales {1, 2}; fp16 output bit-exact.
TEST(ReferenceGemm, GpuModeValueSet) {
  std::mt19937 rng(5);
  const std::uint8_t nibbles[7] = {0x0, 0x1, 0x2, 0x3, 0x9, 0xA, 0xB};
  TestGroup g = make_group(Format::nvfp4, ScaleLayout::blocked, OutType::f16, 40, 24, 8, 1.f,
                           [](std::mt19937& r) { return static_cast<std::uint8_t>(r() & 1 ? 0x38 : 0x40); }, rng);
  for (int r = 0; r < g.m; ++r)
    for (int kk = 0; kk < g.k; ++kk) formats::set_nibble(g.a.data() + r * g.lda, kk, nibbles[rng() % 7]);
  for (int r = 0; r < g.n; ++r)
    for (int kk = 0; kk < g.k; ++kk) formats::set_nibble(g.b.data() + r * g.ldb, kk, nibbles[rng() % 7]);
  HostGroup h = host_view(g);
  grouped_gemm(std::span(&h, 1), Format::nvfp4, ScaleLayout::blocked, OutType::f16);
  check_group(g, Format::nvfp4, ScaleLayout::blocked, OutType::f16, /*exact=*/true, "gpu mode set");
}

TEST(ReferenceGemm, NanScalePropagatesToRowAndColumn) {
  for (Format f : {Format::nvfp4, Format::mxfp4})
    for (ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::blocked})
      for (OutType out : {OutType::f16, OutType::bf16, OutType::f32}) {
        std::mt19937 rng(8);
        TestGroup g = make_group(f, layout, out, 6, 9, 3, 1.5f, f == Format::nvfp4 ? nvfp4_any_finite : mxfp4_moderate, rng);
        const int cols = 3;
        // E4M3 has two NaN codes (0xFF, 0x7F); UE8M0 one (0xFF).
        const std::uint8_t nan_code = 0xFF, nan_code2 = f == Format::nvfp4 ? 0x7F : 0xFF;
        // Row 1 of A: block 2 has a NaN scale and all-zero elements (0 * NaN is NaN).
        g.sfa[formats::scale_offset(layout, 1, 2, cols)] = nan_code;
        for (int kk = 2 * scale_block_size(f); kk < 3 * scale_block_size(f); ++kk)
          formats::set_nibble(g.a.data() + 1 * g.lda, kk, 0);
        // Row 4 of B: block 0 has a NaN scale.
        g.sfb[formats::scale_offset(layout, 4, 0, cols)] = nan_code2;
        HostGroup h = host_view(g);
        grouped_gemm(std::span(&h, 1), f, layout, out);
        for (int r = 0; r < g.m; ++r)
          for (int c = 0; c < g.n; ++c)
            EXPECT_EQ(std::isnan(load_output(g.c.data(), out, r * g.ldc + c)), r == 1 || c == 4)
                << to_string(f) << "/" << name(layout) << "/" << to_string(out) << " at " << r << "," << c;
        check_group(g, f, layout, out, /*exact=*/true, "nan case");
      }
}

TEST(ReferenceGemm, DeterministicAcrossThreadCounts) {
  std::mt19937 rng(61);
  TestGroup g = make_group(Format::mxfp4, ScaleLayout::blocked, OutType::f32, 150, 140, 8, 0.3f, mxfp4_any_finite, rng);
  std::vector<std::vector<std::uint8_t>> results;
  for (int threads : {1, 2, 5, 0}) {
    std::fill(g.c.begin(), g.c.end(), kSentinel);
    HostGroup h = host_view(g);
    grouped_gemm(std::span(&h, 1), Format::mxfp4, ScaleLayout::blocked, OutType::f32, threads);
    results.push_back(g.c);
  }
  for (std::size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]) << i;
}

TEST(ReferenceGemm, EmptyKGivesZeros) {
  std::vector<std::uint16_t> c(2 * 8, 0xFFFF);
  HostGroup h;
  h.m = 2;
  h.n = 3;
  h.k = 0;
  h.c = c.data();
  h.ldc = 8;
  h.alpha = -2.f;  // 0 * -2 = -0, as IEEE arithmetic gives
  grouped_gemm(std::span(&h, 1), Format::nvfp4, ScaleLayout::linear, OutType::bf16);
  for (int r = 0; r < 2; ++r)
    for (int col = 0; col < 8; ++col) EXPECT_EQ(c[r * 8 + col], col < 3 ? 0x8000 : 0xFFFF) << r << "," << col;
}

TEST(ReferenceGemm, RejectsBadGroups) {
  std::vector<std::uint8_t> buf(4096);
  std::vector<float> c(64);
  HostGroup ok;
  ok.m = 2;
  ok.n = 2;
  ok.k = 32;
  ok.a = ok.b = ok.sfa = ok.sfb = buf.data();
  ok.lda = ok.ldb = 16;
  ok.c = c.data();
  ok.ldc = 8;
  EXPECT_NO_THROW(grouped_gemm(std::span(&ok, 1), Format::nvfp4, ScaleLayout::linear, OutType::f32));
  auto expect_error = [&](HostGroup bad, Format f, const std::string& argument) {
    const HostGroup groups[2] = {ok, bad};
    try {
      grouped_gemm(groups, f, ScaleLayout::linear, OutType::f32);
      ADD_FAILURE() << "no error for " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument);
      EXPECT_EQ(e.group(), 1);
    }
  };
  HostGroup bad = ok;
  bad.k = 40;
  expect_error(bad, Format::nvfp4, "groups[1].k");
  bad = ok;
  bad.k = 16;
  expect_error(bad, Format::mxfp4, "groups[1].k");
  bad = ok;
  bad.m = -1;
  expect_error(bad, Format::nvfp4, "groups[1].m");
  bad = ok;
  bad.ldc = 1;
  expect_error(bad, Format::nvfp4, "groups[1].ldc");
  bad = ok;
  bad.c = nullptr;
  expect_error(bad, Format::nvfp4, "groups[1].c");
  bad = ok;
  bad.sfb = nullptr;
  expect_error(bad, Format::nvfp4, "groups[1].sfb");
  bad = ok;
  bad.lda = 8;
  expect_error(bad, Format::nvfp4, "groups[1].lda");
}

}  // namespace
}  // namespace fp4gemm
