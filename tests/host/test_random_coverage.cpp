// Host tier: the GPU tier's random problems (tests/gpu/problem.cpp) cover what they claim to.
// These checks need no GPU, so they live here and run everywhere, instead of in the GPU binary,
// which is skipped as a whole without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <tuple>
#include <utility>

#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

bool is_blank(const Shape& s) { return s.m == 0 && s.n == 0 && s.k == 0; }

struct Coverage {
  std::set<std::tuple<int, int, int, int>> combos;  // format, layout, out type, values
  int zero_m = 0, one_m = 0, odd_m = 0, big_k = 0, device_alpha = 0, non_unit_alpha = 0, nan = 0,
      padded = 0, varying = 0, many_groups = 0;
  // Blank groups (GroupDesc{}: M = N = K = 0, null pointers).
  int blank = 0, empty_not_blank = 0, blank_first = 0, blank_last = 0, blank_between_real = 0,
      blank_with_device_alpha = 0, blank_with_group_alphas = 0, blank_adjacent = 0;
  double macs = 0;
};

Coverage survey(std::uint64_t seed0, int problems, const RandomLimits& limits) {
  Coverage c;
  for (int i = 0; i < problems; ++i) {
    const ProblemConfig cfg = random_config(seed0 + static_cast<std::uint64_t>(i), limits);
    c.combos.insert({static_cast<int>(cfg.format), static_cast<int>(cfg.layout),
                     static_cast<int>(cfg.out_type), static_cast<int>(cfg.values)});
    std::set<std::pair<int, int>> nk;
    int blanks = 0;
    bool real_seen = false, blank_after_real = false, between = false;
    for (std::size_t g = 0; g < cfg.shapes.size(); ++g) {
      const Shape& s = cfg.shapes[g];
      c.zero_m += s.m == 0;
      c.one_m += s.m == 1;
      c.odd_m += s.m > 1 && s.m % 2 == 1;
      c.big_k += s.k >= 1024;
      c.macs += static_cast<double>(s.m) * s.n * s.k;
      if (is_blank(s)) {
        ++blanks;
        if (g > 0 && is_blank(cfg.shapes[g - 1])) ++c.blank_adjacent;
        if (real_seen) blank_after_real = true;
        continue;
      }
      if (s.m == 0) ++c.empty_not_blank;
      nk.insert({s.n, s.k});
      if (s.m > 0) {
        if (blank_after_real) between = true;
        real_seen = true;
      }
    }
    c.varying += nk.size() > 1;
    c.many_groups += cfg.shapes.size() >= 17;
    c.device_alpha += cfg.alpha_on_device;
    for (float a : cfg.alphas) c.non_unit_alpha += a != 1.0f;
    c.nan += cfg.nan_scales;
    c.padded += cfg.padded_strides;
    c.blank += blanks;
    if (!cfg.shapes.empty()) {
      c.blank_first += is_blank(cfg.shapes.front());
      c.blank_last += is_blank(cfg.shapes.back());
    }
    c.blank_between_real += between;
    c.blank_with_device_alpha += blanks > 0 && cfg.alpha_on_device;
    c.blank_with_group_alphas += blanks > 0 && cfg.alphas.size() > 1;
    EXPECT_TRUE(cfg.alphas.size() <= 1 || cfg.alphas.size() == cfg.shapes.size()) << cfg.describe();
  }
  return c;
}

void expect_blank_groups_covered(const Coverage& c) {
  EXPECT_GT(c.blank, 40);
  EXPECT_GT(c.empty_not_blank, 10);  // M = 0 groups with valid N and K stay too
  EXPECT_GT(c.blank_first, 5);
  EXPECT_GT(c.blank_last, 5);
  EXPECT_GT(c.blank_between_real, 10);
  EXPECT_GT(c.blank_adjacent, 2);
  EXPECT_GT(c.blank_with_device_alpha, 5);
  EXPECT_GT(c.blank_with_group_alphas, 5);
}

