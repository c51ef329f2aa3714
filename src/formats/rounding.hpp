// Internal: round-to-nearest-even of a magnitude onto a small binary floating-point grid.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fp4gemm::formats::detail {

// Rounds a finite magnitude a >= 0 to nearest-even on a binary floating-point grid with
// `mantissa_bits` fraction bits and minimum normal exponent `min_exp` (gradual underflow below
// it) and returns the code without sign:
//   code = ((exp - min_exp) << mantissa_bits) + q,   q = rint(a / 2^(exp - mantissa_bits)),
// which is (biased exponent field << mantissa_bits | fraction) for normals and q for
// subnormals; a mantissa carry (q == 2^(mantissa_bits + 1)) lands on the next binade by itself.
// NOTES: scaling by 2^n is exact in double, so a double input is rounded exactly once
// (std::nearbyint in the default round-to-nearest-even mode). There is no upper limit: the
// caller saturates or maps codes past the largest finite one to infinity.
inline std::int64_t round_magnitude(double a, int mantissa_bits, int min_exp) {
  if (a == 0.0) return 0;
  int e = 0;
  std::frexp(a, &e);                         // a = f * 2^e, f in [0.5, 1)
  const int exp = std::max(e - 1, min_exp);  // unbiased exponent of a, or the subnormal one
  const double q = std::nearbyint(std::ldexp(a, mantissa_bits - exp));
  return (static_cast<std::int64_t>(exp - min_exp) << mantissa_bits) + static_cast<std::int64_t>(q);
}

}  // namespace fp4gemm::formats::detail
