// Host format helpers: e2m1 / E4M3 / UE8M0 codecs, scale layouts, quantise / dequantise.
#include "fp4gemm/formats.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "formats/rounding.hpp"
#include "formats/scale_layout.hpp"

namespace fp4gemm::formats {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using detail::round_magnitude;  // formats/rounding.hpp: RNE onto a minifloat grid

// x may be any double. Saturating encoders for the e2m1 / E4M3 grids (sign kept, so a negative
// value that rounds to zero gives -0).
std::uint8_t encode_e2m1(double x) {
  if (std::isnan(x)) return 0;
  const std::uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const double a = std::fabs(x);
  const std::int64_t code = a >= 6.0 ? 7 : std::min<std::int64_t>(round_magnitude(a, 1, 0), 7);
  return static_cast<std::uint8_t>(sign | code);
}

std::uint8_t encode_e4m3(double x) {
  if (std::isnan(x)) return 0x7F;
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(x);
  // 0x7E = 448 is the largest finite code; 0x7F is NaN, so rounding never goes past 0x7E.
  const std::int64_t code = a >= 448.0 ? 0x7E : std::min<std::int64_t>(round_magnitude(a, 3, -6), 0x7E);
  return static_cast<std::uint8_t>(sign | code);
}

void check_k(Format f, std::int64_t k, const char* what) {
  const int vec = scale_block_size(f);
  if (k < 0 || k % vec != 0)
    throw Error(what, -1, "k = " + std::to_string(k) + " must be a non-negative multiple of " +
                              std::to_string(vec) + " for " + to_string(f));
}

}  // namespace

// ---- element and scale codecs ---------------------------------------------------------------

float e2m1_to_float(std::uint8_t nibble) {
  constexpr float kMagnitude[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float v = kMagnitude[nibble & 7u];
  return (nibble & 8u) ? -v : v;
}

std::uint8_t float_to_e2m1(float x) { return encode_e2m1(x); }

float e4m3_to_float(std::uint8_t code) {
  if ((code & 0x7Fu) == 0x7Fu) return kNaN;
  const int exponent = (code >> 3) & 0xF, mantissa = code & 7;
  const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                        : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return (code & 0x80u) ? -magnitude : magnitude;
}

std::uint8_t float_to_e4m3(float x) { return encode_e4m3(x); }

float ue8m0_to_float(std::uint8_t code) {
  if (code == 0xFF) return kNaN;
  return std::ldexp(1.0f, static_cast<int>(code) - 127);  // code 0 = 2^-127, a float subnormal
}

// Smallest power of two >= |x|, clamped to the code range: |x| <= 2^-127 (0 included) -> 0x00,
// |x| > 2^127 (inf included) -> 0xFE. The sign is ignored (UE8M0 has none). NaN -> 0xFF.
std::uint8_t float_to_ue8m0(float x) {
  if (std::isnan(x)) return 0xFF;
  const double a = std::fabs(static_cast<double>(x));
  if (a == 0.0) return 0;
  if (std::isinf(a)) return 0xFE;
  int e = 0;
  const double f = std::frexp(a, &e);              // a = f * 2^e, f in [0.5, 1)
  const int p = (f == 0.5) ? e - 1 : e;            // ceil(log2 a)
  return static_cast<std::uint8_t>(std::clamp(p + 127, 0, 254));
}

float scale_to_float(Format f, std::uint8_t code) {
  return f == Format::nvfp4 ? e4m3_to_float(code) : ue8m0_to_float(code);
}

std::uint8_t get_nibble(const std::uint8_t* row, std::int64_t k) {
  return static_cast<std::uint8_t>((row[k >> 1] >> ((k & 1) * 4)) & 0xF);
}

void set_nibble(std::uint8_t* row, std::int64_t k, std::uint8_t nibble) {
  const int shift = static_cast<int>(k & 1) * 4;
  std::uint8_t& byte = row[k >> 1];
  byte = static_cast<std::uint8_t>((byte & ~(0xF << shift)) | ((nibble & 0xF) << shift));
}

// ---- scale layouts --------------------------------------------------------------------------

std::int64_t scale_cols(Format f, std::int64_t k) { return k / scale_block_size(f); }
std::int64_t padded_rows(std::int64_t rows) { return (rows + 127) / 128 * 128; }
std::int64_t padded_scale_cols(std::int64_t cols) { return (cols + 3) / 4 * 4; }

std::size_t linear_scale_bytes(std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(rows * cols);
}
std::size_t blocked_scale_bytes(std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(padded_rows(rows) * padded_scale_cols(cols));
}
std::size_t scale_bytes(ScaleLayout l, std::int64_t rows, std::int64_t cols) {
  return l == ScaleLayout::linear ? linear_scale_bytes(rows, cols) : blocked_scale_bytes(rows, cols);
}

std::size_t blocked_offset(std::int64_t r, std::int64_t c, std::int64_t cols) {
  return static_cast<std::size_t>(detail::blocked_offset(r, c, cols));  // formats/scale_layout.hpp
}

std::size_t scale_offset(ScaleLayout l, std::int64_t r, std::int64_t c, std::int64_t cols) {
  return static_cast<std::size_t>(detail::scale_offset(l, r, c, cols));
}

void linear_to_blocked(const std::uint8_t* linear, std::int64_t rows, std::int64_t cols,
                       std::uint8_t* blocked) {
  const std::size_t bytes = blocked_scale_bytes(rows, cols);
  if (bytes == 0) return;
  std::memset(blocked, 0, bytes);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) blocked[blocked_offset(r, c, cols)] = linear[r * cols + c];
}

