// GPU tier for Backend::reference: seed shapes, random problems, determinism, bad pointers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "fp4gemm/fp4gemm.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

// ---- SPEC §4 seed shapes: GPU MODE values, bit-exact --------------------------------------------

ProblemConfig seed_case(int index) {
  ProblemConfig cfg;
  cfg.format = Format::nvfp4;
  cfg.layout = ScaleLayout::blocked;  // GPU MODE's "reordered" scales
  cfg.out_type = OutType::f16;
  cfg.values = Values::gpumode;
  cfg.seed = 1111;
  const auto shapes = [](std::vector<int> ms, int n, int k) {
    std::vector<Shape> out;
    for (int m : ms) out.push_back({m, n, k});
    return out;
  };
  switch (index) {
    case 1: cfg.shapes = shapes({80, 176, 128, 72, 64, 248, 96, 160}, 4096, 7168); break;
    case 2: cfg.shapes = shapes({40, 76, 168, 72, 164, 148, 196, 160}, 7168, 2048); break;
    case 3: cfg.shapes = shapes({192, 320}, 3072, 4096); break;
    default: cfg.shapes = shapes({128, 384}, 4096, 1536); break;
  }
  return cfg;
}

class ReferenceSeedShapes : public ::testing::TestWithParam<int> {};

TEST_P(ReferenceSeedShapes, BitExact) {
  const ProblemConfig cfg = seed_case(GetParam());
  RunOptions options;
  options.mac_budget = 1.0e9;  // sampled rows of the CPU reference; all rows checked for "written"
  EXPECT_TRUE(run_and_check(cfg, Backend::reference, options));
}

TEST_P(ReferenceSeedShapes, BitExactLinearScalesThroughAGraph) {
  ProblemConfig cfg = seed_case(GetParam());
  cfg.layout = ScaleLayout::linear;
  cfg.seed = 2222;
  RunOptions options;
  options.launch = Launch::graph;
  options.mac_budget = 5.0e8;
  EXPECT_TRUE(run_and_check(cfg, Backend::reference, options));
}

INSTANTIATE_TEST_SUITE_P(Spec, ReferenceSeedShapes, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "case" + std::to_string(info.param); });

// ---- every format x layout x output type, full value range -------------------------------------

using Combo = std::tuple<Format, ScaleLayout, OutType>;

class ReferenceCombos : public ::testing::TestWithParam<Combo> {};

TEST_P(ReferenceCombos, FullRange) {
  const auto [format, layout, out_type] = GetParam();
  const int vec = scale_block_size(format);
  ProblemConfig cfg;
  cfg.format = format, cfg.layout = layout, cfg.out_type = out_type;
  cfg.values = Values::full;
  cfg.seed = 77;
  // M = 0, 1, odd, across 128-row scale atoms; N odd and tiny; K of 1 and 5 scale blocks.
  cfg.shapes = {{1, 8, vec}, {0, 64, 4 * vec}, {131, 77, 5 * vec}, {7, 1, 32 * vec}, {256, 200, 64 * vec}};
  cfg.padded_strides = true;
  cfg.alphas = {1.0f, 1.0f, -0.37f, 3.5f, 0.011f};
  RunOptions options;
  options.check.tolerance = Tolerance::fp32_bound;  // the reference kernel is exact FP32
  EXPECT_TRUE(run_and_check(cfg, Backend::reference, options));

  cfg.values = Values::gpumode;  // powers of two: bit-exact, through alpha_device
  cfg.alphas = {1.0f, 2.0f, 0.5f, -1.0f, 0.25f};
  cfg.alpha_on_device = true;
  EXPECT_TRUE(run_and_check(cfg, Backend::reference, options));
}

INSTANTIATE_TEST_SUITE_P(
    All, ReferenceCombos,
    ::testing::Combine(::testing::Values(Format::nvfp4, Format::mxfp4),
                       ::testing::Values(ScaleLayout::linear, ScaleLayout::blocked),
                       ::testing::Values(OutType::f16, OutType::bf16, OutType::f32)),
    [](const auto& info) {
      return std::string(to_string(std::get<0>(info.param))) + "_" + to_string(std::get<1>(info.param)) +
             "_" + to_string(std::get<2>(info.param));
    });

// ---- random problems ---------------------------------------------------------------------------

