// GPU tier: the pointer-array dual GEMM (Plan with Options::epilogue silu / swigluoai, issue 21
// part 1): C = act(alpha A B^T, alpha_up A B_up^T) per group, on the stream-K kernel.
//
// Every case: 1..6 groups (some with M = 0) of random shapes (N a multiple of 8), A / B / B_up with
// padded row strides, b_up above or below b in one allocation, scales linear or blocked, an output
// type, alphas on the host or the device, and the schedule varied (stream-K forced or not, few
// CTAs so that CTAs run several pieces and split tiles hand partials over). C lives in an arena
// of random bytes with each group's cells poisoned twice (NaN, then a finite value): both runs
// must agree, so every cell was written; every other byte must be unchanged. Checked:
//  - GPU MODE data (values {0, +-0.5, +-1, +-1.5}, scales {1, 2}, power-of-two alphas): every FP32
//    sum is exact in any order, so each output equals reference::moe_gemm's FP32 epilogue
//    (glu_fp32, one expert owning the group's rows: the kernel's activation code on the host)
//    bit for bit, whatever the split;
//  - full-range data: within the FP32 products' bound (SPEC §3) carried through the activation,
//    of the float64 value.
// rescale_each_run cases write new scale bytes in place between runs; the reference uses them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/fp4gemm.hpp"
#include "fp4gemm/moe.hpp"
#include "fp4gemm/reference.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

bool fast_kernel_available() { return device_count() > 0 && device_info().has_fast_kernel; }

struct DualCase {
  Format format = Format::nvfp4;
  Values values = Values::gpumode;
  Epilogue epilogue = Epilogue::silu;
  ScaleLayout layout = ScaleLayout::linear;
  OutType out = OutType::f16;
  std::vector<int> m, n, k;  // per group
  bool up_below = false, alpha_device = false, rescale = false;
  bool share = true;  // Tuning::share_epilogue
  Backend backend = Backend::automatic;  // reference: the GPU reference kernel's dual GEMM
  bool check = true;  // false: only run (the caller compares the output with a checked run's)
  std::optional<bool> split_k;
  std::optional<int> max_ctas;
  std::uint64_t seed = 1;
  std::string describe() const {
    std::ostringstream os;
    os << to_string(format) << " " << to_string(values) << " " << to_string(epilogue) << " " << to_string(layout)
       << " -> " << to_string(out) << ", groups";
    for (std::size_t g = 0; g < m.size(); ++g) os << " " << m[g] << "x" << n[g] << "x" << k[g];
    os << (up_below ? ", b_up below b" : "") << (alpha_device ? ", device alphas" : "")
       << (rescale ? ", rescale_each_run" : "") << (split_k ? (*split_k ? ", stream-K forced" : ", whole tiles") : "")
       << (max_ctas ? ", max_ctas " + std::to_string(*max_ctas) : "") << (share ? "" : ", epilogue not shared")
       << (backend == Backend::reference ? ", reference backend" : "") << ", seed " << seed;
    return os.str();
  }
};

// One group's host data.
struct HostGroup {
  int m = 0, n = 0, k = 0, cols = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::vector<std::uint8_t> a, b, b_up;
  std::vector<std::uint8_t> sfa_lin, sfb_lin, sfb_up_lin;  // linear, what the reference reads
  float alpha = 1, alpha_up = 1;
  std::size_t a_at = 0, b_at = 0, b_up_at = 0, sfa_at = 0, sfb_at = 0, sfb_up_at = 0, c_at = 0;  // arena offsets
};

std::vector<std::uint8_t> in_layout(ScaleLayout layout, const std::vector<std::uint8_t>& lin, int rows, int cols) {
  if (layout == ScaleLayout::linear) return lin;
  std::vector<std::uint8_t> out(formats::blocked_scale_bytes(rows, cols), 0x7F);  // padding: NaN codes
  formats::linear_to_blocked(lin.data(), rows, cols, out.data());
  return out;
}