void blocked_to_linear(const std::uint8_t* blocked, std::int64_t rows, std::int64_t cols,
                       std::uint8_t* linear) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) linear[r * cols + c] = blocked[blocked_offset(r, c, cols)];
}

// ---- quantiser ------------------------------------------------------------------------------

// Per block of `vec` elements (NOTES: all arithmetic in double, so each step rounds once):
//  * amax = max |x| (NaN if any element is NaN).
//  * NVFP4: scale code = float_to_e4m3(amax / 6) (RNE, saturating at 448). If that scale is 0
//    (amax == 0 or amax / 6 below half the smallest subnormal, 2^-10) every element is encoded
//    as +0 (the scale code is then 0x00).
//  * MXFP4 (OCP MX specification 1.0, §6.3): scale = 2^(floor(log2 amax) - 2), 2 being emax of
//    e2m1, with the exponent clamped to [-127, 127]. amax == 0 gives code 0x00 (2^-127) and
//    all-zero elements; amax == inf gives 0xFE. amax/scale lies in [4, 8), so elements above 6
//    saturate.
//  * elements: float_to_e2m1(x / scale) — RNE on the e2m1 grid, saturating to +-6, sign kept
//    (a small negative element becomes -0, nibble 0x8).
//  * NaN anywhere in a block gives the NaN scale code (0x7F / 0xFF) and elements 0 where x/NaN,
//    so dequantisation yields NaN for the whole block.
void quantize(Format f, const float* x, std::int64_t rows, std::int64_t k, std::int64_t ldx,
              std::uint8_t* packed, std::uint8_t* scales_linear, float global_scale) {
  check_k(f, k, "k");
  if (!(global_scale > 0.0f) || std::isinf(global_scale))
    throw Error("global_scale", -1, "must be finite and > 0 (got " + std::to_string(global_scale) + ")");
  if (f != Format::nvfp4 && global_scale != 1.0f)
    throw Error("global_scale", -1, "only nvfp4 has a global scale (mxfp4's scales are powers of two)");
  // (volatile: the FP32 roundings are part of the rule, not to be folded into double ones)
  const volatile float gs = global_scale;
  const int vec = scale_block_size(f);
  const std::int64_t cols = k / vec, packed_ld = k / 2;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    std::uint8_t* pr = packed + r * packed_ld;
    for (std::int64_t b = 0; b < cols; ++b) {
      const float* xb = xr + b * vec;
      double amax = 0.0;
      bool has_nan = false;
      for (int i = 0; i < vec; ++i) {
        has_nan |= std::isnan(xb[i]);
        amax = std::max(amax, std::fabs(static_cast<double>(xb[i])));
      }
      std::uint8_t code = 0;
      if (has_nan) {
        code = f == Format::nvfp4 ? 0x7F : 0xFF;
      } else if (f == Format::nvfp4) {
        const volatile float sixth = static_cast<float>(amax) / 6.0f;  // amax is a float: exact
        const volatile float s = sixth / gs;
        code = encode_e4m3(s);
      } else if (std::isinf(amax)) {
        code = 0xFE;
      } else if (amax > 0.0) {
        int e = 0;
        std::frexp(amax, &e);                      // floor(log2 amax) = e - 1, exactly
        code = static_cast<std::uint8_t>(std::clamp((e - 1) - 2 + 127, 0, 254));
      }
      scales_linear[r * cols + b] = code;
      const double scale = scale_to_float(f, code);
      // The divisor fl(S * gs) (= S for gs = 1 and for MXFP4); the double quotient of two floats
      // never rounds onto an e2m1 tie it is not exactly on, so this is the exact quotient's rounding.
      const volatile float divisor = static_cast<float>(scale) * gs;
      for (int i = 0; i < vec; ++i) {
        const std::int64_t kk = b * vec + i;
        const std::uint8_t nibble = (scale == 0.0) ? 0 : encode_e2m1(static_cast<double>(xb[i]) / divisor);
        set_nibble(pr, kk, nibble);
      }
    }
  }
}

// out[r * k + kk] = e2m1 * scale, computed in float. The product is exact except that MXFP4
// scales >= 2^127 times |e2m1| >= 2 exceed FLT_MAX and give +-inf (the reference keeps doubles).
void dequantize(Format f, ScaleLayout layout, const std::uint8_t* packed, std::int64_t rows,
                std::int64_t k, std::int64_t ld, const std::uint8_t* scales, float* out) {
  check_k(f, k, "k");
  const int vec = scale_block_size(f);
  const std::int64_t cols = k / vec;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* pr = packed + r * ld;
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const float scale = scale_to_float(f, scales[scale_offset(layout, r, kk / vec, cols)]);
      out[r * k + kk] = e2m1_to_float(get_nibble(pr, kk)) * scale;
    }
  }
}

}  // namespace fp4gemm::formats
