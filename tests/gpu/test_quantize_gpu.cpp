// GPU tier: fp4gemm::quantize_activations against the host quantiser (formats::quantize), every
// byte of the packed values and the scales, both layouts, guard bands around both outputs.
// Inputs: random values over many binades, exact e2m1 ties of the block's divisor and their
// neighbours (f32 inputs), zeros and -0, subnormals, +-inf and NaN sprinkled, huge values; bf16,
// f16 and f32; NVFP4 with global scales (scalar and device) and MXFP4.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/quantize.hpp"
#include "fp4gemm/reference.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

bool gpu_available() { return device_count() > 0; }

enum class Data { random, ties, specials };

struct QCase {
  Format format = Format::nvfp4;
  InputType input = InputType::bf16;
  ScaleLayout layout = ScaleLayout::linear;
  Data data = Data::random;
  float gs = 1.0f;
  bool gs_device = false;
  int rows = 64, k = 256;
  std::int64_t ldx_pad = 0, ld_packed_pad = 0;
  std::uint64_t seed = 1;
  std::string describe() const {
    std::ostringstream os;
    os << to_string(format) << " " << to_string(input) << " " << to_string(layout) << " data "
       << (data == Data::random ? "random" : data == Data::ties ? "ties" : "specials") << " gs " << gs
       << (gs_device ? " (device)" : "") << " rows " << rows << " k " << k << " seed " << seed;
    return os.str();
  }
};

// The value as the input type holds it (bf16 / f16 rounding), as a float.
float representable(InputType t, float v) {
  if (t == InputType::bf16) return static_cast<float>(reference::bf16_bits_to_double(reference::float_to_bf16_bits(v)));
  if (t == InputType::f16) return static_cast<float>(reference::half_bits_to_double(reference::float_to_half_bits(v)));
  return v;
}

