// GPU tier for the fused sm_90a kernel (Backend::fast): seed and dense shapes bit-exact, >= 500
// random problems, every format x layout x output type, graphs, determinism.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "fp4gemm/fp4gemm.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

bool fast_kernel_available() {
  return device_count() > 0 && device_info().has_fast_kernel;
}

#define REQUIRE_FAST_KERNEL() \
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the fused kernel cannot run here"

std::vector<Shape> same_nk(std::vector<int> ms, int n, int k) {
  std::vector<Shape> out;
  for (int m : ms) out.push_back({m, n, k});
  return out;
}

ProblemConfig seed_case(int index, ScaleLayout layout) {
  ProblemConfig cfg;
  cfg.layout = layout;
  cfg.values = Values::gpumode;
  cfg.seed = 1111 + index;
  switch (index) {
    case 1: cfg.shapes = same_nk({80, 176, 128, 72, 64, 248, 96, 160}, 4096, 7168); break;
    case 2: cfg.shapes = same_nk({40, 76, 168, 72, 164, 148, 196, 160}, 7168, 2048); break;
    case 3: cfg.shapes = same_nk({192, 320}, 3072, 4096); break;
    case 4: cfg.shapes = same_nk({128, 384}, 4096, 1536); break;
    case 5: cfg.shapes = same_nk({8192}, 8192, 1024); break;  // dense suite
    default: cfg.shapes = same_nk({2048}, 2048, 512); break;
  }
  return cfg;
}

class FusedSeedShapes : public ::testing::TestWithParam<std::tuple<int, ScaleLayout>> {};

TEST_P(FusedSeedShapes, BitExactAndDeterministic) {
  REQUIRE_FAST_KERNEL();
  const auto [index, layout] = GetParam();
  RunOptions options;
  options.mac_budget = 1.0e9;  // sampled rows of the CPU reference; every element checked as written
  options.runs = 2;            // (NaN and finite poison) and bitwise identical run to run
  EXPECT_TRUE(run_and_check(seed_case(index, layout), Backend::fast, options));
}

INSTANTIATE_TEST_SUITE_P(Spec, FusedSeedShapes,
                         ::testing::Combine(::testing::Range(1, 7),
                                            ::testing::Values(ScaleLayout::blocked, ScaleLayout::linear)),
                         [](const auto& info) {
                           return "case" + std::to_string(std::get<0>(info.param)) + "_" +
                                  to_string(std::get<1>(info.param));
                         });

// The fused kernel and the reference kernel agree bit for bit on GPU MODE inputs (all rows).
TEST(Fused, AgreesWithReferenceKernelOnSeedCase2) {
  REQUIRE_FAST_KERNEL();
  const Problem problem = make_problem(seed_case(2, ScaleLayout::blocked));
  const DeviceProblem device(problem);
  const Expected oracle = backend_expected(problem, device, Backend::reference);
  Plan plan(device.descs(), device.options(Backend::fast));
  RunOptions options;
  options.launch = Launch::graph;
  EXPECT_TRUE(run_plan_and_check(problem, device, plan, oracle, options));
}

using Combo = std::tuple<Format, ScaleLayout, OutType>;
class FusedCombos : public ::testing::TestWithParam<Combo> {};

TEST_P(FusedCombos, FullRangeAndEdges) {
  REQUIRE_FAST_KERNEL();
  const auto [format, layout, out_type] = GetParam();
  const int vec = scale_block_size(format);
  ProblemConfig cfg;
  cfg.format = format, cfg.layout = layout, cfg.out_type = out_type;
  cfg.values = Values::full;
  cfg.seed = 99;
  // M = 1, odd, > 256 (two token tiles), 0; N below / across the 128-row tile; K not a multiple
  // of the 64-wide k-block; long K for split-K.
  cfg.shapes = {{1, 8, vec}, {0, 64, 4 * vec}, {131, 77, 5 * vec}, {7, 1, 32 * vec},
                {300, 200, 64 * vec}, {33, 129, 3 * vec}, {600, 1000, 8 * vec}};
  cfg.padded_strides = true;
  cfg.alphas = {1.0f, 1.0f, -0.37f, 3.5f, 0.011f, 1.0f, 2.0f};
  RunOptions options;
  options.check.tolerance = Tolerance::gpumode_rule;
  EXPECT_TRUE(run_and_check(cfg, Backend::fast, options));

  cfg.nan_scales = true;
  cfg.seed = 100;
  EXPECT_TRUE(run_and_check(cfg, Backend::fast, options));

  cfg.nan_scales = false;
  cfg.values = Values::gpumode;  // powers of two: bit-exact, alpha read on the device
  cfg.alphas = {1.0f, 2.0f, 0.5f, -1.0f, 0.25f, 4.0f, 1.0f};
  cfg.alpha_on_device = true;
  options.launch = Launch::graph;
  EXPECT_TRUE(run_and_check(cfg, Backend::fast, options));
}

INSTANTIATE_TEST_SUITE_P(
    All, FusedCombos,
    ::testing::Combine(::testing::Values(Format::nvfp4, Format::mxfp4),
                       ::testing::Values(ScaleLayout::linear, ScaleLayout::blocked),
                       ::testing::Values(OutType::f16, OutType::bf16, OutType::f32)),
    [](const auto& info) {
      return std::string(to_string(std::get<0>(info.param))) + "_" + to_string(std::get<1>(info.param)) +
             "_" + to_string(std::get<2>(info.param));
    });

