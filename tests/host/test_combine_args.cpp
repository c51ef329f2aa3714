// Host tier: fp4gemm::moe_combine names its bad arguments before it touches a device.
#include <gtest/gtest.h>

#include <string>

#include "fp4gemm/moe_layer.hpp"

namespace fp4gemm {
namespace {

MoeCombineArgs valid() {
  MoeCombineArgs a;
  a.tokens = 4, a.topk = 2, a.experts = 8, a.hidden = 64, a.ld_y = 64, a.ld_out = 64;
  return a;
}

void expect_named(const MoeCombineArgs& a, const std::string& argument) {
  try {
    moe_combine(a);
    ADD_FAILURE() << "no error for a bad " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
}

TEST(MoeCombineArgs, BadArgumentsNamed) {
  MoeCombineArgs a = valid();
  a.tokens = -1;
  expect_named(a, "tokens");
  a = valid(), a.topk = 0;
  expect_named(a, "topk");
  a = valid(), a.hidden = 60;
  expect_named(a, "hidden");
  a = valid(), a.ld_y = 32;
  expect_named(a, "ld_y");
  a = valid(), a.ld_out = 72 + 1;
  expect_named(a, "ld_out");
  a = valid();  // null y
  expect_named(a, "y");
}

TEST(MoeCombineArgs, NoTokensIsANoOp) {
  MoeCombineArgs a = valid();
  a.tokens = 0;
  EXPECT_NO_THROW(moe_combine(a));
}

}  // namespace
}  // namespace fp4gemm