// `output` / `plan_text`: when given, the first run's C bytes and the plan's describe().
::testing::AssertionResult run_dual_case(const DualCase& c, std::vector<std::uint8_t>* output = nullptr,
                                         std::string* plan_text = nullptr) {
  std::mt19937_64 rng(c.seed);
  const int vec = scale_block_size(c.format);
  const std::size_t elem = out_type_size(c.out);
  const std::size_t guard = 4096;
  std::vector<HostGroup> hg(c.m.size());
  // Inputs in one buffer, C in another (an arena with guard bands).
  std::size_t in_bytes = 0, c_bytes = guard;
  auto take = [](std::size_t& at, std::size_t bytes) {
    const std::size_t o = (at + 255) / 256 * 256;
    at = o + bytes;
    return o;
  };
  std::uniform_int_distribution<int> p2(-2, 2);
  std::uniform_real_distribution<float> ur(0.25f, 2.0f);
  for (std::size_t g = 0; g < hg.size(); ++g) {
    HostGroup& h = hg[g];
    h.m = c.m[g], h.n = c.n[g], h.k = c.k[g], h.cols = h.k / vec;
    h.lda = (h.k / 2 + 15) / 16 * 16 + 16 * static_cast<int>(rng() % 2);
    h.ldb = (h.k / 2 + 15) / 16 * 16 + 16 * static_cast<int>(rng() % 2);
    h.ldc = (h.n + 7) / 8 * 8 + 8 * static_cast<int>(rng() % 2);
    h.alpha = c.values == Values::gpumode ? std::ldexp(1.0f, p2(rng)) : ur(rng);
    h.alpha_up = c.values == Values::gpumode ? std::ldexp(1.0f, p2(rng)) : ur(rng);
    if (h.m == 0) continue;
    h.a = random_packed(rng, c.values, h.m, h.k, h.lda);
    h.b = random_packed(rng, c.values, h.n, h.k, h.ldb);
    h.b_up = random_packed(rng, c.values, h.n, h.k, h.ldb);
    h.sfa_lin = random_scales(rng, c.format, c.values, h.m, h.cols);
    h.sfb_lin = random_scales(rng, c.format, c.values, h.n, h.cols);
    h.sfb_up_lin = random_scales(rng, c.format, c.values, h.n, h.cols);
    const std::size_t wbytes = static_cast<std::size_t>(h.n) * h.ldb;
    h.a_at = take(in_bytes, static_cast<std::size_t>(h.m) * h.lda);
    // b and b_up in either order, with a gap
    const std::size_t first = take(in_bytes, wbytes), second = take(in_bytes, wbytes + 512);
    h.b_at = c.up_below ? second : first, h.b_up_at = c.up_below ? first : second;
    h.sfa_at = take(in_bytes, formats::scale_bytes(c.layout, h.m, h.cols));
    h.sfb_at = take(in_bytes, formats::scale_bytes(c.layout, h.n, h.cols));
    h.sfb_up_at = take(in_bytes, formats::scale_bytes(c.layout, h.n, h.cols));
    h.c_at = take(c_bytes, static_cast<std::size_t>(h.m) * h.ldc * elem);
  }
  const std::size_t alpha_at = take(in_bytes, 8 * hg.size());
  c_bytes += guard;
  DeviceBuffer d_in(in_bytes + 16), d_c(c_bytes);
  auto put = [&](std::size_t at, const std::vector<std::uint8_t>& v) {
    if (!v.empty()) FP4GEMM_TEST_CUDA(cudaMemcpy(d_in.get() + at, v.data(), v.size(), cudaMemcpyHostToDevice));
  };
  auto put_scales = [&](const HostGroup& h) {
    put(h.sfb_at, in_layout(c.layout, h.sfb_lin, h.n, h.cols));
    put(h.sfb_up_at, in_layout(c.layout, h.sfb_up_lin, h.n, h.cols));
  };
  std::vector<float> alphas;
  std::vector<GroupDesc> groups(hg.size());
  for (std::size_t g = 0; g < hg.size(); ++g) {
    const HostGroup& h = hg[g];
    alphas.push_back(h.alpha), alphas.push_back(h.alpha_up);
    GroupDesc& d = groups[g];
    d.m = h.m, d.n = h.n, d.k = h.k;
    if (h.m == 0) continue;
    put(h.a_at, h.a), put(h.b_at, h.b), put(h.b_up_at, h.b_up);
    put(h.sfa_at, in_layout(c.layout, h.sfa_lin, h.m, h.cols));
    put_scales(h);
    d.a = d_in.get() + h.a_at, d.lda = h.lda, d.b = d_in.get() + h.b_at, d.ldb = h.ldb, d.b_up = d_in.get() + h.b_up_at;
    d.sfa = d_in.get() + h.sfa_at, d.sfb = d_in.get() + h.sfb_at, d.sfb_up = d_in.get() + h.sfb_up_at;
    d.c = d_c.get() + h.c_at, d.ldc = h.ldc;
    d.alpha = h.alpha, d.alpha_up = h.alpha_up;
    if (c.alpha_device) {
      d.alpha_device = reinterpret_cast<const float*>(d_in.get() + alpha_at) + 2 * g;
      d.alpha_up_device = d.alpha_device + 1;
      d.alpha = d.alpha_up = NAN;  // must not be read
    }
  }
  FP4GEMM_TEST_CUDA(cudaMemcpy(d_in.get() + alpha_at, alphas.data(), 4 * alphas.size(), cudaMemcpyHostToDevice));
  Options o;
  o.format = c.format, o.scale_layout = c.layout, o.out_type = c.out, o.epilogue = c.epilogue;
  o.rescale_each_run = c.rescale;
  o.backend = c.backend;
  o.tuning.split_k = c.split_k, o.tuning.max_ctas = c.max_ctas, o.tuning.share_epilogue = c.share;
  const Plan plan(groups, o);
  if (plan_text) *plan_text = plan.describe();

  std::vector<std::uint8_t> image(c_bytes);
  fill_random(rng, image.data(), image.size());
  const reference::DualActivation act{c.epilogue == Epilogue::silu ? reference::Activation::silu
                                                                  : reference::Activation::swigluoai};
  const bool exact = c.values == Values::gpumode;
  std::ostringstream fails;
  int bad = 0;
  for (int round = 0; round < (c.rescale ? 2 : 1); ++round) {
    if (round > 0)  // new weight scales in the same buffers
      for (HostGroup& h : hg) {
        if (h.m == 0) continue;
        h.sfb_lin = random_scales(rng, c.format, c.values, h.n, h.cols);
        h.sfb_up_lin = random_scales(rng, c.format, c.values, h.n, h.cols);
        put_scales(h);
      }
    auto poisoned = [&](Poison poison) {
      std::vector<std::uint8_t> img = image;
      const std::uint32_t pb = poison_bits(poison, c.out);
      for (const HostGroup& h : hg)
        for (int r = 0; r < h.m; ++r)
          for (int i = 0; i < h.n; ++i) std::memcpy(img.data() + h.c_at + (r * h.ldc + i) * elem, &pb, elem);
      return img;
    };
    std::vector<std::vector<std::uint8_t>> runs;
    for (Poison poison : {Poison::nan, Poison::finite}) {
      const std::vector<std::uint8_t> img = poisoned(poison);
      FP4GEMM_TEST_CUDA(cudaMemcpy(d_c.get(), img.data(), img.size(), cudaMemcpyHostToDevice));
      plan.run();
      FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
      std::vector<std::uint8_t> got(img.size());
      FP4GEMM_TEST_CUDA(cudaMemcpy(got.data(), d_c.get(), got.size(), cudaMemcpyDeviceToHost));
      runs.push_back(std::move(got));
    }
    std::vector<std::uint8_t> expected = poisoned(Poison::nan);
    for (const HostGroup& h : hg) {
      if (h.m == 0) continue;
      // The reference: one expert owning the group's M rows, separate gate / up weights.
      const int offsets[2] = {0, h.m};
      reference::MoeHostProblem rp;
      rp.experts = 1, rp.n = h.n, rp.k = h.k, rp.format = c.format;
      rp.a = h.a.data(), rp.lda = h.lda, rp.a_scales = h.sfa_lin.data(), rp.a_rows = h.m;
      rp.w = h.b.data(), rp.ldw = h.ldb, rp.w_expert_stride = 0;
      rp.w_scales = h.sfb_lin.data(), rp.w_layout = ScaleLayout::linear, rp.w_scale_expert_stride = 0;
      rp.alpha = &h.alpha, rp.alpha_up = &h.alpha_up, rp.offsets = offsets;
      rp.c = expected.data() + h.c_at, rp.ldc = h.ldc, rp.out_type = c.out;
      rp.glu = &act, rp.gate_up = static_cast<int>(GateUpLayout::separate), rp.glu_fp32 = exact;
      rp.w_up = h.b_up.data(), rp.w_up_scales = h.sfb_up_lin.data();
      reference::moe_gemm(rp);
    }
    // Every byte outside the groups' cells: unchanged; every cell: written, deterministic, right.
    std::vector<char> cell(c_bytes, 0);
    for (const HostGroup& h : hg)
      for (int r = 0; r < h.m; ++r) std::memset(cell.data() + h.c_at + r * h.ldc * elem, 1, h.n * elem);
    const auto& got = runs[0];
    if (output) *output = got;
    if (!c.check) {
      if (runs[0] != runs[1]) return ::testing::AssertionFailure() << c.describe() << ": the poisoned runs differ";
      continue;
    }
    for (std::size_t i = 0; i < c_bytes; ++i)
      if (!cell[i] && got[i] != expected[i]) {
        if (bad++ < 8) fails << "\n  byte " << i << " outside every group's cells changed";
        break;
      }
    for (std::size_t g = 0; g < hg.size(); ++g) {
      const HostGroup& h = hg[g];
      for (int r = 0; r < h.m; ++r) {
        const std::uint8_t* gr = got.data() + h.c_at + r * h.ldc * elem;
        const std::uint8_t* er = expected.data() + h.c_at + r * h.ldc * elem;
        if (std::memcmp(gr, runs[1].data() + h.c_at + r * h.ldc * elem, h.n * elem) != 0 && bad++ < 8)
          fails << "\n  group " << g << " row " << r << ": the NaN- and finite-poisoned runs differ";
        for (int i = 0; i < h.n; ++i) {
          const std::uint32_t gb = load_output_bits(gr, c.out, i), wb = load_output_bits(er, c.out, i);
          const double gv = output_bits_to_double(gb, c.out), wv = output_bits_to_double(wb, c.out);
          if (exact) {
            if (gb == wb || (gv == 0 && wv == 0)) continue;
            if (bad++ < 8)
              fails << "\n  group " << g << " [" << r << ", " << i << "]: got " << gv << ", expected " << wv
                    << " (bit-exact: the FP32 epilogue on exact sums)";
            continue;
          }
          double val[2], mag[2];
          for (int up = 0; up < 2; ++up) {
            const std::uint8_t* wr = (up ? h.b_up : h.b).data() + static_cast<std::int64_t>(i) * h.ldb;
            const std::uint8_t* sr = (up ? h.sfb_up_lin : h.sfb_lin).data() + static_cast<std::size_t>(i) * h.cols;
            const std::uint8_t* ar = h.a.data() + static_cast<std::int64_t>(r) * h.lda;
            const std::uint8_t* sa = h.sfa_lin.data() + static_cast<std::size_t>(r) * h.cols;
            double dot = 0, s = 0;
            for (int k = 0; k < h.k; ++k) {
              const double x = static_cast<double>(formats::e2m1_to_float(formats::get_nibble(ar, k))) *
                               formats::scale_to_float(c.format, sa[k / vec]);
              const double y = static_cast<double>(formats::e2m1_to_float(formats::get_nibble(wr, k))) *
                               formats::scale_to_float(c.format, sr[k / vec]);
              dot += x * y, s += std::fabs(x * y);
            }
            const double al = up ? h.alpha_up : h.alpha;
            val[up] = dot * al;
            mag[up] = 2.0 * h.k * std::ldexp(s * al, -24) + std::ldexp(std::fabs(val[up]), -24);
          }
          const double G = val[0], U = val[1], x_exact = reference::activate(act, G, U);
          if (std::isnan(x_exact)) {
            if (!std::isnan(gv) && bad++ < 8) fails << "\n  group " << g << " [" << r << ", " << i << "]: got " << gv << ", expected NaN";
            continue;
          }
          const GluBound b = glu_within_bound(c.out, gv, G, U, mag[0], mag[1], x_exact);
          if (!b.ok && bad++ < 8)
            fails << "\n  group " << g << " [" << r << ", " << i << "]: got " << gv << ", exact " << x_exact << " +- "
                  << b.tol << " (g " << G << ", u " << U << ")";
        }
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << c.describe() << ": " << bad << " failures" << fails.str();
}

DualCase random_dual_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed * 104729 + 7);
  DualCase c;
  c.seed = seed;
  c.format = rng() % 2 ? Format::nvfp4 : Format::mxfp4;
  c.values = rng() % 3 ? Values::gpumode : Values::full;
  c.epilogue = rng() % 2 ? Epilogue::silu : Epilogue::swigluoai;
  c.layout = rng() % 2 ? ScaleLayout::linear : ScaleLayout::blocked;
  c.out = static_cast<OutType>(rng() % 3);
  const int groups = 1 + static_cast<int>(rng() % 6);
  const int vec = scale_block_size(c.format);
  for (int g = 0; g < groups; ++g) {
    c.m.push_back(rng() % 7 == 0 ? 0 : 1 + static_cast<int>(rng() % 300));
    c.n.push_back(8 * (1 + static_cast<int>(rng() % 64)));
    c.k.push_back(vec * (1 + static_cast<int>(rng() % (1024 / vec))));
  }
  c.up_below = rng() % 2, c.alpha_device = rng() % 2, c.rescale = rng() % 4 == 0;
  if (const int s = static_cast<int>(rng() % 3); s < 2) c.split_k = s == 1;
  if (rng() % 3 == 0) c.max_ctas = 1 + static_cast<int>(rng() % 16);
  c.share = rng() % 4 != 0;
  return c;
}

class DualGemm : public ::testing::TestWithParam<int> {};

TEST_P(DualGemm, RandomCasesMatchTheReference) {
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the dual GEMM needs H100/H200";
  const DualCase c = random_dual_case(static_cast<std::uint64_t>(GetParam()));
  SCOPED_TRACE(c.describe());
  EXPECT_TRUE(run_dual_case(c));
}
INSTANTIATE_TEST_SUITE_P(Seeds, DualGemm, ::testing::Range(0, 48));

// The GPU reference kernel's dual GEMM (Backend::reference; any GPU): the same random cases
// (formats, layouts, activations, output types, device alphas, b_up below b, empty groups,
// rescaled weights) against the host reference -- bit-exact on GPU MODE data (its FP32 sums are
// exact and its activation is the fast kernel's FP32 formula), within the FP32 bound on full-range
// data. The fast kernel's tuning knobs do not apply to it.
class DualGemmReference : public ::testing::TestWithParam<int> {};

TEST_P(DualGemmReference, RandomCasesMatchTheHostReference) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  DualCase c = random_dual_case(static_cast<std::uint64_t>(GetParam()) + 1000);
  c.backend = Backend::reference;
  c.split_k.reset(), c.max_ctas.reset(), c.share = true;
  SCOPED_TRACE(c.describe());
  EXPECT_TRUE(run_dual_case(c));
}
INSTANTIATE_TEST_SUITE_P(Seeds, DualGemmReference, ::testing::Range(0, 24));