// (kReferenceRandomProblems lives in gpu/problem.hpp: the host tier's ReferenceRandomCoverage
// checks what these problems cover, blank GroupDesc{} groups included.)
class ReferenceRandom : public ::testing::TestWithParam<int> {};

TEST_P(ReferenceRandom, MatchesCpuReference) {
  const ProblemConfig cfg = random_config(static_cast<std::uint64_t>(GetParam()));
  RunOptions options;
  options.check.tolerance = Tolerance::fp32_bound;
  options.launch = GetParam() % 8 == 7 ? Launch::graph : Launch::stream;
  EXPECT_TRUE(run_and_check(cfg, Backend::reference, options)) << "random_config(" << GetParam() << ")";
}

INSTANTIATE_TEST_SUITE_P(Seeds, ReferenceRandom, ::testing::Range(0, kReferenceRandomProblems));

// ---- degenerate problems -----------------------------------------------------------------------

TEST(Reference, AllGroupsEmpty) {
  ProblemConfig cfg;
  cfg.shapes = {{0, 128, 256}, {0, 64, 64}, {0, 8, 16}};
  EXPECT_TRUE(run_and_check(cfg, Backend::reference));
  cfg.null_empty_groups = false;  // real buffers that must stay untouched
  EXPECT_TRUE(run_and_check(cfg, Backend::reference));
}

TEST(Reference, NoGroups) {
  Options options;
  options.backend = Backend::reference;
  const Plan plan(std::span<const GroupDesc>{}, options);
  EXPECT_EQ(plan.num_groups(), 0);
  EXPECT_NO_THROW(plan.run());
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_NO_THROW(grouped_gemm(std::span<const GroupDesc>{}, options));
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
}

TEST(Reference, GpumodeWithArbitraryAlphaWithinTolerance) {
  ProblemConfig cfg;
  cfg.shapes = {{33, 96, 512}, {200, 40, 128}};
  cfg.alphas = {0.3f, -1.7f};  // not powers of two: FP32 alpha product, then f16 rounding
  const Problem problem = make_problem(cfg);
  EXPECT_FALSE(problem.bit_exact());
  EXPECT_TRUE(run_and_check(cfg, Backend::reference));
}

// ---- determinism -------------------------------------------------------------------------------

TEST(Reference, DeterministicAcrossRuns) {
  ProblemConfig cfg;
  cfg.values = Values::full;
  cfg.out_type = OutType::f32;  // every accumulation bit visible
  cfg.format = Format::nvfp4;
  cfg.layout = ScaleLayout::blocked;
  cfg.shapes = {{100, 300, 1024}, {0, 300, 1024}, {257, 64, 2048}, {1, 1000, 512}};
  cfg.nan_scales = true;
  RunOptions options;
  options.runs = 3;
  options.check.tolerance = Tolerance::fp32_bound;
  EXPECT_TRUE(run_and_check(cfg, Backend::reference, options));
  options.launch = Launch::graph;
  EXPECT_TRUE(run_and_check(cfg, Backend::reference, options));
}

TEST(Reference, SamePlanStreamAndGraphAgreeBitwise) {
  ProblemConfig cfg;
  cfg.values = Values::full;
  cfg.out_type = OutType::bf16;
  cfg.format = Format::mxfp4;
  cfg.shapes = {{64, 512, 1024}, {3, 17, 64}};
  const Problem problem = make_problem(cfg);
  const DeviceProblem device(problem);
  const Plan plan(device.descs(), device.options(Backend::reference));
  // Different poisons: equal arenas also mean every element was written.
  const std::vector<std::uint8_t> on_stream = run_plan(plan, device, Launch::stream, Poison::nan);
  const std::vector<std::uint8_t> on_graph = run_plan(plan, device, Launch::graph, Poison::finite);
  EXPECT_TRUE(on_stream == on_graph);
  EXPECT_TRUE(check_outputs(problem, device, cpu_expected(problem), on_graph,
                            CheckOptions{Tolerance::fp32_bound, 10}));
}

// ---- validation with real pointers -------------------------------------------------------------

// A small valid problem on the device, whose descriptors the tests below spoil.
struct SmallProblem {
  Problem problem;
  DeviceProblem device;
  explicit SmallProblem(int groups = 3)
      : problem(make_problem([&] {
          ProblemConfig cfg;
          for (int g = 0; g < groups; ++g) cfg.shapes.push_back({16 + 16 * g, 64, 128});
          return cfg;
        }())),
        device(problem) {}
};

