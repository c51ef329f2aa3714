// GPU tier, both backends: empty groups (GroupDesc{} with K = 0, and M = 0 groups whatever their
// other fields hold) cost nothing and touch nothing; more groups than a grid dimension holds
// (> 65 535) and more rows than the reference kernel's grid y holds (> 524 280) give correct
// results. Issue 19, items 1 and 2, and its "test honesty" list.
//
// Every check goes through run_plan_and_check: each plan runs with a NaN and a finite poison in
// C, every element is compared with the CPU reference, and the guard bands around each C, the
// row padding and the inputs must be untouched.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "fp4gemm/fp4gemm.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

class EmptyAndManyGroups : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::fast && !(device_count() > 0 && device_info().has_fast_kernel))
      GTEST_SKIP() << "no sm_90 GPU: the fused kernel cannot run here";
  }
};

std::string backend_name(const ::testing::TestParamInfo<Backend>& info) { return to_string(info.param); }

bool is_default_desc(const GroupDesc& d) {
  const GroupDesc blank{};
  return d.m == blank.m && d.n == blank.n && d.k == blank.k && d.a == blank.a && d.lda == blank.lda &&
         d.b == blank.b && d.ldb == blank.ldb && d.sfa == blank.sfa && d.sfb == blank.sfb &&
         d.c == blank.c && d.ldc == blank.ldc && d.alpha == blank.alpha && d.alpha_device == blank.alpha_device;
}

// Builds the plan and checks it (two poisons, every element, guard bands). A plan-time
// fp4gemm::Error is a failure that names the argument.
::testing::AssertionResult plan_and_check(const Problem& problem, const DeviceProblem& device,
                                          const std::vector<GroupDesc>& descs, Backend backend,
                                          const RunOptions& options = {}) {
  try {
    const Plan plan(descs, device.options(backend));
    return run_plan_and_check(problem, device, plan, cpu_expected(problem, options.mac_budget), options);
  } catch (const Error& e) {
    return ::testing::AssertionFailure() << problem.describe() << " [backend " << to_string(backend)
                                         << "]: plan refused: fp4gemm::Error(" << e.argument() << ", "
                                         << e.group() << "): " << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << problem.describe() << " [backend " << to_string(backend)
                                         << "]: exception: " << e.what();
  }
}

// ---- item 1: GroupDesc{} (M = 0, K = 0) among real groups ---------------------------------------

// The reproducer: {GroupDesc{}, 200x256x512, GroupDesc{}, 100x256x512}. On the old code the
// fused kernel's pre-pass launched blocks for the K = 0 groups (kblocks = 0, m = u / kblocks = -1)
// and wrote out of bounds: every output of the real groups was wrong.
TEST_P(EmptyAndManyGroups, BlankGroupsBetweenRealGroups) {
  for (const Format format : {Format::nvfp4, Format::mxfp4}) {
    for (const ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::blocked}) {
      ProblemConfig cfg;
      cfg.format = format;
      cfg.layout = layout;
      cfg.shapes = {{0, 0, 0}, {200, 256, 512}, {0, 0, 0}, {100, 256, 512}};
      const Problem problem = make_problem(cfg);
      const DeviceProblem device(problem);
      ASSERT_TRUE(is_default_desc(device.descs()[0]));
      ASSERT_TRUE(is_default_desc(device.descs()[2]));
      EXPECT_TRUE(plan_and_check(problem, device, device.descs(), GetParam()));
    }
  }
}

