// Exact CPU reference for the grouped GEMM: exact block sums, float64 accumulation, one rounding.
#include "fp4gemm/reference.hpp"
#include "reference/cpu_product.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "formats/rounding.hpp"

namespace fp4gemm::reference {

namespace {

// 2 * e2m1 value of each nibble: an integer, so the products and sums of a block are exact ints.
constexpr std::int16_t kTwiceE2m1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// A task computes a kTileM x kTileN tile of C. N-tiles keep the B block being reused in L1; the
// tiles are small enough that every thread gets work when M is small.
constexpr int kTileM = 4;
constexpr int kTileN = 256;
constexpr int kChunk = 32;  // int16 block sums kept in registers

// Runs body(i) for i in [0, count) on `threads` threads; items are taken dynamically, which
// does not affect results (every item is computed by the same code regardless of thread).
template <class Body>
void parallel_for(std::int64_t count, int threads, const Body& body) {
  if (count <= 0) return;
  const int workers = static_cast<int>(std::min<std::int64_t>(threads, count));
  if (workers <= 1) {
    for (std::int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::atomic<std::int64_t> next{0};
  auto worker = [&] {
    for (std::int64_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) body(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (int t = 1; t < workers; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

// NOTES: the sum is organised so that all of it is exact except the float64 additions.
// Elements are held as 2*e2m1 (int16) and scales as scale/2 (double): a block's sum of
// (2a)(2b) is an exact integer (|sum| <= 32 * 144 fits int16), and times (sa/2)(sb/2), a product
// of two 4-bit-mantissa numbers or two powers of two, it is exactly sum(a*b) * sa * sb. Blocks
// are added into the float64 accumulator in K order, the same for every thread count.

// A: [rows, k] values and [rows, cols] half scales, row-major.
struct UnpackedA {
  std::vector<std::int16_t> values;
  std::vector<double> half_scales;
};
// B, transposed so that N is innermost and cut into kTileN-wide column tiles, each stored
// contiguously ([tile][k][kTileN] values, [tile][cols][kTileN] half scales; the last tile is
// zero-padded). NOTES: a plain [k, n] layout puts the rows of one block n*2 bytes apart, which for
// power-of-two N maps them all onto the same L1 sets.
struct UnpackedB {
  std::vector<std::int16_t> values;
  std::vector<double> half_scales;
};

double half_scale(Format format, std::uint8_t code) {
  return 0.5 * static_cast<double>(formats::scale_to_float(format, code));
}

UnpackedA unpack_a(const HostGroup& g, Format format, ScaleLayout layout, int threads) {
  const std::int64_t k = g.k, cols = k / scale_block_size(format);
  UnpackedA u;
  if (k == 0) return u;  // nothing to read (the pointers may then be null)
  u.values.resize(static_cast<std::size_t>(g.m * k));
  u.half_scales.resize(static_cast<std::size_t>(g.m * cols));
  parallel_for(g.m, threads, [&](std::int64_t r) {
    const std::uint8_t* src = g.a + r * g.lda;
    std::int16_t* dst = u.values.data() + r * k;
    for (std::int64_t i = 0; i < k / 2; ++i) {
      dst[2 * i] = kTwiceE2m1[src[i] & 0xF];
      dst[2 * i + 1] = kTwiceE2m1[src[i] >> 4];
    }
    for (std::int64_t c = 0; c < cols; ++c)
      u.half_scales[r * cols + c] = half_scale(format, g.sfa[formats::scale_offset(layout, r, c, cols)]);
  });
  return u;
}

UnpackedB unpack_b(const HostGroup& g, Format format, ScaleLayout layout, int threads) {
  const std::int64_t n = g.n, k = g.k, vec = scale_block_size(format), cols = k / vec;
  const std::int64_t tiles = (n + kTileN - 1) / kTileN;
  UnpackedB u;
  if (k == 0) return u;
  u.values.assign(static_cast<std::size_t>(tiles * k * kTileN), 0);
  u.half_scales.assign(static_cast<std::size_t>(tiles * cols * kTileN), 0.0);
  parallel_for(n, threads, [&](std::int64_t r) {
    const std::int64_t tile = r / kTileN, j = r % kTileN;
    const std::uint8_t* src = g.b + r * g.ldb;
    std::int16_t* dst = u.values.data() + tile * k * kTileN + j;
    for (std::int64_t i = 0; i < k / 2; ++i) {
      dst[(2 * i) * kTileN] = kTwiceE2m1[src[i] & 0xF];
      dst[(2 * i + 1) * kTileN] = kTwiceE2m1[src[i] >> 4];
    }
    double* sb = u.half_scales.data() + tile * cols * kTileN + j;
    for (std::int64_t c = 0; c < cols; ++c)
      sb[c * kTileN] = half_scale(format, g.sfb[formats::scale_offset(layout, r, c, cols)]);
  });
  return u;
}

}  // namespace

namespace detail {

void store(void* c, OutType type, std::int64_t index, double value) {
  switch (type) {
    case OutType::f16: static_cast<std::uint16_t*>(c)[index] = float_to_half_bits(value); break;
    case OutType::bf16: static_cast<std::uint16_t*>(c)[index] = float_to_bf16_bits(value); break;
    case OutType::f32: static_cast<float*>(c)[index] = static_cast<float>(value); break;  // RNE
  }
}

void validate(const HostGroup& g, int index, Format format, const std::string& b) {
  const auto arg = [&](const std::string& field) { return "groups[" + std::to_string(index) + "]." + field; };
  const int vec = scale_block_size(format);
  if (g.m < 0) throw Error(arg("m"), index, "must be >= 0");
  if (g.n < 0) throw Error(arg("n"), index, "must be >= 0");
  if (g.k < 0 || g.k % vec != 0)
    throw Error(arg("k"), index, "must be a non-negative multiple of " + std::to_string(vec));
  if (g.m == 0 || g.n == 0) return;
  if (g.c == nullptr) throw Error(arg("c"), index, "is null");
  if (g.ldc < g.n) throw Error(arg("ldc"), index, "must be >= n");
  if (g.k == 0) return;
  if (g.a == nullptr) throw Error(arg("a"), index, "is null");
  if (g.b == nullptr) throw Error(arg(b), index, "is null");
  if (g.sfa == nullptr) throw Error(arg("sfa"), index, "is null");
  if (g.sfb == nullptr) throw Error(arg("sf" + b), index, "is null");
  if (g.lda < g.k / 2) throw Error(arg("lda"), index, "must be >= k/2");
  if (g.ldb < g.k / 2) throw Error(arg("ld" + b), index, "must be >= k/2");
}

namespace {

// Calls emit(row, col, sum) once for every element of C[0:M, 0:N], sum being the exact products
// added in float64 in K order (no alpha): the one code path behind every CPU reference product.
template <int kVec, class Emit>
void for_each_sum(const HostGroup& g, Format format, ScaleLayout layout, int threads, const Emit& emit) {
  const std::int64_t n = g.n, cols = g.k / kVec;
  const UnpackedA a = unpack_a(g, format, layout, threads);
  const UnpackedB b = unpack_b(g, format, layout, threads);
  const std::int64_t tiles_m = (g.m + kTileM - 1) / kTileM, tiles_n = (n + kTileN - 1) / kTileN;
  parallel_for(tiles_m * tiles_n, threads, [&](std::int64_t task) {
    const std::int64_t m0 = (task / tiles_n) * kTileM, rows = std::min<std::int64_t>(kTileM, g.m - m0);
    const std::int64_t n0 = (task % tiles_n) * kTileN, width = std::min<std::int64_t>(kTileN, n - n0);
    const std::int16_t* b_tile = b.values.data() + (n0 / kTileN) * g.k * kTileN;
    const double* sb_tile = b.half_scales.data() + (n0 / kTileN) * cols * kTileN;
    double acc[kTileM][kTileN] = {};
    for (std::int64_t c = 0; c < cols; ++c) {
      const double* sb = sb_tile + c * kTileN;
      const std::int16_t* b_block = b_tile + c * kVec * kTileN;
      for (std::int64_t t = 0; t < rows; ++t) {
        const std::int16_t* a_block = a.values.data() + (m0 + t) * g.k + c * kVec;
        const double sa = a.half_scales[(m0 + t) * cols + c];
        // Whole padded tile width, in register-sized chunks (the padding columns are zeros).
        for (int j0 = 0; j0 < kTileN; j0 += kChunk) {
          std::int16_t block_sum[kChunk] = {};
          for (int i = 0; i < kVec; ++i) {
            const std::int16_t av = a_block[i];
            const std::int16_t* b_row = b_block + i * kTileN + j0;
            for (int j = 0; j < kChunk; ++j) block_sum[j] = static_cast<std::int16_t>(block_sum[j] + av * b_row[j]);
          }
          for (int j = 0; j < kChunk; ++j) acc[t][j0 + j] += static_cast<double>(block_sum[j]) * (sa * sb[j0 + j]);
        }
      }
    }
    for (std::int64_t t = 0; t < rows; ++t)
      for (std::int64_t j = 0; j < width; ++j) emit(m0 + t, n0 + j, acc[t][j]);
  });
}

template <class Emit>
void for_each_sum(const HostGroup& g, Format format, ScaleLayout layout, int threads, const Emit& emit) {
  if (format == Format::nvfp4)
    for_each_sum<16>(g, format, layout, threads, emit);
  else
    for_each_sum<32>(g, format, layout, threads, emit);
}

}  // namespace

void exact_products(const HostGroup& g, Format format, ScaleLayout layout, int threads, double* out) {
  for_each_sum(g, format, layout, threads,
               [&](std::int64_t row, std::int64_t col, double sum) { out[row * g.n + col] = sum; });
}

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

}  // namespace detail

void grouped_gemm(std::span<const HostGroup> groups, Format format, ScaleLayout layout,
                  OutType out_type, int threads) {
  for (std::size_t i = 0; i < groups.size(); ++i) detail::validate(groups[i], static_cast<int>(i), format);
  threads = detail::resolve_threads(threads);
  for (const HostGroup& g : groups) {
    if (g.m == 0 || g.n == 0) continue;
    const double alpha = g.alpha;
    detail::for_each_sum(g, format, layout, threads, [&](std::int64_t row, std::int64_t col, double sum) {
      detail::store(g.c, out_type, row * g.ldc + col, sum * alpha);
    });
  }
}

// ---- output element conversions -------------------------------------------------------------

// NaN keeps its sign and becomes the canonical quiet NaN; finite values round to nearest even
// straight from double (no intermediate float, so no double rounding); past the largest finite
// value rounding carries into the infinity code, as IEEE does.
std::uint16_t float_to_half_bits(double x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | 0x7E00;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | 0x7C00;
  return sign | static_cast<std::uint16_t>(std::min<std::int64_t>(formats::detail::round_magnitude(a, 10, -14), 0x7C00));
}

std::uint16_t float_to_bf16_bits(double x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | 0x7FC0;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | 0x7F80;
  return sign | static_cast<std::uint16_t>(std::min<std::int64_t>(formats::detail::round_magnitude(a, 7, -126), 0x7F80));
}

double half_bits_to_double(std::uint16_t h) {
  const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  double magnitude;
  if (exponent == 0x1F)
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exponent == 0)
    magnitude = std::ldexp(static_cast<double>(mantissa), -24);
  else
    magnitude = std::ldexp(static_cast<double>(1024 + mantissa), exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

double bf16_bits_to_double(std::uint16_t h) {
  // bf16 is the top half of an IEEE binary32.
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return static_cast<double>(f);
}

double load_output(const void* c, OutType type, std::int64_t i) {
  switch (type) {
    case OutType::f16: return half_bits_to_double(static_cast<const std::uint16_t*>(c)[i]);
    case OutType::bf16: return bf16_bits_to_double(static_cast<const std::uint16_t*>(c)[i]);
    case OutType::f32: return static_cast<double>(static_cast<const float*>(c)[i]);
  }
  return 0.0;
}

}  // namespace fp4gemm::reference
