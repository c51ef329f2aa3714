// Host tier for reference::moe_gemm (the MoE GEMM's CPU reference, the GPU tier's oracle): checked
// against an independent naive float64 computation (formats::dequantize, a plain dot product), on
// small random problems (contiguous, masked, gather, bf16 activations, blocked and linear weight
// scales, alpha, NaN scales), on hand-worked values, and for its argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/reference.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm {
namespace {

using reference::MoeHostProblem;
using test::Values;

int uniform(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
bool chance(std::mt19937_64& rng, double p) { return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p; }
std::int64_t round16(std::int64_t x) { return (x + 15) / 16 * 16; }

// A small MoE problem on the host, owning its buffers (MoeHostProblem points into them).
struct HostMoe {
  MoeHostProblem p;
  Values values = Values::gpumode;
  int rows = 0;  // rows of C
  std::int64_t cols = 0;
  std::vector<std::uint8_t> a, a_scales, w, w_scales, c, c_image;
  std::vector<float> alpha;
  std::vector<int> offsets, counts, gather;
  std::string what;

  HostMoe() = default;
  HostMoe(const HostMoe&) = delete;
  HostMoe& operator=(const HostMoe&) = delete;

  // The pointers of p, after the vectors have their final sizes.
  void bind() {
    p.a = a.data();
    p.a_scales = p.bf16_activations ? nullptr : a_scales.data();
    p.w = w.data();
    p.w_scales = w_scales.data();
    p.alpha = alpha.empty() ? nullptr : alpha.data();
    p.offsets = offsets.empty() ? nullptr : offsets.data();
    p.counts = counts.empty() ? nullptr : counts.data();
    p.gather = gather.empty() ? nullptr : gather.data();
    p.c = c.data();
  }
  // Expert of each row of C, or -1.
  std::vector<int> owners() const {
    std::vector<int> o(static_cast<std::size_t>(rows), -1);
    for (int e = 0; e < p.experts; ++e) {
      const int begin = counts.empty() ? offsets[static_cast<std::size_t>(e)] : e * p.capacity;
      const int end =
          counts.empty() ? offsets[static_cast<std::size_t>(e) + 1] : begin + counts[static_cast<std::size_t>(e)];
      for (int r = begin; r < end; ++r) o[static_cast<std::size_t>(r)] = e;
    }
    return o;
  }
};

struct RandomOptions {
  bool masked = false, gather = false, bf16 = false, alpha = false;
  Format format = Format::nvfp4;
  ScaleLayout w_layout = ScaleLayout::linear;
  OutType out_type = OutType::f32;
  Values values = Values::full;
  bool nan = false;
};

RandomOptions random_options(std::mt19937_64& rng) {
  RandomOptions o;
  o.format = (rng() & 1) ? Format::mxfp4 : Format::nvfp4;
  o.w_layout = (rng() & 1) ? ScaleLayout::blocked : ScaleLayout::linear;
  o.out_type = static_cast<OutType>(uniform(rng, 0, 2));
  o.values = (rng() & 1) ? Values::full : Values::gpumode;
  o.masked = chance(rng, 0.3);
  o.gather = !o.masked && chance(rng, 0.4);
  o.bf16 = chance(rng, 0.3);
  o.alpha = chance(rng, 0.5);
  o.nan = o.values == Values::full && chance(rng, 0.2);
  return o;
}

void make_problem(HostMoe& h, const RandomOptions& o, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  MoeHostProblem& p = h.p;
  const int vec = scale_block_size(o.format);
  p.experts = uniform(rng, 1, 6);
  p.n = uniform(rng, 1, 40);
  p.k = vec * uniform(rng, 1, 5);
  p.format = o.format;
  p.bf16_activations = o.bf16;
  p.out_type = o.out_type;
  p.w_layout = o.w_layout;
  h.values = o.values;
  h.cols = p.k / vec;
  const int E = p.experts, N = p.n, K = p.k;

  // Routing.
  if (o.masked) {
    p.capacity = uniform(rng, 1, 12);
    h.rows = E * p.capacity;
    for (int e = 0; e < E; ++e) h.counts.push_back(uniform(rng, 0, 3) == 0 ? p.capacity : uniform(rng, 0, p.capacity));
  } else {
    h.rows = uniform(rng, 1, 60);
    h.offsets.push_back(uniform(rng, 0, 5) == 0 ? uniform(rng, 0, h.rows) : 0);
    for (int e = 0; e < E; ++e) {
      const int left = h.rows - h.offsets.back();
      h.offsets.push_back(h.offsets.back() + (uniform(rng, 0, 4) == 0 ? 0 : uniform(rng, 0, left)));
    }
  }
  p.a_rows = o.gather ? uniform(rng, 1, 40) : h.rows;
  if (o.gather)
    for (int r = 0; r < h.rows; ++r) h.gather.push_back(uniform(rng, 0, p.a_rows - 1));

  // Activations: FP4 [a_rows, K/2] + linear scales, or bf16 [a_rows, K]; padded rows.
  p.lda = round16(o.bf16 ? 2 * K : K / 2) + 16 * uniform(rng, 0, 1);
  if (!o.bf16) {
    h.a = test::random_packed(rng, o.values, p.a_rows, K, p.lda);
    h.a_scales = test::random_scales(rng, o.format, o.values, p.a_rows, h.cols);
    if (o.nan) h.a_scales[static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(h.a_scales.size()) - 1))] = 0xFF;
  } else {
    h.a.resize(static_cast<std::size_t>(p.a_rows * p.lda));
    test::fill_random(rng, h.a.data(), h.a.size());
    for (int r = 0; r < p.a_rows; ++r)
      for (int k = 0; k < K; ++k) {
        std::uint16_t bits;
        if (o.values == Values::gpumode) {
          bits = reference::float_to_bf16_bits(formats::e2m1_to_float(static_cast<std::uint8_t>(rng() & 0xB)) *
                                               ((rng() & 1) ? 2.0 : 1.0));
        } else {
          bits = static_cast<std::uint16_t>((rng() & 0x8000) | (uniform(rng, 110, 140) << 7) | (rng() & 0x7F));
        }
        std::memcpy(h.a.data() + r * p.lda + 2 * k, &bits, 2);
      }
    if (o.nan) {
      const std::uint16_t nan = 0x7FC0;
      std::memcpy(h.a.data() + uniform(rng, 0, p.a_rows - 1) * p.lda + 2 * uniform(rng, 0, K - 1), &nan, 2);
    }
  }