std::vector<float> make_values(const QCase& c, std::mt19937_64& rng) {
  const int vec = scale_block_size(c.format);
  std::vector<float> x(static_cast<std::size_t>(c.rows) * c.k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(c.input == InputType::f16 ? -14 : -60, c.input == InputType::f16 ? 10 : 60);
  std::uniform_int_distribution<int> pick(0, 99);
  static const float kTies[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, 0.0f};
  for (std::size_t b = 0; b < x.size() / vec; ++b) {
    const int blk_binade = binade(rng);
    // ties: a divisor with few significant bits (E4M3 code times a short global scale), the
    // block's amax 6 d so the block's scale is S, the others t * d and (f32) their neighbours.
    const float d = std::ldexp(1.0f + 0.125f * static_cast<float>(rng() % 8), static_cast<int>(rng() % 12) - 6) *
                    (c.format == Format::nvfp4 ? c.gs : 1.0f);
    for (int i = 0; i < vec; ++i) {
      float v = 0;
      switch (c.data) {
        case Data::random: v = std::ldexp(normal(rng), blk_binade + static_cast<int>(rng() % 5) - 2); break;
        case Data::ties: {
          v = (i == 0 ? 6.0f : kTies[rng() % 15]) * d * (rng() % 2 ? -1.0f : 1.0f);
          if (c.input == InputType::f32 && i > 0 && rng() % 3 == 0)
            v = std::nextafter(v, rng() % 2 ? std::numeric_limits<float>::infinity() : 0.0f);
          break;
        }
        case Data::specials: {
          const int p = pick(rng);
          if (p < 10) v = 0.0f;
          else if (p < 15) v = -0.0f;
          else if (p < 25) v = std::ldexp(normal(rng), -130);  // subnormal (bf16 / f32)
          else if (p < 27) v = std::numeric_limits<float>::infinity();
          else if (p < 29) v = -std::numeric_limits<float>::infinity();
          else if (p < 31) v = std::numeric_limits<float>::quiet_NaN();
          else if (p < 35) v = std::ldexp(normal(rng), 120);  // overflows f16 to inf
          else v = std::ldexp(normal(rng), blk_binade);
          break;
        }
      }
      x[b * vec + i] = representable(c.input, v);
    }
    if (c.data == Data::specials && rng() % 4 == 0)  // some all-zero blocks
      for (int i = 0; i < vec; ++i) x[b * vec + i] = 0.0f;
  }
  return x;
}

::testing::AssertionResult run_case(const QCase& c) {
  std::mt19937_64 rng(c.seed);
  const int vec = scale_block_size(c.format), cols = c.k / vec;
  const std::vector<float> x = make_values(c, rng);
  // Host: the rule.
  std::vector<std::uint8_t> want_p(static_cast<std::size_t>(c.rows) * c.k / 2), want_s(static_cast<std::size_t>(c.rows) * cols);
  formats::quantize(c.format, x.data(), c.rows, c.k, c.k, want_p.data(), want_s.data(), c.gs);
  if (c.layout == ScaleLayout::blocked) {
    std::vector<std::uint8_t> blk(formats::blocked_scale_bytes(c.rows, cols));
    formats::linear_to_blocked(want_s.data(), c.rows, cols, blk.data());
    want_s = blk;
  }
  // Device input in its type.
  const std::size_t esize = c.input == InputType::f32 ? 4 : 2;
  const std::int64_t ldx = c.k + c.ldx_pad;
  std::vector<std::uint8_t> xin(static_cast<std::size_t>(c.rows) * ldx * esize);
  fill_random(rng, xin.data(), xin.size());  // padding: garbage
  for (int r = 0; r < c.rows; ++r)
    for (int k = 0; k < c.k; ++k) {
      const float v = x[static_cast<std::size_t>(r) * c.k + k];
      std::uint8_t* dst = xin.data() + (static_cast<std::size_t>(r) * ldx + k) * esize;
      if (c.input == InputType::f32) std::memcpy(dst, &v, 4);
      else {
        const std::uint16_t h = c.input == InputType::bf16 ? reference::float_to_bf16_bits(v) : reference::float_to_half_bits(v);
        std::memcpy(dst, &h, 2);
      }
    }
  const std::int64_t ldp = c.k / 2 + c.ld_packed_pad;
  const std::size_t guard = 512, p_bytes = static_cast<std::size_t>(c.rows) * ldp, s_bytes = want_s.size();
  std::vector<std::uint8_t> image(guard + p_bytes + guard + s_bytes + guard);
  fill_random(rng, image.data(), image.size());
  DeviceBuffer d_x(xin.size() + 16), d_out(image.size()), d_gs(16);
  FP4GEMM_TEST_CUDA(cudaMemcpy(d_x.get(), xin.data(), xin.size(), cudaMemcpyHostToDevice));
  FP4GEMM_TEST_CUDA(cudaMemcpy(d_out.get(), image.data(), image.size(), cudaMemcpyHostToDevice));
  FP4GEMM_TEST_CUDA(cudaMemcpy(d_gs.get(), &c.gs, 4, cudaMemcpyHostToDevice));
  QuantizeArgs a;
  a.format = c.format, a.input = c.input, a.x = d_x.get(), a.ldx = ldx, a.rows = c.rows, a.k = c.k;
  a.packed = d_out.get() + guard, a.ld_packed = ldp, a.scales = d_out.get() + guard + p_bytes + guard;
  a.scale_layout = c.layout;
  if (c.gs_device) a.global_scale_device = reinterpret_cast<const float*>(d_gs.get());
  else a.global_scale = c.gs;
  quantize_activations(a);
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<std::uint8_t> got(image.size());
  FP4GEMM_TEST_CUDA(cudaMemcpy(got.data(), d_out.get(), got.size(), cudaMemcpyDeviceToHost));
  // Expected image: the host results in place, the rest untouched (row padding of packed too).
  std::vector<std::uint8_t> want = image;
  for (int r = 0; r < c.rows; ++r)
    std::memcpy(want.data() + guard + static_cast<std::size_t>(r) * ldp, want_p.data() + static_cast<std::size_t>(r) * c.k / 2, c.k / 2);
  std::memcpy(want.data() + guard + p_bytes + guard, want_s.data(), s_bytes);
  std::ostringstream os;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (bad++ < 6) {
      os << "\n  byte " << i << ": got 0x" << std::hex << int(got[i]) << " want 0x" << int(want[i]) << std::dec;
      if (i >= guard && i < guard + p_bytes) {
        const std::size_t r = (i - guard) / ldp, col = (i - guard) % ldp;
        os << " (packed row " << r << ", elements " << 2 * col << "/" << 2 * col + 1 << ": "
           << x[r * c.k + 2 * col] << ", " << x[r * c.k + 2 * col + 1] << ")";
      } else if (i >= guard + p_bytes + guard && i < guard + p_bytes + guard + s_bytes) {
        os << " (scales)";
      } else {
        os << " (guard band / padding)";
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << c.describe() << ": " << bad << " bytes differ" << os.str();
}

TEST(QuantizeGpu, EveryByteMatchesTheHostQuantiser) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device: the GPU quantiser cannot run here";
  std::mt19937_64 rng(2026);
  int cases = 0;
  for (int rep = 0; rep < 4; ++rep)
    for (Format f : {Format::nvfp4, Format::mxfp4})
      for (InputType in : {InputType::bf16, InputType::f16, InputType::f32})
        for (Data d : {Data::random, Data::ties, Data::specials})
          for (ScaleLayout l : {ScaleLayout::linear, ScaleLayout::blocked}) {
            QCase c;
            c.format = f, c.input = in, c.data = d, c.layout = l;
            c.rows = 1 + static_cast<int>(rng() % 300);
            c.k = scale_block_size(f) * (1 + static_cast<int>(rng() % 40));
            c.ldx_pad = (rng() % 2) * (in == InputType::f32 ? 4 : 8) * static_cast<std::int64_t>(rng() % 3);
            c.ld_packed_pad = 8 * static_cast<std::int64_t>(rng() % 3);
            if (f == Format::nvfp4) {
              // (0.70710677: a calibrated-looking scale, t * d inexact: thresholds moved by the FMA residual)
              static const float kGs[] = {1.0f, 0.75f, 1.5f, 0.125f, 3.0f, 0.70710677f};
              c.gs = d == Data::random && rng() % 2 ? std::ldexp(0.5f + 0.5f * static_cast<float>(rng() % 1000) / 1000, -static_cast<int>(rng() % 10))
                                                    : kGs[rng() % 6];
              c.gs_device = rng() % 2;
            }
            c.seed = rng();
            EXPECT_TRUE(run_case(c));
            ++cases;
          }
  EXPECT_EQ(cases, 4 * 36);
}

TEST(QuantizeGpu, LargeActivationMatrix) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device: the GPU quantiser cannot run here";
  QCase c;
  c.rows = 1024, c.k = 7168, c.seed = 9;
  EXPECT_TRUE(run_case(c));
  c.format = Format::mxfp4, c.gs = 1.0f;
  EXPECT_TRUE(run_case(c));
}

// NVFP4 global scales at FP32's edges: the kernel's scale-code shortcut (amax * 1/(6 gs)) is off
// where 6 gs overflows or its reciprocal leaves [2^-120, 2^120], and thresholds near under- or
// overflow take the division path; the rule is the same everywhere.
TEST(QuantizeGpu, ExtremeGlobalScales) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device: the GPU quantiser cannot run here";
  std::mt19937_64 rng(31);
  for (float gs : {1e38f, 3e37f, 6e36f, 0x1p-118f, 1e-38f, 1e-40f, 0x1p-140f})
    for (Data d : {Data::random, Data::specials})
      for (InputType in : {InputType::bf16, InputType::f32}) {
        QCase c;
        c.format = Format::nvfp4, c.input = in, c.data = d, c.gs = gs, c.gs_device = rng() % 2;
        c.rows = 64, c.k = 512, c.seed = rng();
        EXPECT_TRUE(run_case(c));
      }
}