// Split tiles whose epilogue the owner and the writer share give the bits of the owner
// finishing them alone (the sum o + w either way), on GPU MODE and full-range data, both
// activations, every output type; the plans must actually share (their description counts the
// tiles). The shared run is checked against the reference; the owner-only run must equal it.
TEST(DualGemmShapes, SharedEpilogueGivesTheOwnersBits) {
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the dual GEMM needs H100/H200";
  struct Shape { int m, n, k; Values values; Epilogue act; OutType out; ScaleLayout layout; int max_ctas; };
  const Shape shapes[] = {
      {256, 4096, 7168, Values::gpumode, Epilogue::silu, OutType::f16, ScaleLayout::blocked, 0},  // 64 of 64 tiles
      {200, 1000, 1024, Values::full, Epilogue::swigluoai, OutType::bf16, ScaleLayout::linear, 0},  // 32 tiles, rows past N
      {100, 512, 1024, Values::full, Epilogue::silu, OutType::f32, ScaleLayout::blocked, 16}};  // 8 tiles on 16 CTAs
  for (const Shape& sh : shapes) {
    DualCase c;
    c.values = sh.values, c.epilogue = sh.act, c.out = sh.out, c.layout = sh.layout;
    c.m = {sh.m}, c.n = {sh.n}, c.k = {sh.k}, c.seed = 900 + sh.m;
    if (sh.values == Values::full) c.split_k = true;
    if (sh.max_ctas) c.max_ctas = sh.max_ctas;
    std::vector<std::uint8_t> shared_out, owner_out;
    std::string shared_text, owner_text;
    EXPECT_TRUE(run_dual_case(c, &shared_out, &shared_text));
    EXPECT_NE(shared_text.find("share their epilogue"), std::string::npos) << shared_text;
    c.share = false, c.check = false;
    EXPECT_TRUE(run_dual_case(c, &owner_out, &owner_text));
    EXPECT_EQ(owner_text.find("share their epilogue"), std::string::npos) << owner_text;
    ASSERT_EQ(shared_out.size(), owner_out.size());
    EXPECT_EQ(std::memcmp(shared_out.data(), owner_out.data(), shared_out.size()), 0) << c.describe();
  }
}