  // Weights: E experts of [N, K/2] with padded rows and expert strides; scales in w_layout.
  p.ldw = round16(K / 2) + 16 * uniform(rng, 0, 1);
  p.w_expert_stride = N * p.ldw + 16 * uniform(rng, 0, 2);
  h.w.resize(static_cast<std::size_t>(E * p.w_expert_stride));
  test::fill_random(rng, h.w.data(), h.w.size());
  const auto dense = static_cast<std::int64_t>(formats::scale_bytes(o.w_layout, N, h.cols));
  p.w_scale_expert_stride = dense + (o.w_layout == ScaleLayout::blocked ? 16 * uniform(rng, 0, 1) : uniform(rng, 0, 5));
  h.w_scales.assign(static_cast<std::size_t>(E * p.w_scale_expert_stride), 0xFF);  // padding: NaN codes
  for (int e = 0; e < E; ++e) {
    const std::vector<std::uint8_t> rows = test::random_packed(rng, o.values, N, K, p.ldw);
    std::memcpy(h.w.data() + e * p.w_expert_stride, rows.data(), rows.size());
    std::vector<std::uint8_t> lin = test::random_scales(rng, o.format, o.values, N, h.cols);
    if (o.nan && chance(rng, 0.3))
      lin[static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(lin.size()) - 1))] = 0xFF;
    std::vector<std::uint8_t> dev = lin;
    if (o.w_layout == ScaleLayout::blocked) {
      dev.assign(formats::blocked_scale_bytes(N, h.cols), 0xFF);  // padding rows / columns: NaN codes
      for (int r = 0; r < N; ++r)
        for (std::int64_t c = 0; c < h.cols; ++c)
          dev[formats::blocked_offset(r, c, h.cols)] = lin[static_cast<std::size_t>(r * h.cols + c)];
    }
    std::memcpy(h.w_scales.data() + e * p.w_scale_expert_stride, dev.data(), dev.size());
  }
  if (o.alpha)
    for (int e = 0; e < E; ++e)
      h.alpha.push_back(o.values == Values::gpumode
                            ? std::ldexp(1.0f, uniform(rng, -2, 2)) * ((rng() & 1) ? -1.0f : 1.0f)
                            : static_cast<float>(std::uniform_real_distribution<double>(-3, 3)(rng)));

  // C: [rows, N] with row stride ldc >= N; every byte starts as garbage (kept as the image).
  p.ldc = N + uniform(rng, 0, 3);
  h.c.resize(static_cast<std::size_t>(h.rows * p.ldc) * out_type_size(o.out_type));
  test::fill_random(rng, h.c.data(), h.c.size());
  h.c_image = h.c;
  h.bind();
  std::ostringstream os;
  os << "seed " << seed << ": " << to_string(o.format) << "/" << to_string(o.w_layout) << (o.bf16 ? " bf16" : " fp4")
     << " acts -> " << to_string(o.out_type) << " " << test::to_string(o.values)
     << (o.masked ? " masked" : " contiguous") << (o.gather ? "+gather" : "") << (o.alpha ? " alpha" : "")
     << (o.nan ? " nan" : "") << " E=" << E << " N=" << N << " K=" << K << " rows=" << h.rows;
  h.what = os.str();
}

