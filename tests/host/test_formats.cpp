// Host tests of the format helpers: codecs, nibble packing, scale layouts, quantiser (SPEC §1-§2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "formats/scale_layout.hpp"
#include "fp4gemm/formats.hpp"

namespace fp4gemm {
namespace {

using namespace formats;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- independent decoders, written from the bit layouts -------------------------------------

// e2m1: s e1 e0 m, bias 1, subnormal (e == 0) value m * 0.5.
double e2m1_expected(unsigned nibble) {
  const unsigned e = (nibble >> 1) & 3u, m = nibble & 1u;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, static_cast<int>(e) - 1);
  return (nibble & 8u) ? -mag : mag;
}

// E4M3 (fn): s eeee mmm, bias 7, subnormal m * 2^-9, S.1111.111 NaN, no infinities.
double e4m3_expected(unsigned code) {
  if ((code & 0x7Fu) == 0x7Fu) return std::nan("");
  const unsigned e = (code >> 3) & 15u, m = code & 7u;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, static_cast<int>(e) - 7);
  return (code & 0x80u) ? -mag : mag;
}

double ue8m0_expected(unsigned code) {
  return code == 0xFF ? std::nan("") : std::ldexp(1.0, static_cast<int>(code) - 127);
}

bool same_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

// Brute-force nearest code among `codes` (positive magnitudes): minimal distance, ties to the code
// with an even least-significant bit (= even mantissa on these grids). Codes beyond the largest
// are never chosen, which is exactly saturation.
unsigned nearest_code(double a, const std::vector<unsigned>& codes, double (*decode)(unsigned)) {
  unsigned best = codes[0];
  double best_d = std::fabs(a - decode(best));
  for (unsigned c : codes) {
    const double d = std::fabs(a - decode(c));
    if (d < best_d || (d == best_d && (c & 1u) == 0 && (best & 1u) == 1)) best = c, best_d = d;
  }
  return best;
}

std::vector<unsigned> range_codes(unsigned lo, unsigned hi) {
  std::vector<unsigned> v;
  for (unsigned c = lo; c <= hi; ++c) v.push_back(c);
  return v;
}

// ---- e2m1 ------------------------------------------------------------------------------------

TEST(E2m1, AllSixteenNibbles) {
  const double table[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};  // SPEC §1
  for (unsigned n = 0; n < 16; ++n) {
    const double expected = (n & 8u) ? -table[n & 7u] : table[n & 7u];
    EXPECT_TRUE(same_value(e2m1_to_float(static_cast<std::uint8_t>(n)), expected)) << n;
    EXPECT_TRUE(same_value(e2m1_expected(n), expected)) << n;
    // Only the low 4 bits are used.
    EXPECT_TRUE(same_value(e2m1_to_float(static_cast<std::uint8_t>(n | 0xA0)), expected)) << n;
    // Round trip of every code (-0 keeps its sign bit).
    EXPECT_EQ(float_to_e2m1(static_cast<float>(expected)), n) << n;
  }
}

TEST(E2m1, TiesRoundToEven) {
  struct Case { float x; std::uint8_t code; };
  // Midpoints of adjacent grid values go to the even mantissa (codes 0,2,4,6).
  const Case cases[] = {{0.25f, 0x0}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4},
                        {2.5f, 0x4},  {3.5f, 0x6},  {5.0f, 0x6}};
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_e2m1(c.x), c.code) << c.x;
    EXPECT_EQ(float_to_e2m1(-c.x), c.code | 0x8) << -c.x;
    // Just off the tie the nearest neighbour wins.
    EXPECT_EQ(float_to_e2m1(std::nextafter(c.x, 0.f)), nearest_code(std::nextafter(c.x, 0.f), range_codes(0, 7), [](unsigned n) { return e2m1_expected(n); }));
    const float up = std::nextafter(c.x, kInf);
    EXPECT_EQ(float_to_e2m1(up), nearest_code(up, range_codes(0, 7), [](unsigned n) { return e2m1_expected(n); }));
  }
  EXPECT_EQ(float_to_e2m1(std::nextafter(0.25f, 1.f)), 0x1);
  EXPECT_EQ(float_to_e2m1(std::nextafter(5.0f, 9.f)), 0x7);
  EXPECT_EQ(float_to_e2m1(std::nextafter(5.0f, 0.f)), 0x6);
}