// Blank groups first, last, adjacent, alone; with M = 0 groups that have real (untouchable)
// buffers; with alpha on the device; full-range values into f32.
TEST_P(EmptyAndManyGroups, BlankGroupsAnywhere) {
  const Shape blank{};
  std::vector<std::vector<Shape>> cases = {
      {blank},
      {blank, blank, blank},
      {blank, blank, {1, 64, 64}, blank},
      {{37, 136, 1024}, blank, blank, blank, blank, blank, {0, 128, 256}, {64, 136, 1024}, blank},
      {{0, 128, 256}, blank, {300, 72, 128}, {0, 64, 64}, blank, {5, 8, 2048}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    for (const bool full : {false, true}) {
      ProblemConfig cfg;
      cfg.shapes = cases[i];
      cfg.seed = 500 + i;
      cfg.null_empty_groups = false;  // the non-blank M = 0 groups get real buffers
      if (full) {
        cfg.values = Values::full;
        cfg.out_type = OutType::f32;
        cfg.format = Format::mxfp4;
        cfg.layout = ScaleLayout::blocked;
        cfg.alpha_on_device = true;
        cfg.padded_strides = true;
        cfg.alphas.assign(cfg.shapes.size(), -0.75f);
      }
      const Problem problem = make_problem(cfg);
      const DeviceProblem device(problem);
      RunOptions options;
      options.check.tolerance = Tolerance::gpumode_rule;
      EXPECT_TRUE(plan_and_check(problem, device, device.descs(), GetParam(), options)) << "case " << i;
      options.launch = Launch::graph;
      EXPECT_TRUE(plan_and_check(problem, device, device.descs(), GetParam(), options)) << "case " << i << ", graph";
    }
  }
}

// An M = 0 group must touch nothing whatever its other fields hold (issue 19 item 1): K not a
// multiple of the scale block, huge N and K, junk strides, a C pointer into another group's guard
// band, a NaN alpha. The library may also refuse such a group at plan time, naming it; it may not
// accept it and then compute anything wrong or write anything outside the real groups' C.
TEST_P(EmptyAndManyGroups, EmptyGroupsWithJunkFieldsTouchNothingOrAreRefused) {
  ProblemConfig cfg;
  cfg.shapes = {{0, 0, 0}, {200, 256, 512}, {0, 0, 0}, {100, 256, 512}, {0, 0, 0}};
  const Problem problem = make_problem(cfg);
  const DeviceProblem device(problem);
  std::vector<GroupDesc> descs = device.descs();
  descs[0].n = 256;
  descs[0].k = 7;  // not a multiple of the scale block
  descs[0].ldb = -16;
  descs[0].ldc = 3;
  descs[0].alpha = std::numeric_limits<float>::quiet_NaN();
  descs[2].c = static_cast<std::uint8_t*>(descs[3].c) - 64;  // inside group 3's guard band
  descs[2].a = descs[1].a;
  descs[2].n = 256;
  descs[2].k = 512;
  descs[4].n = 1 << 30;
  descs[4].k = 1 << 30;
  descs[4].lda = descs[4].ldb = std::int64_t{1} << 29;
  descs[4].ldc = std::int64_t{1} << 30;
  try {
    const Plan plan(descs, device.options(GetParam()));
    EXPECT_TRUE(run_plan_and_check(problem, device, plan, cpu_expected(problem)));
    std::printf("empty groups with junk fields accepted (%s)\n", plan.kernel_name().c_str());
  } catch (const Error& e) {
    const int g = e.group();
    EXPECT_TRUE(g == 0 || g == 2 || g == 4) << "refused naming group " << g << ": " << e.what();
    EXPECT_EQ(e.argument().rfind("groups[" + std::to_string(g) + "]", 0), 0u) << e.argument() << ": " << e.what();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::printf("empty groups with junk fields refused: %s\n", e.what());
  }
}

// ---- item 2: more groups than a grid dimension holds --------------------------------------------

// 70 000 real groups of M = 1 (a decode step over many experts): grids over groups must not be
// launched with more than 65 535 blocks in y or z. On the old code the plan was accepted and
// run() failed with cudaErrorInvalidValue (reference kernel: grid z = G) after writing part of C.
TEST_P(EmptyAndManyGroups, SeventyThousandSmallGroups) {
  ProblemConfig cfg;
  cfg.shapes.assign(70000, Shape{1, 16, 64});
  cfg.guard_bytes = 256;  // ~4 KiB per group instead of ~10
  cfg.seed = 70000;
  const Problem problem = make_problem(cfg);
  const DeviceProblem device(problem);
  EXPECT_TRUE(plan_and_check(problem, device, device.descs(), GetParam()));
}

// 100 000 groups, most of them GroupDesc{}, some real (the first, the last, one every 1000
// around the 65 535 boundaries) and some M = 0 with real buffers: blank groups cost nothing.
TEST_P(EmptyAndManyGroups, HundredThousandGroupsMostlyBlank) {
  ProblemConfig cfg;
  cfg.shapes.assign(100000, Shape{});
  for (int g = 0; g < 100000; g += 1000) {
    cfg.shapes[static_cast<std::size_t>(g)] = {1 + g / 1000 * 37 % 200, 128, 256};
    cfg.shapes[static_cast<std::size_t>(g + 500)] = {0, 128, 256};
    cfg.shapes[static_cast<std::size_t>(g + 999)] = {1 + g / 1000 * 13 % 64, 128, 256};
  }
  for (const int g : {65534, 65535, 65536, 65537})
    cfg.shapes[static_cast<std::size_t>(g)] = {3, 128, 256};
  cfg.null_empty_groups = false;
  cfg.seed = 100000;
  const Problem problem = make_problem(cfg);
  const DeviceProblem device(problem);
  EXPECT_TRUE(plan_and_check(problem, device, device.descs(), GetParam()));
}

// One group with more rows than the reference kernel's grid y held (8 rows a block, 65 535 blocks:
// M > 524 280), beside a small one.
TEST_P(EmptyAndManyGroups, MoreThan524280RowsInOneGroup) {
  ProblemConfig cfg;
  cfg.shapes = {{530001, 8, 64}, {3, 8, 64}};
  cfg.seed = 530001;
  const Problem problem = make_problem(cfg);
  const DeviceProblem device(problem);
  EXPECT_TRUE(plan_and_check(problem, device, device.descs(), GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Backends, EmptyAndManyGroups, ::testing::Values(Backend::reference, Backend::fast),
                         backend_name);

}  // namespace
}  // namespace fp4gemm::test