// >= 500 random problems: G 1..64, M_g 0..600 (not multiples of 8), N not a multiple of the tile.
// Every third one forces the TMA-store epilogue (Tuning::tma_store; plans take it by themselves
// only with >= 4 pieces per CTA), which the plan still refuses where an N is not a multiple of 8.
// (kFusedRandomProblems, kFusedRandomSeed0 and fused_random_limits() live in gpu/problem.hpp: the
// host tier checks what these problems cover, blank GroupDesc{} groups included.)
class FusedRandom : public ::testing::TestWithParam<int> {};

TEST_P(FusedRandom, WithinSpecTolerance) {
  REQUIRE_FAST_KERNEL();
  const std::uint64_t seed = kFusedRandomSeed0 + static_cast<std::uint64_t>(GetParam());
  const ProblemConfig cfg = random_config(seed, fused_random_limits());
  RunOptions options;
  if (GetParam() % 3 == 1) options.tuning.tma_store = true;
  options.launch = GetParam() % 8 == 7 ? Launch::graph : Launch::stream;
  EXPECT_TRUE(run_and_check(cfg, Backend::fast, options))
      << "random_config(" << seed << ", fused_random_limits())";
}

INSTANTIATE_TEST_SUITE_P(Seeds, FusedRandom, ::testing::Range(0, kFusedRandomProblems));

// One plan, built once and run again and again with nothing changed, gives bitwise the same C
// (SPEC §3), on full-range values (where FP32 accumulation order shows) and f32 output (every
// accumulation bit visible), with stream-K forced so that split tiles are summed across CTAs, on
// several CTA counts; streams and graphs alternate.
TEST(Fused, DeterministicAcrossRunsOnFullRangeValues) {
  REQUIRE_FAST_KERNEL();
  for (const int max_ctas : {100000, 12, 3}) {
    Tuning tuning;
    tuning.split_k = true;
    tuning.max_ctas = max_ctas;
    ProblemConfig cfg;
    cfg.values = Values::full;
    cfg.out_type = OutType::f32;
    cfg.layout = ScaleLayout::blocked;
    cfg.seed = 4242;
    cfg.shapes = {{100, 300, 4096}, {257, 64, 2048}, {1, 1000, 8192}, {0, 300, 1024}, {77, 136, 6144}};
    cfg.nan_scales = true;
    const Problem problem = make_problem(cfg);
    const DeviceProblem device(problem);
    Options plan_options = device.options(Backend::fast);
    plan_options.tuning = tuning;
    const Plan plan(device.descs(), plan_options);
    const Expected expected = cpu_expected(problem);
    RunOptions options;
    options.runs = 4;
    options.check.tolerance = Tolerance::gpumode_rule;
    EXPECT_TRUE(run_plan_and_check(problem, device, plan, expected, options)) << "max CTAs " << max_ctas;
    const std::vector<std::uint8_t> on_stream = run_plan(plan, device, Launch::stream, Poison::nan);
    const std::vector<std::uint8_t> on_graph = run_plan(plan, device, Launch::graph, Poison::finite);
    EXPECT_TRUE(on_stream == on_graph) << "stream and graph runs of one plan differ, max CTAs " << max_ctas;
  }
}

// A small problem for compute-sanitizer runs (memcheck / racecheck): --gtest_filter=FusedSanitizer.*
// Stream-K is forced (Tuning::split_k: the plan would pick whole tiles for some small shapes)
// so that the split-K hand-off runs under the sanitizers; a second pass on 12 CTAs
// (Tuning::max_ctas) gives CTAs several pieces and more k-blocks than their ring has stages, so
// the stage refills (TMA, and the linear scales' cp.async) run under racecheck too.
TEST(FusedSanitizer, SmallSplitKProblem) {
  REQUIRE_FAST_KERNEL();
  for (const int max_ctas : {0, 12}) {  // 0: one CTA per SM
    RunOptions options;
    options.runs = 2;
    options.tuning.split_k = true;
    if (max_ctas > 0) options.tuning.max_ctas = max_ctas;
    ProblemConfig cfg;
    cfg.values = Values::gpumode;
    cfg.shapes = {{40, 256, 1024}, {0, 128, 64}, {300, 130, 2048}, {9, 64, 64}};
    {
      const Problem problem = make_problem(cfg);
      const DeviceProblem device(problem);
      Options plan_options = device.options(Backend::fast);
      plan_options.tuning = options.tuning;
      const Plan plan(device.descs(), plan_options);
      EXPECT_NE(plan.describe().find("stream-K"), std::string::npos) << plan.describe();
      if (max_ctas > 0)
        EXPECT_NE(plan.describe().find(" on " + std::to_string(max_ctas) + " CTAs"), std::string::npos) << plan.describe();
    }
    EXPECT_TRUE(run_and_check(cfg, Backend::fast, options)) << "max CTAs " << max_ctas;
    cfg.format = Format::mxfp4;
    cfg.layout = ScaleLayout::blocked;
    EXPECT_TRUE(run_and_check(cfg, Backend::fast, options)) << "max CTAs " << max_ctas;
    // Linear MXFP4: K = 64 has 2 scale columns (per-run conversion), the others 32/64 (gathered
    // by the producer warp with cp.async).
    cfg.layout = ScaleLayout::linear;
    EXPECT_TRUE(run_and_check(cfg, Backend::fast, options)) << "max CTAs " << max_ctas;
  }
}

}  // namespace
}  // namespace fp4gemm::test