TEST(E2m1, SaturationAndSpecials) {
  for (float x : {6.0f, 6.5f, 7.0f, 1e6f, std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(float_to_e2m1(x), 0x7) << x;
    EXPECT_EQ(float_to_e2m1(-x), 0xF) << -x;
  }
  EXPECT_EQ(float_to_e2m1(kNaN), 0x0);
  EXPECT_EQ(float_to_e2m1(-kNaN), 0x0);
  EXPECT_EQ(float_to_e2m1(0.0f), 0x0);
  EXPECT_EQ(float_to_e2m1(-0.0f), 0x8);
  EXPECT_EQ(float_to_e2m1(-0.1f), 0x8);  // rounds to zero, sign kept
  EXPECT_EQ(float_to_e2m1(1e-30f), 0x0);
}

TEST(E2m1, RandomValuesRoundToNearest) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-8.f, 8.f);
  const auto codes = range_codes(0, 7);
  for (int i = 0; i < 20000; ++i) {
    const float x = dist(rng);
    const unsigned expected = nearest_code(std::fabs(x), codes, [](unsigned n) { return e2m1_expected(n); });
    ASSERT_EQ(float_to_e2m1(x), expected | (std::signbit(x) ? 8u : 0u)) << x;
  }
}

// ---- nibble packing --------------------------------------------------------------------------

TEST(Nibbles, AllPackedPairs) {
  for (unsigned byte = 0; byte < 256; ++byte) {
    const std::uint8_t row[1] = {static_cast<std::uint8_t>(byte)};
    EXPECT_EQ(get_nibble(row, 0), byte & 0xF);   // even k in the low nibble
    EXPECT_EQ(get_nibble(row, 1), byte >> 4);
    // Building the byte from its pair, in either order, starting from any content.
    for (std::uint8_t start : {std::uint8_t{0x00}, std::uint8_t{0xFF}, std::uint8_t{0x5A}}) {
      std::uint8_t built[1] = {start};
      set_nibble(built, 0, static_cast<std::uint8_t>(byte & 0xF));
      set_nibble(built, 1, static_cast<std::uint8_t>(byte >> 4));
      EXPECT_EQ(built[0], byte);
      built[0] = start;
      set_nibble(built, 1, static_cast<std::uint8_t>(byte >> 4));
      set_nibble(built, 0, static_cast<std::uint8_t>(byte & 0xF));
      EXPECT_EQ(built[0], byte);
    }
    // set_nibble masks its argument to 4 bits and leaves the other nibble alone.
    std::uint8_t other[1] = {static_cast<std::uint8_t>(byte)};
    set_nibble(other, 1, 0xF3);
    EXPECT_EQ(other[0], (byte & 0x0F) | 0x30);
  }
}

TEST(Nibbles, LongRowRoundTrip) {
  std::mt19937 rng(3);
  std::vector<std::uint8_t> nibbles(101 * 2);
  for (auto& v : nibbles) v = static_cast<std::uint8_t>(rng() & 0xF);
  std::vector<std::uint8_t> row(101, 0xCC);
  for (std::size_t k = 0; k < nibbles.size(); ++k) set_nibble(row.data(), static_cast<std::int64_t>(k), nibbles[k]);
  for (std::size_t b = 0; b < row.size(); ++b) EXPECT_EQ(row[b], nibbles[2 * b] | (nibbles[2 * b + 1] << 4));
  for (std::size_t k = 0; k < nibbles.size(); ++k) EXPECT_EQ(get_nibble(row.data(), static_cast<std::int64_t>(k)), nibbles[k]);
}

// ---- E4M3 ------------------------------------------------------------------------------------