// Many more scale blocks than one wave of threads, with few blocks per row: each thread walks
// several rows per step (the persistent kernel's stride wraps rows and blocks).
TEST(QuantizeGpu, ManyShortRows) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device: the GPU quantiser cannot run here";
  std::mt19937_64 rng(77);
  for (Format f : {Format::nvfp4, Format::mxfp4})
    for (ScaleLayout l : {ScaleLayout::linear, ScaleLayout::blocked})
      for (int k_blocks : {1, 3, 4, 7, 8}) {
        QCase c;
        c.format = f, c.layout = l, c.rows = 100000 / k_blocks + static_cast<int>(rng() % 1000);
        c.k = scale_block_size(f) * k_blocks;
        c.gs = f == Format::nvfp4 ? 0.70710677f : 1.0f;
        c.seed = rng();
        EXPECT_TRUE(run_case(c));
      }
}

TEST(QuantizeGpu, BadArgumentsNamed) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA device: the GPU quantiser cannot run here";
  DeviceBuffer x(1 << 16), p(1 << 16), s(1 << 16);
  QuantizeArgs ok;
  ok.x = x.get(), ok.packed = p.get(), ok.scales = s.get(), ok.rows = 8, ok.k = 64;
  EXPECT_NO_THROW(quantize_activations(ok));
  auto expect = [&](const char* argument, auto edit) {
    QuantizeArgs a = ok;
    edit(a);
    try {
      quantize_activations(a);
      ADD_FAILURE() << "no error naming " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  };
  expect("k", [](QuantizeArgs& a) { a.k = 40; });
  expect("rows", [](QuantizeArgs& a) { a.rows = -1; });
  expect("ldx", [](QuantizeArgs& a) { a.ldx = 32; });
  expect("ld_packed", [](QuantizeArgs& a) { a.ld_packed = 12; });
  expect("global_scale", [](QuantizeArgs& a) { a.global_scale = 0.0f; });
  expect("global_scale", [](QuantizeArgs& a) { a.global_scale = std::numeric_limits<float>::infinity(); });
  expect("global_scale", [](QuantizeArgs& a) { a.format = Format::mxfp4, a.global_scale = 2.0f; });
  expect("x", [](QuantizeArgs& a) { a.x = nullptr; });
  expect("x", [](QuantizeArgs& a) { a.rows = 10000; });  // past the allocation
  expect("packed", [&](QuantizeArgs& a) { a.packed = static_cast<std::uint8_t*>(a.packed) + 4; });
  std::vector<std::uint8_t> host(4096);
  expect("scales", [&](QuantizeArgs& a) { a.scales = host.data(); });
}

}  // namespace
}  // namespace fp4gemm::test
