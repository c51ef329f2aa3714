// GPU tier: the GLU epilogue's branch-free division (device/glu.hpp, glu_div_fast) against the
// IEEE division, and the epilogue's whole activation form against the host's glu_activate, bit
// for bit. The GEMM tests cover the same code on their data; these cover every binade of the gate,
// divisors over the whole range the activation produces, and the special values.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device/glu.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

__global__ void fast_division(const float* g, const float* d, float* fast, float* ieee, int* ok, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  bool k;
  fast[i] = detail::glu_div_fast(g[i], d[i], k);
  ok[i] = k ? 1 : 0;
  ieee[i] = __fdiv_rn(g[i], d[i]);
}

// The drain's form (epilogue.cuh, glu_drain): terms, the fast division, the IEEE one where it
// declines.
__global__ void drain_form(const float* g, const float* u, float* out, int n, detail::GluParams p) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const detail::GluTerms t = detail::glu_terms(g[i], u[i], p);
  bool ok;
  float o = detail::glu_div_fast(t.g, t.d, ok) * t.u;
  if (!ok) o = detail::glu_div(t.g, t.d) * t.u;
  out[i] = o;
}

bool same_bits(float a, float b) {
  if (a != a || b != b) return a != a && b != b;
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4), std::memcpy(&y, &b, 4);
  return x == y;
}

float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