TEST(E4m3, EveryCode) {
  int nan_codes = 0;
  for (unsigned code = 0; code < 256; ++code) {
    const float v = e4m3_to_float(static_cast<std::uint8_t>(code));
    EXPECT_TRUE(same_value(v, e4m3_expected(code))) << code << " " << v;
    EXPECT_FALSE(std::isinf(v));
    if (std::isnan(v)) {
      ++nan_codes;
      EXPECT_TRUE(code == 0x7F || code == 0xFF) << code;
    } else {
      EXPECT_EQ(float_to_e4m3(v), code) << code;  // round trip, -0 included
    }
  }
  EXPECT_EQ(nan_codes, 2);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.f, -6));
  EXPECT_EQ(e4m3_to_float(0x38), 1.f);
  EXPECT_EQ(e4m3_to_float(0xB8), -1.f);
}

TEST(E4m3, TiesRoundToEven) {
  struct Case { double x; std::uint8_t code; };
  const Case cases[] = {
      {std::ldexp(1.0, -10), 0x00},        // half of the smallest subnormal -> 0 (even)
      {3 * std::ldexp(1.0, -10), 0x02},    // between 1 and 2 (x 2^-9) -> 2
      {5 * std::ldexp(1.0, -10), 0x02},    // between 2 and 3 -> 2
      {15 * std::ldexp(1.0, -10), 0x08},   // largest subnormal <-> smallest normal -> normal
      {1.0 + 1.0 / 16, 0x38},              // between 1 and 1.125 -> 1
      {1.0 + 3.0 / 16, 0x3A},              // between 1.125 and 1.25 -> 1.25
      {1.9375, 0x40},                      // between 1.875 and 2 -> 2 (binade carry)
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_e4m3(static_cast<float>(c.x)), c.code) << c.x;
    EXPECT_EQ(float_to_e4m3(static_cast<float>(-c.x)), c.code | 0x80) << -c.x;
  }
  EXPECT_EQ(float_to_e4m3(432.f), 0x7E);   // tie between 416 (0x7D) and 448 (0x7E) -> 448
  EXPECT_EQ(float_to_e4m3(400.f), 0x7C);   // tie between 384 (0x7C) and 416 (0x7D) -> 384
  EXPECT_EQ(float_to_e4m3(std::nextafter(400.f, 0.f)), 0x7C);
  EXPECT_EQ(float_to_e4m3(std::nextafter(400.f, 1e9f)), 0x7D);
  EXPECT_EQ(float_to_e4m3(std::nextafter(std::ldexp(1.f, -10), 1.f)), 0x01);
}

