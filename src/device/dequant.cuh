// Exact e2m1 -> f16/bf16 dequantisation and the K order that makes it cheap (host + device).
//
// NOTES: a consumer thread owns 16 consecutive K elements (8 bytes) of two weight rows per
// 64-wide k-block. Turning a 32-bit word of 8 nibbles into 4 half2 registers costs 2 shifts, 2
// masks and 1 multiply per register if register p holds nibbles (p, p+4): both halves then need
// the same shift. That pairing fixes which K element feeds which wgmma k slot; the activation
// pre-pass writes the activations in the same order (`wgmma_k_source`), so the dot product is
// unchanged.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FP4GEMM_HD __host__ __device__ __forceinline__
#else
#define FP4GEMM_HD inline
#endif

namespace fp4gemm::detail {

// Within a 64-wide k-block: the source element (0..63) that feeds wgmma k position kk (0..63).
// kk = 16*step + slot; in the m64nNk16 register-A fragment, thread t of a quad holds slots
// {2t, 2t+1} (register a0/a1) and {2t+8, 2t+9} (a2/a3).
FP4GEMM_HD int wgmma_k_source(int kk) {
  const int step = kk / 16, slot = kk % 16;
  const int t = (slot % 8) / 2, h = slot % 2, upper = slot / 8;
  return 16 * t + step + 4 * h + 8 * upper;
}

// Half2 bit patterns of nibbles p and p+4 of `w` with the e2m1 bits placed in the low exponent /
// top mantissa bits: f16 raw value = e2m1 * 2^-14, bf16 raw value = e2m1 * 2^-126 (subnormal
// for 0.5, exactly as e2m1 itself is).
template <int P>
FP4GEMM_HD std::uint32_t e2m1_pair_f16_raw(std::uint32_t w) {
  constexpr int kMag = 9 - 4 * P, kSign = 12 - 4 * P;
  const std::uint32_t mag = kMag >= 0 ? (w << kMag) : (w >> -kMag);
  return (mag & 0x0E000E00u) | ((w << kSign) & 0x80008000u);
}
template <int P>
FP4GEMM_HD std::uint32_t e2m1_pair_bf16_raw(std::uint32_t w) {
  constexpr int kMag = 6 - 4 * P, kSign = 12 - 4 * P;
  const std::uint32_t mag = kMag >= 0 ? (w << kMag) : (w >> -kMag);
  const std::uint32_t sign = kSign >= 0 ? (w << kSign) : (w >> -kSign);
  return (mag & 0x01C001C0u) | (sign & 0x80008000u);
}

// NVFP4 weights run in f16: dq * 2^-7 = raw * (scale * 2^7) is one exact multiply (scale * 2^7
// <= 57344 fits f16; every dq * 2^-7 is a multiple of 2^-17, inside f16's subnormal grid), and
// the epilogue multiplies the FP32 accumulator by 2^7.
constexpr float kNvfp4AccScale = 128.0f;

}  // namespace fp4gemm::detail
