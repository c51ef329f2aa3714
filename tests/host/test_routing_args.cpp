// Host tier: fp4gemm::align_routing's argument checks run before any CUDA call, so they name the
// argument on a machine without a GPU too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "fp4gemm/moe.hpp"
#include "kernels/routing.hpp"

namespace fp4gemm::test {
namespace {

template <typename F>
void expect_error(F&& f, const std::string& argument, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected fp4gemm::Error naming " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(AlignRoutingArgs, ScalarsAndNullPointersNamed) {
  int dummy[4] = {};
  auto* p = reinterpret_cast<int*>(dummy);
  expect_error([&] { align_routing(p, false, 4, 2, 0, p, p); }, "experts", "1..512");
  expect_error([&] { align_routing(p, false, 4, 2, 513, p, p); }, "experts", "got 513");
  expect_error([&] { align_routing(p, false, -1, 2, 8, p, p); }, "topk_ids", "count");
  expect_error([&] { align_routing(p, false, std::int64_t{1} << 31, 1, 8, p, p); }, "topk_ids", "2^31");
  expect_error([&] { align_routing(p, false, 4, 0, 8, p, p); }, "k", ">= 1");
  expect_error([&] { align_routing(p, false, 5, 2, 8, p, p); }, "topk_ids", "multiple of k");
  expect_error([&] { align_routing(p, false, 4, 2, 8, nullptr, p); }, "offsets", "null");
  expect_error([&] { align_routing(nullptr, false, 4, 2, 8, p, p); }, "topk_ids", "null");
  expect_error([&] { align_routing(p, false, 4, 2, 8, p, nullptr); }, "gather", "null");
  expect_error([&] { detail::launch_align_routing(p, true, 4, 2, 600, p, p, nullptr, nullptr); }, "experts", "1..512");
}

// The layer's routing launch shape (kernels/routing.hpp): one block below kRoutingGridMinIds ids, then the grid form
// on ceil(ids / kRoutingIdsPerCta) CTAs, at least kRoutingGridMinCtas and at most kRoutingGridMaxCtas (what the plan's
// scratch holds) -- the counts measured fastest on an H100 (bench/micro/routing_grid.cu: 16 CTAs at 4096-8192 ids,
// ~24 at 16384, ~48 at 32768); never fewer CTAs for more ids.
TEST(AlignRoutingShape, GridCtasFollowTheRule) {
  using detail::routing_grid_ctas;
  EXPECT_EQ(routing_grid_ctas(0), 0);
  EXPECT_EQ(routing_grid_ctas(detail::kRoutingGridMinIds - 1), 0);
  EXPECT_EQ(routing_grid_ctas(detail::kRoutingGridMinIds), detail::kRoutingGridMinCtas);
  EXPECT_EQ(routing_grid_ctas(4096), 16);
  EXPECT_EQ(routing_grid_ctas(8192), 16);
  EXPECT_EQ(routing_grid_ctas(16 * 683), 16);
  EXPECT_EQ(routing_grid_ctas(16 * 683 + 1), 17);
  EXPECT_EQ(routing_grid_ctas(16384), 24);
  EXPECT_EQ(routing_grid_ctas(32768), 48);
  EXPECT_EQ(routing_grid_ctas(std::int64_t{1} << 30), detail::kRoutingGridMaxCtas);
  int last = 0;
  for (std::int64_t n = detail::kRoutingGridMinIds; n <= 400000; n += 997) {
    const int c = routing_grid_ctas(n);
    EXPECT_GE(c, last) << n;
    EXPECT_GE(c, detail::kRoutingGridMinCtas) << n;
    EXPECT_LE(c, detail::kRoutingGridMaxCtas) << n;
    const std::int64_t most = std::int64_t{detail::kRoutingGridMaxCtas} * detail::kRoutingIdsPerCta;
    EXPECT_GE(c * detail::kRoutingIdsPerCta, std::min(n, most)) << n;  // (<= 683 ids per CTA below the cap)
    last = c;
  }
}

}  // namespace
}  // namespace fp4gemm::test