// The naive check: dequantise with formats:: (A linear, W in its own layout) or bf16 bits by hand,
// one float64 dot product per element, times alpha. Owned elements: bit-identical to the rounded
// value on GPU MODE data (every sum exact in float64), else within float64 summation error of it
// (the reference sums whole blocks first). Everything else in C (rows nobody owns, row padding)
// must still hold its garbage.
::testing::AssertionResult matches_naive(const HostMoe& h) {
  const MoeHostProblem& p = h.p;
  const int K = p.k, N = p.n;
  std::vector<float> a(static_cast<std::size_t>(p.a_rows) * K);
  if (!p.bf16_activations) {
    formats::dequantize(p.format, ScaleLayout::linear, p.a, p.a_rows, K, p.lda, p.a_scales, a.data());
  } else {
    for (int r = 0; r < p.a_rows; ++r)
      for (int k = 0; k < K; ++k) {
        std::uint16_t bits;
        std::memcpy(&bits, p.a + r * p.lda + 2 * k, 2);
        const std::uint32_t word = static_cast<std::uint32_t>(bits) << 16;
        std::memcpy(&a[static_cast<std::size_t>(r) * K + k], &word, 4);
      }
  }
  std::vector<std::vector<float>> w(static_cast<std::size_t>(p.experts));
  for (int e = 0; e < p.experts; ++e) {
    w[static_cast<std::size_t>(e)].resize(static_cast<std::size_t>(N) * K);
    formats::dequantize(p.format, p.w_layout, p.w + e * p.w_expert_stride, N, K, p.ldw,
                        p.w_scales + e * p.w_scale_expert_stride, w[static_cast<std::size_t>(e)].data());
  }
  const std::size_t elem = out_type_size(p.out_type);
  const std::vector<int> owner = h.owners();
  std::ostringstream report;
  int bad = 0, nonzero = 0;
  for (int r = 0; r < h.rows; ++r) {
    const int e = owner[static_cast<std::size_t>(r)];
    for (int n = 0; n < p.ldc; ++n) {
      const std::size_t at = (static_cast<std::size_t>(r) * p.ldc + n) * elem;
      if (e < 0 || n >= N) {  // must be untouched
        if (std::memcmp(h.c.data() + at, h.c_image.data() + at, elem) != 0 && bad++ < 8)
          report << "\n  row " << r << " col " << n << (e < 0 ? " (no expert owns the row)" : " (row padding)")
                 << " was written";
        continue;
      }
      const int src = h.gather.empty() ? r : h.gather[static_cast<std::size_t>(r)];
      double dot = 0, abs_sum = 0;
      for (int k = 0; k < K; ++k) {
        const double prod = static_cast<double>(a[static_cast<std::size_t>(src) * K + k]) *
                            w[static_cast<std::size_t>(e)][static_cast<std::size_t>(n) * K + k];
        dot += prod;
        abs_sum += std::fabs(prod);
      }
      const double alpha = h.alpha.empty() ? 1.0 : h.alpha[static_cast<std::size_t>(e)];
      const double x = dot * alpha;
      const std::uint32_t got_bits =
          test::load_output_bits(h.c.data(), p.out_type, static_cast<std::int64_t>(r) * p.ldc + n);
      const double got = test::output_bits_to_double(got_bits, p.out_type);
      nonzero += got != 0;
      bool ok;
      if (std::isnan(x) || std::isnan(got)) {
        ok = std::isnan(x) && std::isnan(got);
      } else {
        std::uint32_t want_bits = 0;
        switch (p.out_type) {
          case OutType::f16:
            want_bits = reference::float_to_half_bits(x);
            break;
          case OutType::bf16:
            want_bits = reference::float_to_bf16_bits(x);
            break;
          case OutType::f32: {
            const float f = static_cast<float>(x);
            std::memcpy(&want_bits, &f, 4);
            break;
          }
        }
        ok = got_bits == want_bits || (got == 0 && x == 0);
        if (!ok && h.values == Values::full) {  // float64 summation order: K * 2^-52 relative to sum |ab|
          const double slack = K * std::ldexp(abs_sum * std::fabs(alpha), -52);
          ok = std::isinf(got)
                   ? std::signbit(got) == std::signbit(x) && std::fabs(x) + slack >= test::output_overflow(p.out_type)
                   : std::fabs(got - x) <=
                         slack + test::output_half_ulp(p.out_type, std::max(std::fabs(got), std::fabs(x)));
        }
      }
      if (!ok && bad++ < 8)
        report << "\n  row " << r << " (expert " << e << ", A row " << src << ") col " << n << ": got " << got
               << ", naive " << x;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess() << nonzero;
  return ::testing::AssertionFailure() << h.what << ": " << bad << " bad elements" << report.str();
}

TEST(MoeReference, MatchesNaiveOnRandomProblems) {
  int masked = 0, gather = 0, bf16 = 0, blocked = 0, alpha = 0, nan = 0, owned = 0;
  for (std::uint64_t seed = 1; seed <= 400; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    const RandomOptions o = random_options(rng);
    HostMoe h;
    make_problem(h, o, seed);
    reference::moe_gemm(h.p, 1 + static_cast<int>(seed % 3));
    ASSERT_TRUE(matches_naive(h));
    masked += o.masked, gather += o.gather, bf16 += o.bf16, blocked += o.w_layout == ScaleLayout::blocked;
    alpha += o.alpha, nan += o.nan;
    for (int e : h.owners()) owned += e >= 0;
  }
  // The generator reaches every feature (a check of the test itself).
  EXPECT_GT(masked, 40);
  EXPECT_GT(gather, 40);
  EXPECT_GT(bf16, 40);
  EXPECT_GT(blocked, 100);
  EXPECT_GT(alpha, 100);
  EXPECT_GT(nan, 10);
  EXPECT_GT(owned, 2000);
}

// A problem with chosen options (not random), for the named tests below.
void make_with(HostMoe& h, RandomOptions o, std::uint64_t seed) {
  make_problem(h, o, seed);
  reference::moe_gemm(h.p);
}

TEST(MoeReference, ContiguousMaskedGather) {
  for (std::uint64_t seed = 1000; seed < 1030; ++seed) {
    RandomOptions o;
    o.values = seed % 2 ? Values::gpumode : Values::full;
    for (int layout = 0; layout < 3; ++layout) {
      o.masked = layout == 1, o.gather = layout == 2;
      HostMoe h;
      make_with(h, o, seed);
      EXPECT_TRUE(matches_naive(h));
    }
  }
}

TEST(MoeReference, Bf16ActivationsBothFormats) {
  for (std::uint64_t seed = 1100; seed < 1130; ++seed) {
    RandomOptions o;
    o.bf16 = true;
    o.format = seed % 2 ? Format::mxfp4 : Format::nvfp4;
    o.gather = seed % 3 == 0, o.masked = seed % 3 == 1;
    o.out_type = static_cast<OutType>(seed % 3);
    HostMoe h;
    make_with(h, o, seed);
    EXPECT_TRUE(matches_naive(h));
  }
}

// The same weights in the blocked and the linear layout give bitwise the same C.
TEST(MoeReference, BlockedAndLinearWeightScalesAgree) {
  for (std::uint64_t seed = 1200; seed < 1220; ++seed) {
    RandomOptions o;
    o.bf16 = seed % 2 == 0;
    o.format = seed % 4 < 2 ? Format::nvfp4 : Format::mxfp4;
    HostMoe lin;
    make_with(lin, o, seed);
    EXPECT_TRUE(matches_naive(lin));
    // The same problem with lin's linear scales laid out blocked.
    HostMoe blk;
    blk.p = lin.p, blk.values = lin.values, blk.rows = lin.rows, blk.cols = lin.cols, blk.what = lin.what;
    blk.a = lin.a, blk.a_scales = lin.a_scales, blk.w = lin.w, blk.alpha = lin.alpha;
    blk.offsets = lin.offsets, blk.counts = lin.counts, blk.gather = lin.gather;
    const MoeHostProblem& p = lin.p;
    const auto blocked = static_cast<std::int64_t>(formats::blocked_scale_bytes(p.n, lin.cols));
    blk.p.w_layout = ScaleLayout::blocked;
    blk.p.w_scale_expert_stride = blocked;
    blk.w_scales.assign(static_cast<std::size_t>(p.experts * blocked), 0);
    for (int e = 0; e < p.experts; ++e)
      formats::linear_to_blocked(p.w_scales + e * p.w_scale_expert_stride, p.n, lin.cols,
                                 blk.w_scales.data() + e * blocked);
    blk.c = lin.c_image, blk.c_image = lin.c_image;
    blk.bind();
    reference::moe_gemm(blk.p);
    EXPECT_TRUE(blk.c == lin.c) << lin.what;
  }
}

// Hand-worked: A all 1.0 (e2m1 0x2, scale 1), W all 0.5 (e2m1 0x1) with scale 2 -> every product
// 1, every output K * alpha[e]; rows no expert owns keep their bytes.
TEST(MoeReference, HandWorkedValuesAndAlpha) {
  for (const Format format : {Format::nvfp4, Format::mxfp4}) {
    const int K = 64, N = 3, E = 3, rows = 10;
    const int cols = K / scale_block_size(format);
    const std::uint8_t one = format == Format::nvfp4 ? 0x38 : 127, two = format == Format::nvfp4 ? 0x40 : 128;
    std::vector<std::uint8_t> a(static_cast<std::size_t>(rows) * K / 2, 0x22),
        sa(static_cast<std::size_t>(rows) * cols, one);
    std::vector<std::uint8_t> w(static_cast<std::size_t>(E) * N * K / 2, 0x11),
        sw(static_cast<std::size_t>(E) * N * cols, two);
    const std::vector<int> offsets{1, 4, 4, 9};  // expert 0: rows 1..3, expert 1: none, expert 2: 4..8
    const std::vector<float> alpha{1.0f, 5.0f, -0.5f};
    std::vector<float> c(static_cast<std::size_t>(rows) * N, -7.0f);
    MoeHostProblem p;
    p.experts = E, p.n = N, p.k = K, p.format = format;
    p.a = a.data(), p.lda = K / 2, p.a_scales = sa.data(), p.a_rows = rows;
    p.w = w.data(), p.ldw = K / 2, p.w_expert_stride = N * K / 2, p.w_scales = sw.data();
    p.w_layout = ScaleLayout::linear, p.w_scale_expert_stride = N * cols;
    p.alpha = alpha.data(), p.offsets = offsets.data();
    p.c = c.data(), p.ldc = N, p.out_type = OutType::f32;
    reference::moe_gemm(p);
    for (int r = 0; r < rows; ++r)
      for (int n = 0; n < N; ++n) {
        const float want = r >= 1 && r < 4 ? 64.0f : r >= 4 && r < 9 ? -32.0f : -7.0f;
        EXPECT_EQ(c[static_cast<std::size_t>(r) * N + n], want) << to_string(format) << " row " << r << " col " << n;
      }
    // bf16 activations 1.0 (0x3F80): the same products.
    std::vector<std::uint16_t> ab(static_cast<std::size_t>(rows) * K, 0x3F80);
    std::fill(c.begin(), c.end(), -7.0f);
    p.bf16_activations = true;
    p.a = reinterpret_cast<const std::uint8_t*>(ab.data()), p.lda = 2 * K, p.a_scales = nullptr;
    reference::moe_gemm(p);
    for (int r = 0; r < rows; ++r)
      EXPECT_EQ(c[static_cast<std::size_t>(r) * N], r >= 1 && r < 4 ? 64.0f : r >= 4 && r < 9 ? -32.0f : -7.0f) << r;
  }
}

// Bad routings are rejected before anything is written (offsets, counts); a bad gather index is
// rejected too. Each names its argument.
TEST(MoeReference, RejectsBadRoutings) {
  const auto expect_error = [](HostMoe& h, const char* argument, bool untouched) {
    h.c = h.c_image;
    h.bind();
    try {
      reference::moe_gemm(h.p);
      ADD_FAILURE() << "expected fp4gemm::Error naming " << argument << " (" << h.what << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
    if (untouched) EXPECT_TRUE(h.c == h.c_image) << argument << ": C was written before the error";
  };
  for (std::uint64_t seed = 1300; seed < 1310; ++seed) {
    RandomOptions o;
    HostMoe h;
    o.gather = true;
    make_problem(h, o, seed);
    const std::vector<int> offsets = h.offsets, gather = h.gather;
    h.offsets[0] = -1;
    expect_error(h, "expert_offsets", true);
    h.offsets = offsets;
    if (h.p.experts >= 2) {
      h.offsets[2] = h.offsets[1] - 1;
      expect_error(h, "expert_offsets", true);
      h.offsets = offsets;
    }
    h.offsets[static_cast<std::size_t>(h.p.experts)] = h.offsets[static_cast<std::size_t>(h.p.experts) - 1] - 3;
    expect_error(h, "expert_offsets", true);
    h.offsets = offsets;
    // Gather indices out of range, in an owned row.
    const int first = h.offsets[0], last = h.offsets.back();
    if (last > first) {
      h.offsets = {0};
      for (int e = 0; e < h.p.experts; ++e) h.offsets.push_back(h.rows);  // all rows to expert 0
      for (const int bad : {-1, h.p.a_rows, std::numeric_limits<int>::max()}) {
        h.gather = gather;
        h.gather[static_cast<std::size_t>(h.rows - 1)] = bad;
        expect_error(h, "gather_index", false);
      }
      h.gather = gather, h.offsets = offsets;
    }

    RandomOptions m;
    m.masked = true;
    HostMoe hm;
    make_problem(hm, m, seed);
    const std::vector<int> counts = hm.counts;
    for (const int bad : {-1, hm.p.capacity + 1, std::numeric_limits<int>::min()}) {
      hm.counts = counts;
      hm.counts[static_cast<std::size_t>(hm.p.experts) - 1] = bad;
      expect_error(hm, "expert_counts", true);
    }
  }
}

// Valid edge routings: everything empty, everything in one expert, offsets[0] = offsets[E] = rows.
TEST(MoeReference, EmptyAndOneExpertRoutings) {
  for (std::uint64_t seed = 1400; seed < 1410; ++seed) {
    RandomOptions o;
    HostMoe h;
    make_problem(h, o, seed);
    std::fill(h.offsets.begin(), h.offsets.end(), static_cast<int>(seed % 2 ? 0 : h.rows));
    h.bind();
    reference::moe_gemm(h.p);
    EXPECT_TRUE(h.c == h.c_image) << "an empty routing wrote C: " << h.what;
    h.offsets.assign(h.offsets.size(), h.rows);
    h.offsets[0] = 0;  // expert 0 owns everything
    h.bind();
    reference::moe_gemm(h.p);
    EXPECT_TRUE(matches_naive(h));
  }
}

}  // namespace
}  // namespace fp4gemm
