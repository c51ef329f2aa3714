// Unsigned division by a divisor fixed for a kernel (host + device): its reciprocal formed once, each quotient one
// multiply-high and one correction. The decode kernels divide a unit index by the units per slot (or per 16-row block)
// at every unit change of a warp's share; the compiler's unsigned division re-derives the divisor's reciprocal at each
// use (I2F, MUFU.RCP, F2I and two refinements: ~20 instructions, three uses per unit change), which on Qwen3-30B-A3B's
// down projection (6 chunks per unit) was ~10 instructions per chunk of a ~175-instruction loop.
#pragma once

#include <cstdint>

#include "formats/host_device.hpp"

namespace fp4gemm::detail {

FP4GEMM_HD std::uint32_t umulhi32(std::uint32_t a, std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(a) * b) >> 32);
#endif
}

// n / d for every n < 2^32 and d >= 1. m = floor((2^32 - 1) / d) is below 2^32 / d and at least 2^32 / d - 1, so
// n m / 2^32 lies in (n / d - 1, n / d] for n < 2^32: the multiply-high is the quotient or one less, and one
// comparison of the remainder fixes it (tests/host/test_fast_div.cpp checks edges and random pairs).
struct FastDiv {
  std::uint32_t d = 1, m = 0xFFFFFFFFu;
  FastDiv() = default;
  FP4GEMM_HD explicit FastDiv(std::uint32_t divisor) : d(divisor), m(0xFFFFFFFFu / divisor) {}
  FP4GEMM_HD std::uint32_t div(std::uint32_t n) const {
    std::uint32_t q = umulhi32(n, m);
    return n - q * d >= d ? q + 1 : q;
  }
};

}  // namespace fp4gemm::detail
