// Host tier: device/fast_div.hpp's quotient against the division operator -- divisors 1..8192 (the decode kernels'
// units per slot I / 8, 16-row blocks H / 16 and slot counts at the layer's shapes) with every numerator around each
// multiple up to 4096 of them, and random pairs over the whole 32-bit range (the header's proof covers the rest).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "device/fast_div.hpp"

namespace fp4gemm::detail {
namespace {

TEST(FastDiv, QuotientNearEveryMultiple) {
  for (std::uint32_t d = 1; d <= 8192; ++d) {
    const FastDiv f(d);
    for (std::uint32_t k = 0; k <= 4096; k += (k < 64 ? 1 : 61)) {
      const std::uint64_t base = std::uint64_t{k} * d;
      for (int delta = -1; delta <= 1; ++delta) {
        const std::int64_t n = static_cast<std::int64_t>(base) + delta;
        if (n < 0 || n > 0xFFFFFFFFll) continue;
        const auto u = static_cast<std::uint32_t>(n);
        ASSERT_EQ(f.div(u), u / d) << "n " << u << " d " << d;
      }
    }
  }
}

TEST(FastDiv, QuotientOverTheWholeRange) {
  std::mt19937_64 rng(20261204);
  for (int i = 0; i < 2000000; ++i) {
    const auto n = static_cast<std::uint32_t>(rng());
    std::uint32_t d = static_cast<std::uint32_t>(rng() >> (32 + rng() % 32));
    if (d == 0) d = 1;
    ASSERT_EQ(FastDiv(d).div(n), n / d) << "n " << n << " d " << d;
  }
  for (const std::uint32_t d : {1u, 2u, 3u, 7u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFEu, 0xFFFFFFFFu})
    for (const std::uint32_t n : {0u, 1u, d - 1, d, 0xFFFFFFFEu, 0xFFFFFFFFu}) ASSERT_EQ(FastDiv(d).div(n), n / d) << n << " / " << d;
}

}  // namespace
}  // namespace fp4gemm::detail