// GPU MODE nvfp4_dual_gemm's shapes (one group, blocked scales, f16 out), stream-K as planned:
// bit-exact on GPU MODE data.
TEST(DualGemmShapes, GpuModeBenchmarkShapes) {
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the dual GEMM needs H100/H200";
  const int shapes[4][3] = {{256, 4096, 7168}, {512, 4096, 7168}, {256, 3072, 4096}, {512, 3072, 7168}};
  for (int s = 0; s < 4; ++s) {
    DualCase c;
    c.layout = ScaleLayout::blocked, c.out = OutType::f16, c.seed = 500 + s;
    c.m = {shapes[s][0]}, c.n = {shapes[s][1]}, c.k = {shapes[s][2]};
    EXPECT_TRUE(run_dual_case(c));
  }
}

// GPU MODE's 256 x 3072 x 4096 on both backends: each bit-exact against the host reference, and
// the two outputs byte for byte the same.
TEST(DualGemmReference, GpuModeShapeSameBytesAsTheFastKernel) {
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the fast dual GEMM needs H100/H200";
  for (const Epilogue e : {Epilogue::silu, Epilogue::swigluoai}) {
    DualCase c;
    c.layout = ScaleLayout::blocked, c.out = OutType::f16, c.seed = 600 + static_cast<int>(e), c.epilogue = e;
    c.m = {256}, c.n = {3072}, c.k = {4096};
    std::vector<std::uint8_t> fast, ref;
    EXPECT_TRUE(run_dual_case(c, &fast));
    c.backend = Backend::reference;
    EXPECT_TRUE(run_dual_case(c, &ref));
    EXPECT_TRUE(!fast.empty() && fast == ref) << c.describe();
  }
}