// Builds a plan and expects an fp4gemm::Error naming `argument` / `group` with `needle` in it.
void expect_plan_error(const std::vector<GroupDesc>& groups, const Options& options,
                       const std::string& argument, int group, const std::string& needle) {
  try {
    const Plan plan(groups, options);
    ADD_FAILURE() << "expected fp4gemm::Error naming " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_EQ(e.group(), group) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "'" << needle << "' not in: " << e.what();
  }
  // A validation failure must leave no CUDA error behind.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(ReferenceValidation, ValidProblemBuildsAPlan) {
  const SmallProblem small;
  const Plan plan(small.device.descs(), small.device.options(Backend::reference));
  EXPECT_EQ(plan.kernel_name(), "reference");
  EXPECT_EQ(plan.num_groups(), 3);
  EXPECT_FALSE(plan.describe().empty());
}

TEST(ReferenceValidation, HostPointerIsRejected) {
  const SmallProblem small;
  std::vector<GroupDesc> groups = small.device.descs();
  void* host = std::aligned_alloc(256, 1 << 16);
  ASSERT_NE(host, nullptr);
  std::memset(host, 0, 1 << 16);
  groups[1].b = host;
  expect_plan_error(groups, small.device.options(Backend::reference), "groups[1].b", 1, "host pointer");
  groups[1].b = small.device.descs()[1].b;
  groups[2].c = host;
  expect_plan_error(groups, small.device.options(Backend::reference), "groups[2].c", 2, "host pointer");
  // grouped_gemm validates the same way.
  try {
    grouped_gemm(groups, small.device.options(Backend::reference));
    ADD_FAILURE() << "grouped_gemm accepted a host pointer";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "groups[2].c");
  }
  std::free(host);
}

TEST(ReferenceValidation, PinnedHostPointerIsRejected) {
  const SmallProblem small;
  std::vector<GroupDesc> groups = small.device.descs();
  void* pinned = nullptr;
  FP4GEMM_TEST_CUDA(cudaMallocHost(&pinned, 1 << 16));
  groups[0].sfa = pinned;
  expect_plan_error(groups, small.device.options(Backend::reference), "groups[0].sfa", 0, "pinned host");
  FP4GEMM_TEST_CUDA(cudaFreeHost(pinned));
}

TEST(ReferenceValidation, ManagedMemoryIsAccepted) {
  const SmallProblem small;
  std::vector<GroupDesc> groups = small.device.descs();
  const GroupDesc& g0 = groups[0];
  const std::size_t c_bytes = static_cast<std::size_t>(g0.m) * static_cast<std::size_t>(g0.ldc) * 2;
  void* managed = nullptr;
  FP4GEMM_TEST_CUDA(cudaMallocManaged(&managed, c_bytes));
  groups[0].c = managed;
  {
    const Plan plan(groups, small.device.options(Backend::reference));
    EXPECT_NO_THROW(plan.run());
    FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
    FP4GEMM_TEST_CUDA(cudaGetLastError());
  }
  FP4GEMM_TEST_CUDA(cudaFree(managed));
}

TEST(ReferenceValidation, NullAndMisalignedDevicePointers) {
  const SmallProblem small;
  const Options options = small.device.options(Backend::reference);
  std::vector<GroupDesc> groups = small.device.descs();
  groups[2].sfb = nullptr;
  expect_plan_error(groups, options, "groups[2].sfb", 2, "null pointer");
  groups = small.device.descs();
  groups[1].a = static_cast<const std::uint8_t*>(groups[1].a) + 8;
  expect_plan_error(groups, options, "groups[1].a", 1, "16-byte aligned");
}

TEST(ReferenceValidation, OverlappingOutputsAreRejected) {
  const SmallProblem small;
  const Options options = small.device.options(Backend::reference);
  std::vector<GroupDesc> groups = small.device.descs();
  groups[2].c = groups[0].c;
  expect_plan_error(groups, options, "groups[2].c", 2, "groups[0].c");
  groups = small.device.descs();
  groups[1].c = const_cast<void*>(groups[1].b);  // writes over its own input
  expect_plan_error(groups, options, "groups[1].c", 1, "groups[1].b");
}

