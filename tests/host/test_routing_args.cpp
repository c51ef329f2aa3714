// Host tier: fp4gemm::align_routing's argument checks run before any CUDA call, so they name the
// argument on a machine without a GPU too.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "fp4gemm/moe.hpp"

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

}  // namespace
}  // namespace fp4gemm::test