TEST(E4m3, SaturationAndSpecials) {
  for (float x : {448.f, 449.f, 464.f, 480.f, 1e4f, std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(float_to_e4m3(x), 0x7E) << x;
    EXPECT_EQ(float_to_e4m3(-x), 0xFE) << -x;
  }
  EXPECT_EQ(float_to_e4m3(kNaN), 0x7F);
  EXPECT_EQ(float_to_e4m3(-kNaN), 0x7F);
  EXPECT_EQ(float_to_e4m3(0.f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.f), 0x80);
  EXPECT_EQ(float_to_e4m3(1e-30f), 0x00);
  EXPECT_EQ(float_to_e4m3(-1e-30f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(E4m3, RandomValuesRoundToNearest) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> log_mag(-12.0, 10.0);
  const auto codes = range_codes(0, 0x7E);
  for (int i = 0; i < 20000; ++i) {
    float x = static_cast<float>(std::exp2(log_mag(rng)));
    if (rng() & 1) x = -x;
    const unsigned expected = nearest_code(std::fabs(x), codes, [](unsigned c) { return e4m3_expected(c); });
    ASSERT_EQ(float_to_e4m3(x), expected | (std::signbit(x) ? 0x80u : 0u)) << x;
  }
  // Every tie point of the grid, and its neighbours.
  for (unsigned c = 0; c < 0x7E; ++c) {
    const double mid = 0.5 * (e4m3_expected(c) + e4m3_expected(c + 1));
    const float fmid = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(fmid), mid);
    EXPECT_EQ(float_to_e4m3(fmid), (c & 1u) ? c + 1 : c) << mid;
    EXPECT_EQ(float_to_e4m3(std::nextafter(fmid, 0.f)), c) << mid;
    EXPECT_EQ(float_to_e4m3(std::nextafter(fmid, kInf)), c + 1) << mid;
  }
}

// ---- UE8M0 -----------------------------------------------------------------------------------

TEST(Ue8m0, EveryCode) {
  for (unsigned code = 0; code < 256; ++code) {
    const float v = ue8m0_to_float(static_cast<std::uint8_t>(code));
    EXPECT_TRUE(same_value(v, ue8m0_expected(code))) << code;
    EXPECT_EQ(std::isnan(v), code == 0xFF) << code;
    if (code != 0xFF) EXPECT_EQ(float_to_ue8m0(v), code) << code;
    EXPECT_TRUE(same_value(scale_to_float(Format::mxfp4, static_cast<std::uint8_t>(code)), ue8m0_expected(code)));
    EXPECT_TRUE(same_value(scale_to_float(Format::nvfp4, static_cast<std::uint8_t>(code)), e4m3_expected(code)));
  }
  EXPECT_EQ(ue8m0_to_float(127), 1.f);
  EXPECT_EQ(ue8m0_to_float(0), std::ldexp(1.f, -127));  // code 0 is 2^-127, not zero
}

TEST(Ue8m0, EncodeRoundsUpToPowerOfTwo) {
  EXPECT_EQ(float_to_ue8m0(1.f), 127);
  EXPECT_EQ(float_to_ue8m0(3.f), 129);
  EXPECT_EQ(float_to_ue8m0(4.f), 129);
  EXPECT_EQ(float_to_ue8m0(std::nextafter(4.f, 9.f)), 130);
  EXPECT_EQ(float_to_ue8m0(0.3f), 126);
  EXPECT_EQ(float_to_ue8m0(-3.f), 129);  // magnitude
  EXPECT_EQ(float_to_ue8m0(0.f), 0);
  EXPECT_EQ(float_to_ue8m0(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(float_to_ue8m0(std::numeric_limits<float>::max()), 0xFE);  // 2^128 does not exist
  EXPECT_EQ(float_to_ue8m0(kInf), 0xFE);
  EXPECT_EQ(float_to_ue8m0(kNaN), 0xFF);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> log_mag(-126.0, 126.0);
  for (int i = 0; i < 5000; ++i) {
    const float x = static_cast<float>(std::exp2(log_mag(rng)));
    const unsigned code = float_to_ue8m0(x);
    ASSERT_GE(ue8m0_expected(code), x);
    ASSERT_LT(ue8m0_expected(code - 1), x);
  }
}

// ---- scale layouts ---------------------------------------------------------------------------

TEST(ScaleLayout, Sizes) {
  EXPECT_EQ(scale_cols(Format::nvfp4, 7168), 448);
  EXPECT_EQ(scale_cols(Format::mxfp4, 7168), 224);
  EXPECT_EQ(padded_rows(0), 0);
  EXPECT_EQ(padded_rows(1), 128);
  EXPECT_EQ(padded_rows(128), 128);
  EXPECT_EQ(padded_rows(129), 256);
  EXPECT_EQ(padded_scale_cols(1), 4);
  EXPECT_EQ(padded_scale_cols(4), 4);
  EXPECT_EQ(padded_scale_cols(5), 8);
  EXPECT_EQ(linear_scale_bytes(37, 5), 185u);
  EXPECT_EQ(blocked_scale_bytes(37, 5), 128u * 8u);
  EXPECT_EQ(blocked_scale_bytes(300, 9), 384u * 12u);
  EXPECT_EQ(scale_bytes(ScaleLayout::linear, 300, 9), 2700u);
  EXPECT_EQ(scale_bytes(ScaleLayout::blocked, 300, 9), 384u * 12u);
}

TEST(ScaleLayout, HandWorkedOffsets) {
  // (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4, atom (r / 128) * ceil(cols / 4) + c / 4.
  EXPECT_EQ(blocked_offset(0, 0, 4), 0u);
  EXPECT_EQ(blocked_offset(0, 1, 4), 1u);
  EXPECT_EQ(blocked_offset(1, 0, 4), 16u);
  EXPECT_EQ(blocked_offset(32, 0, 4), 4u);
  EXPECT_EQ(blocked_offset(33, 2, 4), 22u);         // 16 + 4 + 2
  EXPECT_EQ(blocked_offset(127, 3, 4), 511u);       // 31*16 + 3*4 + 3
  EXPECT_EQ(blocked_offset(0, 4, 5), 512u);         // second column block
  EXPECT_EQ(blocked_offset(128, 0, 5), 1024u);      // atom 1*2 + 0
  EXPECT_EQ(blocked_offset(130, 6, 9), 2082u);      // atom 1*3 + 1 = 4: 2048 + 2*16 + 0 + 2
  EXPECT_EQ(blocked_offset(299, 8, 9), 2u * 3 * 512 + 2 * 512 + 11 * 16 + 1 * 4 + 0);  // r=299: 299%32=11, (299%128)/32=1
  EXPECT_EQ(scale_offset(ScaleLayout::linear, 3, 2, 7), 23u);
  EXPECT_EQ(scale_offset(ScaleLayout::blocked, 33, 2, 4), 22u);
}

// The blocked layout written the way torch describes it ("to_blocked"): pad to [R, C], view as
// [R/128, 128, C/4, 4], permute to [R/128, C/4, 128, 4], then each 128x4 block is reshaped to
// [4, 32, 4], transposed to [32, 4, 4] and flattened.
std::vector<std::uint8_t> blocked_by_permutation(const std::vector<std::uint8_t>& linear, std::int64_t rows,
                                                 std::int64_t cols) {
  const std::int64_t R = (rows + 127) / 128 * 128, C = (cols + 3) / 4 * 4;
  std::vector<std::uint8_t> padded(R * C, 0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) padded[r * C + c] = linear[r * cols + c];
  std::vector<std::uint8_t> out;
  for (std::int64_t rb = 0; rb < R / 128; ++rb)
    for (std::int64_t cb = 0; cb < C / 4; ++cb)
      for (int i32 = 0; i32 < 32; ++i32)      // transposed: [32][4][4]
        for (int i4 = 0; i4 < 4; ++i4)
          for (int j = 0; j < 4; ++j) out.push_back(padded[(rb * 128 + i4 * 32 + i32) * C + cb * 4 + j]);
  return out;
}

TEST(ScaleLayout, RoundTripsOnRaggedShapes) {
  std::mt19937 rng(17);
  for (std::int64_t rows : {1, 37, 128, 129, 300}) {
    for (std::int64_t cols : {1, 3, 4, 5, 9}) {
      std::vector<std::uint8_t> linear(rows * cols);
      for (auto& v : linear) v = static_cast<std::uint8_t>(1 + rng() % 255);  // never 0
      std::vector<std::uint8_t> blocked(blocked_scale_bytes(rows, cols), 0xEE);
      linear_to_blocked(linear.data(), rows, cols, blocked.data());
      EXPECT_EQ(blocked, blocked_by_permutation(linear, rows, cols)) << rows << "x" << cols;
      // Padding is zero, so zeros count exactly the padding bytes.
      const auto zeros = std::count(blocked.begin(), blocked.end(), 0);
      EXPECT_EQ(static_cast<std::size_t>(zeros), blocked.size() - linear.size());
      std::vector<std::uint8_t> back(rows * cols, 0);
      blocked_to_linear(blocked.data(), rows, cols, back.data());
      EXPECT_EQ(back, linear) << rows << "x" << cols;
      // blocked_offset is a bijection of the padded index space onto [0, bytes).
      std::set<std::size_t> seen;
      for (std::int64_t r = 0; r < padded_rows(rows); ++r)
        for (std::int64_t c = 0; c < padded_scale_cols(cols); ++c) {
          const std::size_t off = blocked_offset(r, c, cols);
          EXPECT_LT(off, blocked.size());
          seen.insert(off);
        }
      EXPECT_EQ(seen.size(), blocked.size());
    }
  }
}

// The one blocked-offset formula (formats/scale_layout.hpp) the kernels share: usable in constant
// expressions, the same in 32- and 64-bit indices, and the in-atom parts are inverse to each other.
static_assert(formats::detail::blocked_offset(299, 8, 9) == 2 * 3 * 512 + 2 * 512 + 11 * 16 + 1 * 4 + 0);
static_assert(formats::detail::scale_offset(ScaleLayout::linear, 3, 2, 7) == 23);
static_assert(formats::detail::blocked_atom_offset(127, 3) == 511);

TEST(ScaleLayout, OneFormulaInEveryIndexType) {
  namespace d = formats::detail;
  for (int w = 0; w < 128; ++w) {
    const int r = d::blocked_atom_row_of_word(w);
    EXPECT_EQ(d::blocked_atom_offset(r, 0), 4 * w) << "word " << w;
  }
  for (int cols : {1, 3, 4, 5, 9, 448})
    for (int r = 0; r < 300; ++r)
      for (int c = 0; c < (cols + 3) / 4 * 4; ++c) {
        const std::int64_t wide = d::blocked_offset(std::int64_t{r}, std::int64_t{c}, std::int64_t{cols});
        ASSERT_EQ(d::blocked_offset(r, c, cols), wide) << r << "," << c << " of " << cols;
        ASSERT_EQ(static_cast<std::size_t>(wide), blocked_offset(r, c, cols));
        ASSERT_EQ(wide % 512, d::blocked_atom_offset(r % 128, c % 4));
        ASSERT_EQ(d::scale_offset(ScaleLayout::blocked, r, c, cols), wide);
        ASSERT_EQ(d::scale_offset(ScaleLayout::linear, r, c, cols), std::int64_t{r} * cols + c);
      }
}

// ---- quantiser -------------------------------------------------------------------------------

// Builds x whose blocks are exactly representable with a chosen scale per block: the first
// element of a block is +-6 * s (NVFP4) or +-4 / +-6 * s (MXFP4) so the quantiser must pick s.
struct Representable {
  std::vector<float> x;
  std::vector<std::uint8_t> nibbles, scales;
};

Representable make_representable(Format f, std::int64_t rows, std::int64_t k, std::mt19937& rng) {
  const int vec = scale_block_size(f);
  Representable out;
  out.x.resize(rows * k);
  out.nibbles.resize(rows * k);
  out.scales.resize(rows * (k / vec));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t b = 0; b < k / vec; ++b) {
      // NVFP4: positive finite non-zero codes; MXFP4: a wide range of exponents.
      const std::uint8_t code = f == Format::nvfp4 ? static_cast<std::uint8_t>(1 + rng() % 0x7E)
                                                   : static_cast<std::uint8_t>(20 + rng() % 200);
      out.scales[r * (k / vec) + b] = code;
      const double s = f == Format::nvfp4 ? e4m3_expected(code) : ue8m0_expected(code);
      for (int i = 0; i < vec; ++i) {
        std::uint8_t n = static_cast<std::uint8_t>(rng() & 0xF);
        if (i == 0) n = static_cast<std::uint8_t>((f == Format::nvfp4 || (rng() & 1)) ? 0x7 : 0x6) | (n & 0x8);
        if (n == 0x8) n = 0x0;  // -0 and +0 are the same float input
        out.nibbles[r * k + b * vec + i] = n;
        out.x[r * k + b * vec + i] = static_cast<float>(e2m1_expected(n) * s);
      }
    }
  return out;
}

TEST(Quantize, RepresentableValuesComeBackExactly) {
  std::mt19937 rng(23);
  for (Format f : {Format::nvfp4, Format::mxfp4}) {
    const std::int64_t rows = 37, k = 128;
    const Representable rep = make_representable(f, rows, k, rng);
    std::vector<std::uint8_t> packed(rows * k / 2), scales(rows * (k / scale_block_size(f)));
    quantize(f, rep.x.data(), rows, k, k, packed.data(), scales.data());
    EXPECT_EQ(scales, rep.scales) << to_string(f);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t kk = 0; kk < k; ++kk)
        ASSERT_EQ(get_nibble(packed.data() + r * k / 2, kk), rep.nibbles[r * k + kk]) << r << "," << kk;
    std::vector<float> back(rows * k);
    dequantize(f, ScaleLayout::linear, packed.data(), rows, k, k / 2, scales.data(), back.data());
    EXPECT_EQ(back, rep.x);
  }
}

// x with a row stride, random magnitudes over many binades, some zero blocks.
std::vector<float> random_input(std::int64_t rows, std::int64_t k, std::int64_t ldx, std::mt19937& rng,
                                double lo_log2, double hi_log2) {
  std::uniform_real_distribution<double> log_mag(lo_log2, hi_log2), u(-1.0, 1.0);
  std::vector<float> x(rows * ldx, 12345.f);  // padding must be ignored
  for (std::int64_t r = 0; r < rows; ++r) {
    const double row_scale = std::exp2(log_mag(rng));
    for (std::int64_t kk = 0; kk < k; ++kk) x[r * ldx + kk] = static_cast<float>(u(rng) * row_scale);
  }
  return x;
}

TEST(Quantize, ScaleRulesAndNearestElements) {
  std::mt19937 rng(29);
  const std::int64_t rows = 40, k = 192, ldx = 200;
  for (Format f : {Format::nvfp4, Format::mxfp4}) {
    const int vec = scale_block_size(f);
    const std::int64_t cols = k / vec;
    const std::vector<float> x = f == Format::nvfp4 ? random_input(rows, k, ldx, rng, -14.0, 12.0)
                                                     : random_input(rows, k, ldx, rng, -60.0, 60.0);
    std::vector<std::uint8_t> packed(rows * k / 2), scales(rows * cols);
    quantize(f, x.data(), rows, k, ldx, packed.data(), scales.data());
    std::vector<float> back(rows * k);
    dequantize(f, ScaleLayout::linear, packed.data(), rows, k, k / 2, scales.data(), back.data());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t b = 0; b < cols; ++b) {
        double amax = 0;
        for (int i = 0; i < vec; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[r * ldx + b * vec + i])));
        const std::uint8_t code = scales[r * cols + b];
        double s;
        if (f == Format::nvfp4) {
          // Scale = the E4M3 value nearest amax / 6 (brute force over codes).
          s = e4m3_expected(code);
          EXPECT_EQ(code, nearest_code(amax / 6, range_codes(0, 0x7E), [](unsigned c) { return e4m3_expected(c); }));
        } else {
          // OCP MX: 2^(floor(log2 amax) - 2), so amax / s lies in [4, 8).
          s = ue8m0_expected(code);
          EXPECT_EQ(s, std::exp2(std::floor(std::log2(amax)) - 2.0)) << amax;
          EXPECT_GE(amax / s, 4.0);
          EXPECT_LT(amax / s, 8.0);
        }
        for (int i = 0; i < vec; ++i) {
          const double xi = x[r * ldx + b * vec + i], dq = back[r * k + b * vec + i];
          if (s == 0) {
            EXPECT_EQ(dq, 0.0);
            continue;
          }
          // dq is a nearest point of the grid {e2m1 * s} to xi ...
          double best = std::numeric_limits<double>::infinity();
          for (unsigned n = 0; n < 16; ++n) best = std::min(best, std::fabs(xi - e2m1_expected(n) * s));
          ASSERT_EQ(std::fabs(xi - dq), best) << xi << " s=" << s;
          // ... hence within half a grid gap (1 * s in [4, 6]) or, saturated, within amax - 6s.
          EXPECT_LE(std::fabs(xi - dq), std::max(s, amax - 6 * s));
          EXPECT_LE(std::fabs(dq), 6 * s);
        }
      }
  }
}