TEST(ReferenceValidation, DeviceMemoryOfAnotherDevice) {
  if (device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  const SmallProblem small;
  std::vector<GroupDesc> groups = small.device.descs();
  int current = 0;
  FP4GEMM_TEST_CUDA(cudaGetDevice(&current));
  const int other = current == 0 ? 1 : 0;
  FP4GEMM_TEST_CUDA(cudaSetDevice(other));
  void* elsewhere = nullptr;
  FP4GEMM_TEST_CUDA(cudaMalloc(&elsewhere, 1 << 16));
  FP4GEMM_TEST_CUDA(cudaSetDevice(current));
  groups[0].b = elsewhere;
  expect_plan_error(groups, small.device.options(Backend::reference), "groups[0].b", 0, "device " + std::to_string(other));
  FP4GEMM_TEST_CUDA(cudaFree(elsewhere));
}

TEST(ReferenceValidation, BadDeviceIndex) {
  const SmallProblem small;
  Options options = small.device.options(Backend::reference);
  options.device = device_count();  // one past the last
  try {
    const Plan plan(small.device.descs(), options);
    ADD_FAILURE() << "expected fp4gemm::Error for device " << options.device;
  } catch (const Error& e) {
    EXPECT_EQ(e.group(), -1);
    EXPECT_NE(std::string(e.what()).find("device"), std::string::npos) << e.what();
  }
}

// ---- backend selection -------------------------------------------------------------------------

// SPEC §6: on a GPU with a fast kernel, Backend::automatic (and fast) build and run it; on one
// without, they throw fp4gemm::Error naming options.backend and the GPU, and Backend::reference
// works. Which branch applies is decided by DeviceInfo::has_fast_kernel, itself checked against
// the compute capability, so an sm_90 GPU that reported no fast kernel fails here instead of
// silently taking the second branch.
TEST(BackendSelection, AutomaticBuildsTheFastKernelOrSaysWhyNot) {
  const DeviceInfo info = device_info();
  if (info.sm_major == 9 && info.sm_minor == 0)
    EXPECT_TRUE(info.has_fast_kernel) << info.name << " is sm_90 but reports no fast kernel";
  const SmallProblem small;
  ProblemConfig cfg;
  cfg.shapes = {{80, 256, 512}, {0, 256, 512}, {33, 256, 512}};
  if (info.has_fast_kernel) {
    for (const Backend backend : {Backend::automatic, Backend::fast}) {
      try {
        const Plan plan(small.device.descs(), small.device.options(backend));
        EXPECT_NE(plan.kernel_name(), "reference")
            << "backend " << to_string(backend) << " on " << info.name << " picked the reference kernel: "
            << plan.describe();
        std::printf("%s backend on %s: %s\n", to_string(backend), info.name.c_str(), plan.describe().c_str());
      } catch (const Error& e) {
        ADD_FAILURE() << "backend " << to_string(backend) << " refused on " << info.name
                      << ", which has a fast kernel: fp4gemm::Error(" << e.argument() << "): " << e.what();
      }
      EXPECT_TRUE(run_and_check(cfg, backend));
    }
  } else {
    for (const Backend backend : {Backend::automatic, Backend::fast}) {
      try {
        const Plan plan(small.device.descs(), small.device.options(backend));
        ADD_FAILURE() << "backend " << to_string(backend) << " built a plan (" << plan.kernel_name()
                      << ") on " << info.name << ", which has no fast kernel";
      } catch (const Error& e) {
        EXPECT_EQ(e.argument(), "options.backend") << e.what();
        EXPECT_EQ(e.group(), -1);
        const std::string what = e.what();
        EXPECT_NE(what.find(info.name), std::string::npos) << "the error should name the GPU: " << what;
        std::printf("%s backend on %s (sm_%d%d) refused: %s\n", to_string(backend), info.name.c_str(),
                    info.sm_major, info.sm_minor, what.c_str());
      }
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    }
  }
  // The reference kernel runs wherever it is asked for.
  {
    const Plan plan(small.device.descs(), small.device.options(Backend::reference));
    EXPECT_EQ(plan.kernel_name(), "reference");
  }
  EXPECT_TRUE(run_and_check(cfg, Backend::reference));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace fp4gemm::test