template <typename T>
struct DeviceArray {
  explicit DeviceArray(std::size_t n) : n(n) { FP4GEMM_TEST_CUDA(cudaMalloc(&p, n * sizeof(T) + 1)); }
  DeviceArray(const std::vector<T>& v) : DeviceArray(v.size()) {
    FP4GEMM_TEST_CUDA(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    FP4GEMM_TEST_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  std::size_t n;
  T* p = nullptr;
};

#define REQUIRE_GPU() \
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device: the GLU device code cannot run here"

// g / d on the device for every pair: glu_div_fast's result and flag, and __fdiv_rn's quotient.
struct Divisions {
  std::vector<float> fast, ieee;
  std::vector<int> ok;
};

Divisions divide_on_device(const std::vector<float>& g, const std::vector<float>& d) {
  const int n = static_cast<int>(g.size());
  DeviceArray<float> dg(g), dd(d), fast(g.size()), ieee(g.size());
  DeviceArray<int> ok(g.size());
  fast_division<<<(n + 255) / 256, 256>>>(dg.p, dd.p, fast.p, ieee.p, ok.p, n);
  FP4GEMM_TEST_CUDA(cudaGetLastError());
  return {fast.get(), ieee.get(), ok.get()};
}

TEST(GluDevice, FastDivisionIsTheIeeeQuotientWhereItSaysSo) {
  REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937_64 rng(20);
  std::vector<float> g, d;
  // Every binade of g (all bit patterns in steps) against divisors 1 + exp(x) over the range
  // the activation produces (1 ... 2^128 and +inf), their binade ends, and NaN.
  std::vector<float> divisors = {1.0f, 1.0000001f, 2.0f, 0x1p60f, 0x1p64f, 0x1.000002p64f, 0x1p100f, 0x1.fffffep99f, 0x1p101f, 0x1p126f,
                                 0x1.fffffep127f, inf, std::nanf("")};
  std::uniform_real_distribution<float> ex(-20.0f, 89.0f);
  for (int i = 0; i < 64; ++i) divisors.push_back(1.0f + detail::glu_exp(ex(rng)));
  for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 65521) {
    const float gv = from_bits(static_cast<std::uint32_t>(bits));
    for (const float dv : divisors) g.push_back(gv), d.push_back(dv);
  }
  // Random pairs: gates of GEMM magnitude, divisors from the gates themselves (as the activation).
  std::normal_distribution<float> gate(0.0f, 60.0f);
  for (int i = 0; i < 8000000; ++i) {
    const float gv = gate(rng) * (rng() % 4 == 0 ? 1e-20f : 1.0f);
    g.push_back(gv), d.push_back(1.0f + detail::glu_exp(-gv));
  }
  for (const float s : {0.0f, -0.0f, inf, -inf, std::nanf(""), 1e-45f, -1e-45f, 0x1p-100f, 0x1p100f, 3e38f})
    for (const float dv : divisors) g.push_back(s), d.push_back(dv);
  const int n = static_cast<int>(g.size());
  const Divisions r = divide_on_device(g, d);
  const auto &f = r.fast, &q = r.ieee;
  const auto& k = r.ok;
  long accepted = 0, zero_results = 0;
  for (int i = 0; i < n; ++i) {
    if (!k[i]) continue;
    ++accepted;
    zero_results += q[i] == 0.0f;
    ASSERT_TRUE(same_bits(f[i], q[i])) << "g " << g[i] << " d " << d[i] << ": fast " << f[i] << " vs IEEE " << q[i];
  }
  // The fast path must take the common cases, zero results (d = +inf) included, or the epilogue
  // would run the slow branch everywhere.
  EXPECT_GT(accepted, n / 2) << accepted << " of " << n;
  EXPECT_GT(zero_results, 100000);
}

// GPU MODE's dual data (values {0, +-0.5, +-1, +-1.5}, scales {1, 2}) gives gates that are exact
// multiples of 1/4 with a spread of hundreds: every one of them, the divisors above 2^60 included
// (silu gates in about (-88.7, -45), which an earlier version sent to the slow division -- ~10 % of the
// activations, so nearly every warp of the drain took it), must take the fast path -- with the
// IEEE quotient's bits.
TEST(GluDevice, FastDivisionTakesEveryGpuModeGate) {
  REQUIRE_GPU();
  std::vector<float> g, d;
  for (int q = -4 * 2000; q <= 4 * 2000; ++q) {  // every quarter in [-2000, 2000]
    const float gv = 0.25f * static_cast<float>(q);
    for (const int kind : {detail::kGluSilu, detail::kGluSwigluOai}) {
      const detail::GluTerms t = detail::glu_terms(gv, 1.0f, detail::glu_params(kind, 1.702f, 7.0f));
      g.push_back(t.g), d.push_back(t.d);
    }
  }
  const int n = static_cast<int>(g.size());
  const Divisions r = divide_on_device(g, d);
  const auto &f = r.fast, &q = r.ieee;
  const auto& k = r.ok;
  int big = 0;
  for (int i = 0; i < n; ++i) {
    big += d[i] > 0x1p60f && d[i] < std::numeric_limits<float>::infinity();
    ASSERT_TRUE(k[i]) << "g " << g[i] << " d " << d[i] << " declined by the fast division";
    ASSERT_TRUE(same_bits(f[i], q[i])) << "g " << g[i] << " d " << d[i] << ": fast " << f[i] << " vs IEEE " << q[i];
  }
  EXPECT_GT(big, 200) << "the grid must reach the divisors above 2^60";
}

TEST(GluDevice, DrainFormGivesTheHostActivationBits) {
  REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937_64 rng(21);
  std::vector<float> g, u;
  const float us[] = {1.0f, -2.5f, 0.0f, -0.0f, inf, -inf, 3e38f, std::nanf(""), 1e-40f};
  for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 8191) {
    const float gv = from_bits(static_cast<std::uint32_t>(bits));
    g.push_back(gv), u.push_back(us[bits % 9]);
  }
  std::normal_distribution<float> n(0.0f, 200.0f);
  for (int i = 0; i < 2000000; ++i) g.push_back(n(rng)), u.push_back(n(rng));
  for (const int kind : {detail::kGluSilu, detail::kGluSwigluOai}) {
    const detail::GluParams p = detail::glu_params(kind, 1.702f, 7.0f);
    const int count = static_cast<int>(g.size());
    DeviceArray<float> dg(g), du(u), out(g.size());
    drain_form<<<(count + 255) / 256, 256>>>(dg.p, du.p, out.p, count, p);
    FP4GEMM_TEST_CUDA(cudaGetLastError());
    const auto o = out.get();
    for (int i = 0; i < count; ++i)
      ASSERT_TRUE(same_bits(o[i], detail::glu_activate(kind, g[i], u[i], 1.702f, 7.0f)))
          << "kind " << kind << " g " << g[i] << " u " << u[i] << ": " << o[i];
  }
}

}  // namespace
}  // namespace fp4gemm::test