TEST(Quantize, ZeroTinyNanAndHugeBlocks) {
  // NVFP4, one row of 4 blocks: zeros; below half the smallest scale; a NaN; beyond 6*448.
  std::vector<float> x(64, 0.f);
  for (int i = 16; i < 32; ++i) x[i] = (i & 1 ? -1 : 1) * 6 * std::ldexp(1.f, -11);  // amax/6 = 2^-11
  x[40] = kNaN;
  x[41] = 1.f;
  for (int i = 48; i < 64; ++i) x[i] = 1e6f;
  std::vector<std::uint8_t> packed(32), scales(4);
  quantize(Format::nvfp4, x.data(), 1, 64, 64, packed.data(), scales.data());
  EXPECT_EQ(scales[0], 0x00);
  EXPECT_EQ(scales[1], 0x00);
  EXPECT_EQ(scales[2], 0x7F);
  EXPECT_EQ(scales[3], 0x7E);
  for (int kk = 0; kk < 32; ++kk) EXPECT_EQ(get_nibble(packed.data(), kk), 0) << kk;
  for (int kk = 48; kk < 64; ++kk) EXPECT_EQ(get_nibble(packed.data(), kk), 0x7) << kk;  // saturated
  std::vector<float> back(64);
  dequantize(Format::nvfp4, ScaleLayout::linear, packed.data(), 1, 64, 32, scales.data(), back.data());
  for (int kk = 32; kk < 48; ++kk) EXPECT_TRUE(std::isnan(back[kk])) << kk;
  for (int kk = 0; kk < 32; ++kk) EXPECT_EQ(back[kk], 0.f);

  // MXFP4: a zero block gets code 0; a NaN block 0xFF; inf saturates the scale to 2^127.
  std::vector<float> y(96, 0.f);
  y[40] = -kNaN;
  y[64] = kInf;
  y[65] = -3.f;
  std::vector<std::uint8_t> p2(48), s2(3);
  quantize(Format::mxfp4, y.data(), 1, 96, 96, p2.data(), s2.data());
  EXPECT_EQ(s2[0], 0x00);
  EXPECT_EQ(s2[1], 0xFF);
  EXPECT_EQ(s2[2], 0xFE);
  for (int kk = 0; kk < 32; ++kk) EXPECT_EQ(get_nibble(p2.data(), kk), 0);
  EXPECT_EQ(get_nibble(p2.data(), 64), 0x7);
  EXPECT_EQ(get_nibble(p2.data(), 65) & 0x7, 0);  // -3 / 2^127 rounds to -0
}

