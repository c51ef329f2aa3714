// The activation quantisation rule on the device (formats.hpp's host rule, bit for bit): the scale
// code of a block from its amax, and an element's e2m1 code as the exact quotient's rounding. Used
// by the quantiser kernel (src/kernels/quantize.cu, which adds a threshold-table fast path proven
// equal to these) and by the MoE GLU epilogue's fused quantisation (epilogue.cuh), which calls them
// directly for every element.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "fp4gemm/formats.hpp"

namespace fp4gemm::detail::quant {

// E4M3 code of a non-negative float (round to nearest even, saturating at 448 = 0x7E; NaN 0x7F).
__device__ __forceinline__ std::uint32_t e4m3_code(float s) {
  if (s != s) return 0x7F;
  if (s >= 448.0f) return 0x7E;
  // cvt.rn.satfinite.e4m3x2.f32: round to nearest even, subnormals included.
  return static_cast<std::uint32_t>(__nv_cvt_float_to_fp8(s, __NV_SATFINITE, __NV_E4M3)) & 0x7F;
}

__device__ __forceinline__ float e4m3_value(std::uint32_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(h));
}

// The e2m1 code (sign in bit 3) of x / d rounded to nearest even (the exact quotient's rounding),
// saturating; d > 0 or +inf/NaN handled by the caller's zero-scale rule.
__device__ __forceinline__ std::uint32_t e2m1_code(float x, float d) {
  const std::uint32_t sign = signbit(x) ? 8u : 0u;
  const float a = fabsf(x);
  float v = a / d;
  if (v != v) return 0;  // a NaN scale (the host's x / NaN): nibble 0, no sign
  // Exactly on a tie: the remainder decides (0: a true tie, rounds to the even code).
  if (v == 0.25f || v == 0.75f || v == 1.25f || v == 1.75f || v == 2.5f || v == 3.5f || v == 5.0f) {
    const float r = fmaf(-v, d, a);
    if (r > 0.0f) v = __int_as_float(__float_as_int(v) + 1);
    else if (r < 0.0f) v = __int_as_float(__float_as_int(v) - 1);
  }
  const std::uint32_t code = (v > 0.25f) + (v >= 0.75f) + (v > 1.25f) + (v >= 1.75f) + (v > 2.5f) + (v >= 3.5f) +
                             (v > 5.0f);
  return sign | code;
}

template <Format F>
__device__ __forceinline__ float code_scale(std::uint32_t code) {
  if constexpr (F == Format::nvfp4) return e4m3_value(code);  // NaN for 0x7F
  // 2^(code - 127): code 0 is the subnormal 2^-127, 0xFF NaN.
  return code == 0xFF ? __int_as_float(0x7FC00000) : code == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(code) << 23);
}

template <Format F>
__device__ __forceinline__ float code_divisor(std::uint32_t code, float gs) {
  return F == Format::nvfp4 ? __fmul_rn(code_scale<F>(code), gs) : code_scale<F>(code);
}

// MXFP4's scale code of a block with max |x| = amax (NaN if any element is NaN): the OCP rule,
// floor(log2 amax) - 2, clamped to the UE8M0 range; 0xFF for NaN, 0xFE for inf, 0 for amax 0.
__device__ __forceinline__ std::uint32_t mx_scale_code(float amax) {
  if (amax != amax) return 0xFF;
  if (isinf(amax)) return 0xFE;
  if (!(amax > 0.0f)) return 0;
  // floor(log2 amax): the exponent field (subnormals: from the leading bit).
  const int bits = __float_as_int(amax);
  const int e = (bits >> 23) != 0 ? (bits >> 23) - 127 : (31 - __clz(bits)) - 149;
  return static_cast<std::uint32_t>(min(max(e - 2 + 127, 0), 254));
}

// NVFP4's scale code by the rule itself: E4M3(fl(fl(amax / 6) / gs)), 0x7F for NaN.
__device__ __forceinline__ std::uint32_t nv_scale_code_exact(float amax, float gs) {
  if (amax != amax) return 0x7Fu;
  return e4m3_code(__fdiv_rn(__fdiv_rn(amax, 6.0f), gs));
}

// An element's nibble under a block's scale code: 0 when the scale is 0 or NaN (formats.hpp's
// rule), else the exact quotient's rounding.
template <Format F>
__device__ __forceinline__ std::uint32_t element_nibble(float x, std::uint32_t code, float gs) {
  if (!(code_scale<F>(code) > 0.0f)) return 0;
  return e2m1_code(x, code_divisor<F>(code, gs));
}

}  // namespace fp4gemm::detail::quant