TEST(DualGemmArgs, BadArgumentsNamed) {
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the dual GEMM needs H100/H200";
  const int m = 16, n = 64, k = 128;
  DeviceBuffer buf(1 << 20);
  GroupDesc d;
  d.m = m, d.n = n, d.k = k;
  d.a = buf.get(), d.lda = k / 2, d.b = buf.get() + 8192, d.ldb = k / 2, d.b_up = buf.get() + 16384;
  d.sfa = buf.get() + 32768, d.sfb = buf.get() + 36864, d.sfb_up = buf.get() + 40960;
  d.c = buf.get() + 65536, d.ldc = n;
  Options o;
  o.epilogue = Epilogue::silu;
  auto expect_named = [&](GroupDesc g, Options opt, const char* arg) {
    try {
      Plan p(std::span<const GroupDesc>(&g, 1), opt);
      ADD_FAILURE() << "accepted; expected an error naming " << arg;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), arg) << e.what();
    }
  };
  { GroupDesc g = d; g.b_up = nullptr; expect_named(g, o, "groups[0].b_up"); }
  { GroupDesc g = d; g.sfb_up = nullptr; expect_named(g, o, "groups[0].sfb_up"); }
  { GroupDesc g = d; g.n = 60, g.ldc = 64; expect_named(g, o, "groups[0].n"); }
  { GroupDesc g = d; g.b_up = g.b; expect_named(g, o, "groups[0].b_up"); }
  { GroupDesc g = d; g.alpha_up = NAN; expect_named(g, o, "groups[0].alpha_up"); }
  { GroupDesc g = d; g.c = buf.get() + 16384; expect_named(g, o, "groups[0].c"); }  // C over B_up
  { Options p = o; p.swiglu_limit = 0; expect_named(d, p, "options.swiglu_limit"); }
  { alignas(16) static std::uint8_t host[64]; GroupDesc g = d; g.sfb_up = host; expect_named(g, o, "groups[0].sfb_up"); }
  EXPECT_NO_THROW(Plan(std::span<const GroupDesc>(&d, 1), o));
  { Options p = o; p.backend = Backend::reference; EXPECT_NO_THROW(Plan(std::span<const GroupDesc>(&d, 1), p)); }
}

}  // namespace
}  // namespace fp4gemm::test