TEST(Quantize, RejectsBadK) {
  std::vector<float> x(48);
  std::vector<std::uint8_t> p(24), s(3);
  EXPECT_THROW(quantize(Format::nvfp4, x.data(), 1, 24, 24, p.data(), s.data()), Error);
  EXPECT_THROW(quantize(Format::mxfp4, x.data(), 1, 48, 48, p.data(), s.data()), Error);
  EXPECT_THROW(dequantize(Format::mxfp4, ScaleLayout::linear, p.data(), 1, 16, 8, s.data(), x.data()), Error);
}

TEST(Dequantize, BlockedLayoutAndRowStrideMatchLinear) {
  std::mt19937 rng(31);
  for (Format f : {Format::nvfp4, Format::mxfp4}) {
    const std::int64_t rows = 131, k = 160, ld = 96;  // ld > k/2, bytes past k/2 are junk
    const std::int64_t cols = k / scale_block_size(f);
    std::vector<std::uint8_t> packed(rows * ld);
    for (auto& v : packed) v = static_cast<std::uint8_t>(rng());
    std::vector<std::uint8_t> linear(rows * cols);
    for (auto& v : linear) v = static_cast<std::uint8_t>(f == Format::nvfp4 ? rng() % 0x7F : 100 + rng() % 50);
    std::vector<std::uint8_t> blocked(blocked_scale_bytes(rows, cols));
    linear_to_blocked(linear.data(), rows, cols, blocked.data());
    std::vector<float> a(rows * k), b(rows * k);
    dequantize(f, ScaleLayout::linear, packed.data(), rows, k, ld, linear.data(), a.data());
    dequantize(f, ScaleLayout::blocked, packed.data(), rows, k, ld, blocked.data(), b.data());
    EXPECT_EQ(a, b);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t kk = 0; kk < k; ++kk) {
        const unsigned byte = packed[r * ld + kk / 2];
        const unsigned n = (kk % 2 == 0) ? (byte & 0xF) : (byte >> 4);
        const double s = f == Format::nvfp4 ? e4m3_expected(linear[r * cols + kk / scale_block_size(f)])
                                            : ue8m0_expected(linear[r * cols + kk / scale_block_size(f)]);
        ASSERT_TRUE(same_value(a[r * k + kk], e2m1_expected(n) * s) || (e2m1_expected(n) * s == 0 && a[r * k + kk] == 0))
            << r << "," << kk;
      }
  }
}

}  // namespace
}  // namespace fp4gemm
