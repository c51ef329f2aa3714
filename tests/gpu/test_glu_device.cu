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

// Both forms of the fast division: the general one (NaN divisors allowed) and the drain's
// (glu_div_fast<false>, for divisors that are never NaN), each with its flag.
__global__ void fast_division(const float* g, const float* d, float* fast, float* ieee, int* ok, float* fast_nn,
                              int* ok_nn, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  bool k;
  fast[i] = detail::glu_div_fast(g[i], d[i], k);
  ok[i] = k ? 1 : 0;
  fast_nn[i] = detail::glu_div_fast<false>(g[i], d[i], k);
  ok_nn[i] = k ? 1 : 0;
  ieee[i] = __fdiv_rn(g[i], d[i]);
}

// The drain's own function (epilogue.cuh, glu_drain -> glu.hpp, glu_activate_pair), two pairs per
// thread as the drain calls it.
__global__ void drain_form(const float* g, const float* u, float* out, int n, detail::GluParams p) {
  const int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const int j = i + 1 < n ? i + 1 : i;
  const float2 o = detail::glu_activate_pair(make_float2(g[i], u[i]), make_float2(g[j], u[j]), p);
  out[i] = o.x;
  if (j != i) out[j] = o.y;
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
  std::vector<float> fast, ieee, fast_nn;  // fast_nn: glu_div_fast<false>
  std::vector<int> ok, ok_nn;
};

Divisions divide_on_device(const std::vector<float>& g, const std::vector<float>& d) {
  const int n = static_cast<int>(g.size());
  DeviceArray<float> dg(g), dd(d), fast(g.size()), ieee(g.size()), fast_nn(g.size());
  DeviceArray<int> ok(g.size()), ok_nn(g.size());
  fast_division<<<(n + 255) / 256, 256>>>(dg.p, dd.p, fast.p, ieee.p, ok.p, fast_nn.p, ok_nn.p, n);
  FP4GEMM_TEST_CUDA(cudaGetLastError());
  return {fast.get(), ieee.get(), fast_nn.get(), ok.get(), ok_nn.get()};
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
  long accepted = 0, zero_results = 0, accepted_nn = 0;
  for (int i = 0; i < n; ++i) {
    // The drain's form, for divisors that are not NaN: where it accepts, the IEEE quotient too; and
    // it accepts exactly what the general form accepts (its two dropped bounds are implied by d >= 1).
    if (d[i] == d[i]) {
      ASSERT_EQ(r.ok_nn[i], k[i]) << "g " << g[i] << " d " << d[i];
      if (r.ok_nn[i]) {
        ++accepted_nn;
        ASSERT_TRUE(same_bits(r.fast_nn[i], q[i])) << "g " << g[i] << " d " << d[i] << ": fast<false> " << r.fast_nn[i];
      }
    }
    if (!k[i]) continue;
    ++accepted;
    zero_results += q[i] == 0.0f;
    ASSERT_TRUE(same_bits(f[i], q[i])) << "g " << g[i] << " d " << d[i] << ": fast " << f[i] << " vs IEEE " << q[i];
  }
  EXPECT_GT(accepted_nn, n / 2);
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

// The drain's function against the host's glu_activate (the literal form: glu_terms and the IEEE
// division), bit for bit: gates over every binade, the gates where x = -(alpha g) crosses the
// exponent's clamp (-87) and its overflow end (88.72283935546875, compared strictly), NaN and
// infinite gates and ups, for silu and swigluoai with gpt-oss's constants, alpha 0 and -1 (an
// infinite gate makes x NaN; a negative alpha turns the gate's sign) and an infinite limit.
TEST(GluDevice, DrainFormGivesTheHostActivationBits) {
  REQUIRE_GPU();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    int kind;
    float alpha, limit;
  };
  const Case cases[] = {{detail::kGluSilu, 1.702f, 7.0f}, {detail::kGluSwigluOai, 1.702f, 7.0f},
                        {detail::kGluSwigluOai, 0.0f, 7.0f}, {detail::kGluSwigluOai, -1.0f, 7.0f},
                        {detail::kGluSwigluOai, 1.702f, inf}, {detail::kGluSwigluOai, 2.5f, 300.0f}};
  const float us[] = {1.0f, -2.5f, 0.0f, -0.0f, inf, -inf, 3e38f, std::nanf(""), 1e-40f};
  for (const Case& c : cases) {
    const detail::GluParams p = detail::glu_params(c.kind, c.alpha, c.limit);
    std::mt19937_64 rng(21);
    std::vector<float> g, u;
    for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 8191) {
      const float gv = from_bits(static_cast<std::uint32_t>(bits));
      g.push_back(gv), u.push_back(us[bits % 9]);
    }
    // Every gate within 4096 ulps of each threshold of x (where alpha is not 0).
    if (p.alpha != 0.0f)
      for (const float xt : {-87.0f, 88.72283935546875f}) {
        float gv = -xt / p.alpha;
        for (int i = 0; i < 4096; ++i) gv = std::nextafter(gv, -inf);
        for (int i = 0; i < 8192; ++i, gv = std::nextafter(gv, inf)) g.push_back(gv), u.push_back(us[i % 4]);
      }
    std::normal_distribution<float> n(0.0f, 200.0f);
    for (int i = 0; i < 1000000; ++i) g.push_back(n(rng)), u.push_back(n(rng));
    for (const float s : {0.0f, -0.0f, inf, -inf, std::nanf("")})
      for (const float uv : us) g.push_back(s), u.push_back(uv);
    const int count = static_cast<int>(g.size());
    DeviceArray<float> dg(g), du(u), out(g.size());
    FP4GEMM_TEST_CUDA(cudaMemset(out.p, 0x7F, g.size() * sizeof(float)));  // poison: 0x7F7F7F7F (3.39e38, finite)
    drain_form<<<(count / 2 + 256) / 256, 256>>>(dg.p, du.p, out.p, count, p);
    FP4GEMM_TEST_CUDA(cudaGetLastError());
    const auto o = out.get();
    long nan_outputs = 0;
    for (int i = 0; i < count; ++i) {
      const float want = detail::glu_activate(c.kind, g[i], u[i], c.alpha, c.limit);
      nan_outputs += want != want;
      ASSERT_TRUE(same_bits(o[i], want)) << "kind " << c.kind << " alpha " << c.alpha << " limit " << c.limit << " g "
                                         << g[i] << " u " << u[i] << ": " << o[i] << " vs " << want;
    }
    EXPECT_LT(nan_outputs, count / 4) << "the data must not be mostly NaN";
  }
}

}  // namespace
}  // namespace fp4gemm::test
