// Host tier: fp4gemm::EpExchange's configuration is checked (each bad field named) before any
// device is touched, and the exchange buffer's size follows the layout in src/kernels/ep.cu.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "fp4gemm/ep.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm {
namespace {

EpConfig valid() {
  EpConfig c;
  c.world = 4, c.rank = 1, c.experts = 256, c.topk = 8, c.hidden = 7168, c.max_tokens = 128;
  c.rows = EpRows::nvfp4;
  return c;
}

void expect_named(const EpConfig& c, const std::string& argument) {
  try {
    (void)EpExchange::buffer_bytes(c);
    ADD_FAILURE() << "no error for a bad " << argument;
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
}

TEST(EpConfig, BadFieldsNamed) {
  EpConfig c = valid();
  c.world = 0;
  expect_named(c, "config.world");
  c = valid(), c.world = 9;
  expect_named(c, "config.world");
  c = valid(), c.rank = 4;
  expect_named(c, "config.rank");
  c = valid(), c.rank = -1;
  expect_named(c, "config.rank");
  c = valid(), c.experts = 250;  // not a multiple of 4
  expect_named(c, "config.experts");
  c = valid(), c.topk = 0;
  expect_named(c, "config.topk");
  c = valid(), c.topk = 33;
  expect_named(c, "config.topk");
  c = valid(), c.hidden = 7168 + 32;
  expect_named(c, "config.hidden");
  c = valid(), c.max_tokens = 0;
  expect_named(c, "config.max_tokens");
  c = valid(), c.max_tokens = 1 << 27;  // world * max_tokens * topk past 2^30 (the local layer's bound)
  expect_named(c, "config.max_tokens");
  c = valid(), c.max_tokens = (1 << 30) / 32;  // world 4 x top-8: exactly 2^30 pairs
  EXPECT_NO_THROW((void)EpExchange::buffer_bytes(c));
  c.max_tokens += 1;
  expect_named(c, "config.max_tokens");
  c = valid(), c.world = 1, c.rank = 0, c.topk = 1, c.max_tokens = 1 << 28;  // place * 8 + rank would pass 2^31
  expect_named(c, "config.max_tokens");
  c = valid(), c.global_scale = 0.0f;
  expect_named(c, "config.global_scale");
}

TEST(EpConfig, BufferBytesFollowTheLayout) {
  auto up = [](std::size_t x) { return (x + 255) / 256 * 256; };
  const EpConfig c = valid();
  const std::size_t cap = std::size_t{4} * 128, k = 8, H = 7168;  // received rows: one per (token, rank)
  // counts, ids [cap, k], packed rows, scales, the local layer's expert rows [cap * k, H] and row_of
  const std::size_t nv = up(64) + up(4 * cap * k) + up(cap * H / 2) + up(cap * H / 16) + up(cap * k * H * 2) +
                         up(4 * cap * k);
  EXPECT_EQ(EpExchange::buffer_bytes(c), nv);
  EpConfig b = c;
  b.rows = EpRows::bf16;
  EXPECT_EQ(EpExchange::buffer_bytes(b), up(64) + up(4 * cap * k) + up(cap * H * 2) + up(cap * k * H * 2) + up(4 * cap * k));
  EpConfig m = c;
  m.rows = EpRows::mxfp4;
  EXPECT_LT(EpExchange::buffer_bytes(m), EpExchange::buffer_bytes(c));  // H/32 scale bytes per row
  b.global_scale = 0.0f;  // only NVFP4 rows use the global scale
  EXPECT_NO_THROW((void)EpExchange::buffer_bytes(b));
}

}  // namespace
}  // namespace fp4gemm
