// Host tier: the MoE GPU tier's own machinery (tests/gpu/moe_problem.*) checked without a GPU, so
// that a GPU failure means the kernel: the routings are valid and of their kind, an FP32 kernel
// simulated on the CPU (round-to-nearest and round-toward-zero accumulation, other orders) passes
// the checker, and the checker catches every kind of fault (a wrong bit, NaN, the poison, writes
// into guard bands, row padding or rows nobody owns).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/reference.hpp"
#include "gpu/moe_problem.hpp"

namespace fp4gemm::test::moe {
namespace {

constexpr double kHostBudget = 3.0e6;  // MACs per configuration: the simulations run on one core

::testing::AssertionResult valid_routing(const MoeConfig& cfg, const Routing& r, RoutingKind kind) {
  const int E = cfg.experts, cap = cfg.capacity;
  const auto fail = [&](const std::string& why) {
    return ::testing::AssertionFailure() << cfg.describe() << " " << r.describe() << ": " << why;
  };
  int nonempty = 0;
  if (cfg.layout == MoeLayout::masked) {
    if (r.counts.size() != static_cast<std::size_t>(E) || !r.offsets.empty() || !r.gather.empty()) return fail("shape");
    for (int c : r.counts) {
      if (c < 0 || c > cap) return fail("count out of range");
      nonempty += c > 0;
    }
    if (kind == RoutingKind::full && std::any_of(r.counts.begin(), r.counts.end(), [&](int c) { return c != cap; }))
      return fail("full: a count below capacity");
    if (kind == RoutingKind::empty && nonempty != 0) return fail("empty: rows");
    if (kind == RoutingKind::one_expert &&
        (nonempty != 1 || *std::max_element(r.counts.begin(), r.counts.end()) != cap))
      return fail("one expert: not exactly one full slot");
  } else {
    if (r.offsets.size() != static_cast<std::size_t>(E) + 1 || !r.counts.empty()) return fail("shape");
    if (r.offsets[0] < 0) return fail("offsets[0] < 0");
    for (int e = 0; e < E; ++e) {
      if (r.offsets[e + 1] < r.offsets[e]) return fail("decreasing");
      nonempty += r.offsets[e + 1] > r.offsets[e];
    }
    if (r.offsets[E] > cap) return fail("past capacity");
    if (cfg.gather != !r.gather.empty()) return fail("gather index presence");
    if (cfg.gather) {
      if (r.gather.size() != static_cast<std::size_t>(cap)) return fail("gather size");
      for (int g : r.gather)
        if (g < 0 || g >= cfg.a_rows()) return fail("gather index out of range");
    }
    const int total = r.offsets[E] - r.offsets[0];
    if (kind == RoutingKind::full && (r.offsets[0] != 0 || r.offsets[E] != cap)) return fail("full: not full");
    if (kind == RoutingKind::partial && r.offsets[E] >= cap) return fail("partial: full");
    if (kind == RoutingKind::shifted && cap >= 2 && r.offsets[0] == 0) return fail("shifted: starts at 0");
    if (kind == RoutingKind::empty && total != 0) return fail("empty: rows");
    if (kind == RoutingKind::one_expert && nonempty > 1) return fail("one expert: more");
    if (kind == RoutingKind::few_experts && nonempty > 3) return fail("few experts: more than 3");
    if (kind == RoutingKind::topk && cfg.gather)
      for (int e = 0; e < E; ++e) {  // an expert sees a token at most once
        std::set<int> seen;
        for (int row = r.offsets[e]; row < r.offsets[e + 1]; ++row)
          if (!seen.insert(r.gather[static_cast<std::size_t>(row)]).second)
            return fail("topk: a token twice in one expert");
      }
  }
  const std::vector<int> owner = row_owners(cfg, r);
  std::int64_t owned = 0;
  for (int o : owner) owned += o >= 0;
  std::int64_t total = 0;
  if (cfg.layout == MoeLayout::masked)
    for (int c : r.counts) total += c;
  else
    total = r.offsets[static_cast<std::size_t>(E)] - r.offsets[0];
  if (owned != total) return fail("row_owners disagrees with the routing");
  return ::testing::AssertionSuccess();
}

TEST(MoeHarness, RoutingsAreValidAndOfTheirKind) {
  int big_expert = 0, e1 = 0, e512 = 0;
  for (std::uint64_t seed = 0; seed < 150; ++seed) {
    const MoeConfig cfg = random_moe_config(900000 + seed);
    e1 += cfg.experts == 1, e512 += cfg.experts == 512;
    std::mt19937_64 rng(seed);
    for (int k = 0; k < kRoutingKinds; ++k) {
      const auto kind = static_cast<RoutingKind>(k);
      const Routing r = make_routing(cfg, rng, kind);
      ASSERT_TRUE(valid_routing(cfg, r, kind)) << to_string(kind);
      if (cfg.layout == MoeLayout::contiguous)
        for (int e = 0; e < cfg.experts; ++e) big_expert += r.offsets[e + 1] - r.offsets[e] >= 4096;
    }
  }
  EXPECT_GT(big_expert, 5);  // rows per expert reach 4096
  EXPECT_GT(e1, 0);
  EXPECT_GT(e512, 0);
}

// The GPU tier's random weight sets (MoeRandom) cover what the issue asks for, so that the tier
// cannot silently shrink to easy cases.
TEST(MoeHarness, RandomConfigsCoverTheSpace) {
  int e1 = 0, e512 = 0, masked = 0, gather = 0, bf16 = 0, big_capacity = 0, full = 0, device_alpha = 0;
  int formats[2] = {}, layouts[2] = {}, outs[3] = {};
  for (int i = 0; i < kMoeRandomSets; ++i) {
    const MoeConfig c = random_moe_config(kMoeRandomSeed0 + static_cast<std::uint64_t>(i));
    e1 += c.experts == 1, e512 += c.experts == 512;
    masked += c.layout == MoeLayout::masked, gather += c.gather, bf16 += c.activation == MoeActivation::bf16;
    big_capacity += c.layout == MoeLayout::contiguous && c.capacity >= 4096;
    full += c.values == Values::full, device_alpha += c.alpha == AlphaMode::device;
    ++formats[static_cast<int>(c.format)], ++layouts[static_cast<int>(c.scale_layout)],
        ++outs[static_cast<int>(c.out_type)];
    EXPECT_LE(static_cast<double>(c.rows()) * c.n * c.k, 2.0e7) << c.describe();
    EXPECT_TRUE(c.activation == MoeActivation::fp4 || c.format == Format::mxfp4) << c.describe();
  }
  EXPECT_GT(e1, 0);
  EXPECT_GT(e512, 0);
  EXPECT_GT(masked, 5);
  EXPECT_GT(gather, 5);
  EXPECT_GT(bf16, 5);
  EXPECT_GT(big_capacity, 3);
  EXPECT_GT(full, 10);
  EXPECT_GT(device_alpha, 5);
  for (int f : formats) EXPECT_GT(f, 10);
  for (int l : layouts) EXPECT_GT(l, 10);
  for (int o : outs) EXPECT_GT(o, 5);
}

// The activations of row `src`, dequantised (exact floats).
std::vector<float> activations(const MoeWeightSet& ws, const MoeInputs& in, int src) {
  const MoeConfig& cfg = ws.config();
  std::vector<float> v(static_cast<std::size_t>(cfg.k));
  const std::uint8_t* row = in.a.data() + src * ws.lda;
  const int vec = scale_block_size(cfg.format);
  for (int k = 0; k < cfg.k; ++k) {
    if (cfg.activation == MoeActivation::fp4) {
      v[static_cast<std::size_t>(k)] =
          formats::e2m1_to_float(formats::get_nibble(row, k)) *
          formats::scale_to_float(cfg.format, in.a_scales[static_cast<std::size_t>(src * ws.cols + k / vec)]);
    } else {
      std::uint16_t bits;
      std::memcpy(&bits, row + 2 * k, 2);
      const std::uint32_t word = static_cast<std::uint32_t>(bits) << 16;
      std::memcpy(&v[static_cast<std::size_t>(k)], &word, 4);
    }
  }
  return v;
}

enum class Accumulate { nearest_forward, toward_zero_reverse, blocks_of_16 };

float add_toward_zero(float acc, float x) {
  const double d = static_cast<double>(acc) + x;
  float t = static_cast<float>(d);
  if (std::fabs(t) > std::fabs(d)) t = std::nextafter(t, 0.0f);
  return t;
}

// What an exact-dequantisation FP32 kernel could leave in the arena: products exact in FP32, sums
// in FP32 (`mode`), one FP32 multiplication by alpha, one rounding to the output type.
std::vector<std::uint8_t> simulate_fp32_kernel(const MoeWeightSet& ws, const MoeBuffers& buffers, const MoeInputs& in,
                                               Poison poison, Accumulate mode) {
  const MoeConfig& cfg = ws.config();
  std::vector<std::uint8_t> out = buffers.c_image(poison);
  const std::vector<int> owner = row_owners(cfg, in.routing);
  const std::size_t elem = out_type_size(cfg.out_type);
  const int K = cfg.k;
  for (int r = 0; r < cfg.rows(); ++r) {
    const int e = owner[static_cast<std::size_t>(r)];
    if (e < 0) continue;
    const std::vector<float> a = activations(ws, in, cfg.gather ? in.routing.gather[static_cast<std::size_t>(r)] : r);
    const std::vector<float>& w = ws.dequantised(e);
    for (int n = 0; n < cfg.n; ++n) {
      const float* b = w.data() + static_cast<std::size_t>(n) * K;
      float acc = 0;
      switch (mode) {
        case Accumulate::nearest_forward:
          for (int k = 0; k < K; ++k) acc += a[static_cast<std::size_t>(k)] * b[k];
          break;
        case Accumulate::toward_zero_reverse:
          for (int k = K - 1; k >= 0; --k) acc = add_toward_zero(acc, a[static_cast<std::size_t>(k)] * b[k]);
          break;
        case Accumulate::blocks_of_16:
          for (int k0 = 0; k0 < K; k0 += 16) {
            float block = 0;
            for (int k = k0; k < std::min(K, k0 + 16); ++k) block += a[static_cast<std::size_t>(k)] * b[k];
            acc += block;
          }
          break;
      }
      const float v = acc * in.alphas[static_cast<std::size_t>(e)];
      std::uint8_t* dst = out.data() + buffers.c_offset() + (static_cast<std::size_t>(r) * ws.ldc + n) * elem;
      std::uint16_t h;
      switch (cfg.out_type) {
        case OutType::f16:
          h = reference::float_to_half_bits(v), std::memcpy(dst, &h, 2);
          break;
        case OutType::bf16:
          h = reference::float_to_bf16_bits(v), std::memcpy(dst, &h, 2);
          break;
        case OutType::f32:
          std::memcpy(dst, &v, 4);
          break;
      }
    }
  }
  return out;
}

TEST(MoeHarness, SimulatedFp32KernelPassesTheChecker) {
  int exact = 0, full = 0;
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    const MoeConfig cfg = random_moe_config(910000 + seed, kHostBudget);
    SCOPED_TRACE(cfg.describe());
    const MoeWeightSet ws(cfg, false);
    const MoeBuffers buffers(ws, false);
    std::mt19937_64 rng(seed);
    for (int j = 0; j < 2; ++j) {
      const MoeInputs in =
          make_inputs(ws, rng, make_routing(cfg, rng, static_cast<RoutingKind>((seed + j) % kRoutingKinds)));
      const Poison poison = j == 0 ? Poison::nan : Poison::finite;
      const std::vector<std::uint8_t> expected = expected_c(ws, buffers, in, poison, 1);
      ASSERT_TRUE(check_c(ws, buffers, in, expected, expected));  // the reference passes itself
      for (const Accumulate mode :
           {Accumulate::nearest_forward, Accumulate::toward_zero_reverse, Accumulate::blocks_of_16})
        EXPECT_TRUE(check_c(ws, buffers, in, simulate_fp32_kernel(ws, buffers, in, poison, mode), expected))
            << "accumulation " << static_cast<int>(mode) << ", routing " << in.routing.describe();
      (cfg.values == Values::gpumode ? exact : full) += 1;
    }
  }
  EXPECT_GT(exact, 20);
  EXPECT_GT(full, 20);
}

// Every fault is caught: on GPU MODE data one flipped bit, on full-range data a value just outside
// the bound; NaN, the poison, writes into the guard bands, row padding and rows nobody owns.
TEST(MoeHarness, CheckerCatchesFaults) {
  struct Case {
    Values values;
    OutType out;
    MoeLayout layout;
    bool gather;
  };
  const Case cases[] = {{Values::gpumode, OutType::f16, MoeLayout::contiguous, true},
                        {Values::gpumode, OutType::bf16, MoeLayout::masked, false},
                        {Values::full, OutType::f32, MoeLayout::contiguous, false},
                        {Values::full, OutType::f16, MoeLayout::contiguous, true},
                        {Values::full, OutType::bf16, MoeLayout::masked, false}};
  std::uint64_t seed = 920000;
  for (const Case& c : cases) {
    MoeConfig cfg;
    cfg.values = c.values, cfg.out_type = c.out, cfg.layout = c.layout, cfg.gather = c.gather;
    cfg.experts = 5, cfg.n = 37, cfg.k = 96, cfg.capacity = c.layout == MoeLayout::masked ? 20 : 100;
    cfg.num_tokens = c.gather ? 70 : 0;
    cfg.padded = true;  // ldc > N: row padding exists
    cfg.alpha = AlphaMode::device;
    cfg.seed = ++seed;
    SCOPED_TRACE(cfg.describe());
    const MoeWeightSet ws(cfg, false);
    const MoeBuffers buffers(ws, false);
    ASSERT_GT(ws.ldc, cfg.n);
    std::mt19937_64 rng(seed);
    const std::vector<int> counts{10, 0, 20, 7, 3};
    const MoeInputs in =
        make_inputs(ws, rng, routing_from_counts(cfg, rng, counts, c.layout == MoeLayout::masked ? 0 : 5, "fixed"));
    const std::vector<std::uint8_t> expected = expected_c(ws, buffers, in, Poison::finite, 1);
    ASSERT_TRUE(check_c(ws, buffers, in, expected, expected));
    const std::size_t elem = out_type_size(cfg.out_type), c0 = buffers.c_offset();
    const auto cell = [&](int row, int col) { return c0 + (static_cast<std::size_t>(row) * ws.ldc + col) * elem; };
    const std::vector<int> owner = row_owners(cfg, in.routing);
    const int owned =
        static_cast<int>(std::find_if(owner.begin(), owner.end(), [](int e) { return e >= 0; }) - owner.begin());
    const int unowned = static_cast<int>(std::find(owner.begin(), owner.end(), -1) - owner.begin());
    ASSERT_LT(owned, cfg.rows());
    ASSERT_LT(unowned, cfg.rows());
    const auto caught = [&](const char* what, const std::function<void(std::vector<std::uint8_t>&)>& fault) {
      std::vector<std::uint8_t> got = expected;
      fault(got);
      ASSERT_TRUE(got != expected) << what << ": the fault changed nothing";
      EXPECT_FALSE(check_c(ws, buffers, in, got, expected)) << what;
    };
    const auto set_value = [&](std::vector<std::uint8_t>& got, std::size_t at, double v) {
      const std::uint32_t bits = cfg.out_type == OutType::f16    ? reference::float_to_half_bits(v)
                                 : cfg.out_type == OutType::bf16 ? reference::float_to_bf16_bits(v)
                                                                 : [&] {
                                                                     const float f = static_cast<float>(v);
                                                                     std::uint32_t b;
                                                                     std::memcpy(&b, &f, 4);
                                                                     return b;
                                                                   }();
      std::memcpy(got.data() + at, &bits, elem);
    };
    caught("guard band, first byte", [&](auto& g) { g[0] ^= 1; });
    caught("guard band, just before C", [&](auto& g) { g[c0 - 1] ^= 0x80; });
    caught("guard band, last byte", [&](auto& g) { g.back() ^= 1; });
    caught("guard band, just after C", [&](auto& g) { g[c0 + buffers.c_bytes()] ^= 1; });
    caught("row padding", [&](auto& g) { g[cell(owned, cfg.n)] ^= 1; });
    caught("a row nobody owns", [&](auto& g) { set_value(g, cell(unowned, 3), 1.0); });
    caught("the poison in an owned cell", [&](auto& g) {
      const std::uint32_t bits = poison_bits(Poison::finite, cfg.out_type);
      std::memcpy(g.data() + cell(owned, 0), &bits, elem);
    });
    caught("NaN in an owned cell", [&](auto& g) { set_value(g, cell(owned, 1), std::nan("")); });
    if (c.values == Values::gpumode) {
      caught("one low bit", [&](auto& g) { g[cell(owned, 2)] ^= 1; });
    } else {
      // Just outside the bound (computed here as the checker computes it), in an element whose
      // value stays finite (full-range values overflow f16 often).
      bool done = false;
      for (int r = owned; r < cfg.rows() && !done; ++r) {
        const int e = owner[static_cast<std::size_t>(r)];
        if (e < 0) continue;
        const std::vector<float> a =
            activations(ws, in, cfg.gather ? in.routing.gather[static_cast<std::size_t>(r)] : r);
        const std::vector<float>& w = ws.dequantised(e);
        for (int n = 0; n < cfg.n && !done; ++n) {
          double x = 0, s = 0;
          for (int k = 0; k < cfg.k; ++k) {
            const double p =
                static_cast<double>(a[static_cast<std::size_t>(k)]) * w[static_cast<std::size_t>(n) * cfg.k + k];
            x += p, s += std::fabs(p);
          }
          const double alpha = in.alphas[static_cast<std::size_t>(e)];
          x *= alpha, s *= std::fabs(alpha);
          const double bound = 2.0 * cfg.k * std::ldexp(s, -24) + std::ldexp(std::fabs(x), -24) +
                               output_half_ulp(cfg.out_type, std::fabs(x));
          const double wrong = x + 4 * bound + 4 * output_half_ulp(cfg.out_type, 4 * bound + std::fabs(x));
          if (!(std::fabs(wrong) * 2 < output_overflow(cfg.out_type))) continue;
          caught("just outside the FP32 bound", [&](auto& g) { set_value(g, cell(r, n), wrong); });
          done = true;
        }
      }
      EXPECT_TRUE(done) << "no finite element to perturb";
    }
  }
}

}  // namespace
}  // namespace fp4gemm::test::moe