// The GPU tier's ReferenceRandom problems (random_config(seed), seed in [0, 240)).
TEST(ReferenceRandomCoverage, CoversEveryOption) {
  const Coverage c = survey(0, kReferenceRandomProblems, RandomLimits{});
  EXPECT_EQ(c.combos.size(), 24u);
  EXPECT_GT(c.zero_m, 10);
  EXPECT_GT(c.one_m, 10);
  EXPECT_GT(c.odd_m, 50);
  EXPECT_GT(c.big_k, 10);
  EXPECT_GT(c.device_alpha, 20);
  EXPECT_GT(c.non_unit_alpha, 50);
  EXPECT_GT(c.nan, 5);
  EXPECT_GT(c.padded, 20);
  EXPECT_GT(c.varying, 20);
  EXPECT_GT(c.many_groups, 10);
  EXPECT_LT(c.macs, kReferenceRandomProblems * 2.0e7);  // keeps the CPU reference at a few seconds in total
  expect_blank_groups_covered(c);
}

// The GPU tier's FusedRandom problems.
TEST(FusedRandomCoverage, CoversEveryOption) {
  const RandomLimits limits = fused_random_limits();
  const Coverage c = survey(kFusedRandomSeed0, kFusedRandomProblems, limits);
  EXPECT_EQ(c.combos.size(), 24u);
  EXPECT_GT(c.zero_m, 20);
  EXPECT_GT(c.one_m, 20);
  EXPECT_GT(c.odd_m, 100);
  EXPECT_GT(c.big_k, 20);
  EXPECT_GT(c.device_alpha, 40);
  EXPECT_GT(c.non_unit_alpha, 100);
  EXPECT_GT(c.nan, 10);
  EXPECT_GT(c.padded, 40);
  EXPECT_GT(c.varying, 40);
  EXPECT_GT(c.many_groups, 20);
  EXPECT_LT(c.macs, kFusedRandomProblems * limits.mac_budget);
  expect_blank_groups_covered(c);
}

// A {0, 0, 0} shape is a blank group (described by GroupDesc{} on the device: null pointers, no
// buffers); other M = 0 shapes keep their N and K.
TEST(RandomProblems, BlankShapesBecomeBlankGroups) {
  ProblemConfig cfg;
  cfg.shapes = {{0, 0, 0}, {200, 256, 512}, {0, 0, 0}, {100, 256, 512}, {0, 64, 128}};
  cfg.alphas = {3.0f, 1.0f, 0.5f, 2.0f, 4.0f};
  cfg.null_empty_groups = false;
  const Problem p = make_problem(cfg);
  ASSERT_EQ(p.groups.size(), 5u);
  for (const std::size_t g : {0u, 2u}) {
    EXPECT_TRUE(p.groups[g].blank) << g;
    EXPECT_TRUE(p.groups[g].null_pointers) << g;
    EXPECT_EQ(p.groups[g].alpha, 1.0f) << g;
    EXPECT_EQ(p.groups[g].lda, 0);
    EXPECT_EQ(p.groups[g].ldb, 0);
    EXPECT_EQ(p.groups[g].ldc, 0);
  }
  for (const std::size_t g : {1u, 3u, 4u}) {
    EXPECT_FALSE(p.groups[g].blank) << g;
    EXPECT_FALSE(p.groups[g].null_pointers) << g;
  }
  EXPECT_EQ(p.groups[4].n, 64);
  EXPECT_EQ(p.groups[4].k, 128);
  EXPECT_EQ(p.macs(), 200.0 * 256 * 512 + 100.0 * 256 * 512);
  // Long runs of equal shapes are described compactly (G = 100 000 problems stay readable).
  ProblemConfig many;
  many.shapes.assign(70000, Shape{1, 16, 64});
  many.shapes.push_back({0, 0, 0});
  EXPECT_NE(many.describe().find("1x16x64*70000 0x0x0"), std::string::npos) << many.describe();
  EXPECT_LT(many.describe().size(), 200u);
}

}  // namespace
}  // namespace fp4gemm::test
