// fp4gemm::quantize_activations: the GPU activation quantiser (NVFP4 with a global scale, MXFP4),
// bit for bit the host rule of fp4gemm::formats::quantize (formats.hpp).
//
// One thread per scale block (16 / 32 elements): two or four 16-byte loads of a 32- / 64-byte
// contiguous run (a warp reads 1-2 KB contiguous), amax, the scale code, 16 / 32 nibbles stored
// as 8-byte words, one scale byte (linear, or at its blocked-atom offset). The element rounding
// is the exact quotient's round-to-nearest-even, without a division: x / d rounds to code >= c
// exactly when |x| >= t d (or >, for ties that go down to the even code) for the midpoints t.
// Three ways to decide that, by the block's divisor d:
//  - every t d exact in FP32 (MXFP4; NVFP4 with a power-of-two global scale): compare |x| with 7
//    precomputed thresholds (3 comparisons, a branch-free search);
//  - otherwise (a calibrated NVFP4 global scale): the sign of one FMA |x| - t d per midpoint;
//  - d near FP32's under- or overflow: the correctly rounded quotient, ties settled by its FMA
//    remainder (e2m1_code below).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <string>

#include "formats/scale_layout.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/quantize.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/validate.hpp"

namespace fp4gemm {

const char* to_string(InputType t) { return t == InputType::bf16 ? "bf16" : t == InputType::f16 ? "f16" : "f32"; }

namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }

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

template <Format F, typename T>
__global__ void __launch_bounds__(kThreads) quantize_kernel(QuantizeArgs a, std::int64_t blocks_per_row,
                                                            std::int64_t total) {
  constexpr int kVec = F == Format::nvfp4 ? 16 : 32;
  constexpr int kLoads = kVec * sizeof(T) / 16;  // 16-byte loads per block
  constexpr int kPerLoad = 16 / sizeof(T);
  const float gs = F == Format::nvfp4 && a.global_scale_device != nullptr ? *a.global_scale_device : a.global_scale;
  for (std::int64_t u = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; u < total;
       u += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    // (32-bit division when the matrix allows: a 64-bit one costs tens of instructions)
    const bool small = total < (std::int64_t{1} << 31);
    const std::int64_t row = small ? static_cast<std::int64_t>(static_cast<std::uint32_t>(u) / static_cast<std::uint32_t>(blocks_per_row))
                                   : u / blocks_per_row;
    const std::int64_t b = u - row * blocks_per_row;
    const T* src = static_cast<const T*>(a.x) + row * a.ldx + b * kVec;
    float x[kVec];
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(src) + l);
      const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
      for (int i = 0; i < kPerLoad; ++i) x[l * kPerLoad + i] = to_f32<T>(e[i]);
    }
    float amax = 0.0f;
    bool nan = false;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      nan |= x[i] != x[i];
      amax = fmaxf(amax, fabsf(x[i]));
    }
    std::uint32_t code;
    float scale, divisor;
    if constexpr (F == Format::nvfp4) {
      const float s = __fdiv_rn(__fdiv_rn(amax, 6.0f), gs);
      code = nan ? 0x7Fu : e4m3_code(s);
      scale = e4m3_value(code);  // NaN for 0x7F
      divisor = __fmul_rn(scale, gs);
    } else {
      if (nan) {
        code = 0xFF;
      } else if (isinf(amax)) {
        code = 0xFE;
      } else if (amax > 0.0f) {
        // floor(log2 amax): the exponent field (subnormals: from the leading bit).
        const int bits = __float_as_int(amax);
        const int e = (bits >> 23) != 0 ? (bits >> 23) - 127 : (31 - __clz(bits)) - 149;
        code = static_cast<std::uint32_t>(min(max(e - 2 + 127, 0), 254));
      } else {
        code = 0;
      }
      // 2^(code - 127): code 0 is the subnormal 2^-127, 0xFF NaN.
      scale = code == 0xFF ? __int_as_float(0x7FC00000) : code == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(code) << 23);
      divisor = scale;
    }
    // Nibbles. A scale of 0 or NaN gives all-zero nibbles (formats.hpp's rule).
    std::uint32_t words[kVec / 8] = {};
    const bool zero = !(scale > 0.0f);
    // x / d >= t_i  <=>  |x| >= t_i d, exactly. Fast path: every t_i d exact in FP32 (always for
    // MXFP4 and for NVFP4 with a power-of-two global scale) and d far from underflow: compare
    // |x| with thresholds, ties to even folded in (a "greater than" threshold t is ">= the next
    // float"); the code is a 3-step branch-free search over the 7 sorted thresholds.
    constexpr float kT[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    float th[7];
    bool exact = divisor >= 0x1p-120f && divisor < 0x1p120f;
#pragma unroll
    for (int i = 0; i < 7; ++i) {
      th[i] = __fmul_rn(kT[i], divisor);
      exact &= fmaf(kT[i], divisor, -th[i]) == 0.0f;
      // codes 1, 3, 5, 7 are odd: a tie rounds down, so |x| must be strictly above
      if (i % 2 == 0) th[i] = __int_as_float(__float_as_int(th[i]) + 1);
    }
    if (!zero && exact) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float v = fabsf(x[i]);
        std::uint32_t c = v >= th[3] ? 4u : 0u;
        c += v >= (c ? th[5] : th[1]) ? 2u : 0u;
        c += v >= (c == 0 ? th[0] : c == 2 ? th[2] : c == 4 ? th[4] : th[6]) ? 1u : 0u;
        words[i / 8] |= ((signbit(x[i]) ? 8u : 0u) | c) << (4 * (i % 8));
      }
    } else if (!zero && divisor >= 0x1p-120f && divisor < 0x1p120f) {
      // t_i d inexact (NVFP4 with a calibrated global scale): the sign of |x| - t_i d from one
      // FMA is exact (a nonzero difference is a multiple of 2^-149, so it cannot round to 0).
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float v = fabsf(x[i]);
        std::uint32_t c = 0;
#pragma unroll
        for (int t = 0; t < 7; ++t) {
          const float r = fmaf(-kT[t], divisor, v);
          c += (t % 2 == 0 ? r > 0.0f : r >= 0.0f) ? 1u : 0u;
        }
        words[i / 8] |= ((signbit(x[i]) ? 8u : 0u) | c) << (4 * (i % 8));
      }
    } else if (!zero) {  // d near under- or overflow: the exact quotient's rounding via the division
#pragma unroll
      for (int i = 0; i < kVec; ++i) words[i / 8] |= e2m1_code(x[i], divisor) << (4 * (i % 8));
    }
    std::uint8_t* dst = static_cast<std::uint8_t*>(a.packed) + row * a.ld_packed + b * (kVec / 2);
    // 8-byte stores: ld_packed need only be a multiple of 8.
    *reinterpret_cast<uint2*>(dst) = make_uint2(words[0], words[1]);
    if constexpr (kVec == 32) *reinterpret_cast<uint2*>(dst + 8) = make_uint2(words[2], words[3]);
    auto* sc = static_cast<std::uint8_t*>(a.scales);
    if (a.scale_layout == ScaleLayout::linear) sc[row * blocks_per_row + b] = static_cast<std::uint8_t>(code);
    else sc[formats::detail::blocked_offset<std::int64_t>(row, b, blocks_per_row)] = static_cast<std::uint8_t>(code);
  }
}

// Blocked layout: the padding (rows past `rows` up to a multiple of 128, columns past cols up to a
// multiple of 4) is written as 0, as formats::linear_to_blocked does.
__global__ void __launch_bounds__(kThreads) blocked_padding_kernel(std::uint8_t* scales, std::int64_t rows,
                                                                   std::int64_t cols) {
  const std::int64_t prow = (rows + 127) / 128 * 128, pcols = (cols + 3) / 4 * 4;
  const std::int64_t total = prow * pcols;
  for (std::int64_t u = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; u < total;
       u += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t r = u / pcols, c = u % pcols;
    if (r >= rows || c >= cols) scales[formats::detail::blocked_offset<std::int64_t>(r, c, cols)] = 0;
  }
}

void validate(const QuantizeArgs& a) {
  if (a.format != Format::nvfp4 && a.format != Format::mxfp4) throw Error("format", -1, "unknown format");
  if (a.input != InputType::bf16 && a.input != InputType::f16 && a.input != InputType::f32)
    throw Error("input", -1, "unknown input type");
  if (a.scale_layout != ScaleLayout::linear && a.scale_layout != ScaleLayout::blocked)
    throw Error("scale_layout", -1, "unknown scale layout");
  const int vec = scale_block_size(a.format);
  if (a.rows < 0) throw Error("rows", -1, "must be >= 0 (got " + std::to_string(a.rows) + ")");
  if (a.k < 0 || a.k % vec != 0)
    throw Error("k", -1, "k = " + std::to_string(a.k) + " must be a non-negative multiple of " + std::to_string(vec) +
                             " for " + to_string(a.format));
  const std::int64_t esize = a.input == InputType::f32 ? 4 : 2;
  if (a.ldx < a.k || (a.ldx * esize) % 16 != 0)
    throw Error("ldx", -1, "row stride " + std::to_string(a.ldx) + " elements must be >= k and a multiple of 16 bytes");
  if (a.ld_packed < a.k / 2 || a.ld_packed % 8 != 0)
    throw Error("ld_packed", -1, "row stride " + std::to_string(a.ld_packed) + " bytes must be >= k/2 and a multiple of 8");
  if (a.format == Format::mxfp4 && (a.global_scale_device != nullptr || a.global_scale != 1.0f))
    throw Error("global_scale", -1, "only nvfp4 has a global scale (mxfp4's scales are powers of two)");
  if (a.global_scale_device == nullptr && (!(a.global_scale > 0.0f) || std::isinf(a.global_scale)))
    throw Error("global_scale", -1, "must be finite and > 0 (got " + std::to_string(a.global_scale) + ")");
  if (a.global_scale_device != nullptr && reinterpret_cast<std::uintptr_t>(a.global_scale_device) % 4 != 0)
    throw Error("global_scale_device", -1, "pointer is not 4-byte aligned");
  if (a.rows == 0 || a.k == 0) return;
  if (a.x == nullptr || reinterpret_cast<std::uintptr_t>(a.x) % 16 != 0)
    throw Error("x", -1, "must be a 16-byte aligned device pointer");
  if (a.packed == nullptr || reinterpret_cast<std::uintptr_t>(a.packed) % 16 != 0)
    throw Error("packed", -1, "must be a 16-byte aligned device pointer");
  if (a.scales == nullptr) throw Error("scales", -1, "null pointer");
}

QuantizeArgs resolved(const QuantizeArgs& in) {
  QuantizeArgs a = in;
  if (a.ldx == 0) a.ldx = a.k;
  if (a.ld_packed == 0) a.ld_packed = a.k / 2;
  return a;
}

}  // namespace

namespace detail {

void launch_quantize(const QuantizeArgs& in, cudaStream_t stream) {
  const QuantizeArgs a = resolved(in);
  validate(a);
  if (a.rows == 0 || a.k == 0) return;
  const int vec = scale_block_size(a.format);
  const std::int64_t bpr = a.k / vec, total = a.rows * bpr;
  const unsigned grid = static_cast<unsigned>(std::min<std::int64_t>((total + kThreads - 1) / kThreads, 132 * 16));
  auto go = [&](auto fmt_tag, auto type_tag) {
    constexpr Format F = decltype(fmt_tag)::value;
    using T = typename decltype(type_tag)::type;
    quantize_kernel<F, T><<<grid, kThreads, 0, stream>>>(a, bpr, total);
  };
  using Nv = std::integral_constant<Format, Format::nvfp4>;
  using Mx = std::integral_constant<Format, Format::mxfp4>;
  struct Bf { using type = __nv_bfloat16; };
  struct Hf { using type = __half; };
  struct Ff { using type = float; };
  if (a.format == Format::nvfp4) {
    if (a.input == InputType::bf16) go(Nv{}, Bf{});
    else if (a.input == InputType::f16) go(Nv{}, Hf{});
    else go(Nv{}, Ff{});
  } else {
    if (a.input == InputType::bf16) go(Mx{}, Bf{});
    else if (a.input == InputType::f16) go(Mx{}, Hf{});
    else go(Mx{}, Ff{});
  }
  FP4GEMM_CUDA_CHECK(cudaGetLastError(), "quantize_activations");
  if (a.scale_layout == ScaleLayout::blocked && (a.rows % 128 != 0 || bpr % 4 != 0)) {
    const std::int64_t pad = (a.rows + 127) / 128 * 128 * ((bpr + 3) / 4 * 4);
    blocked_padding_kernel<<<static_cast<unsigned>(std::min<std::int64_t>((pad + kThreads - 1) / kThreads, 1024)), kThreads, 0,
                             stream>>>(static_cast<std::uint8_t*>(a.scales), a.rows, bpr);
    FP4GEMM_CUDA_CHECK(cudaGetLastError(), "quantize_activations");
  }
}

}  // namespace detail

void quantize_activations(const QuantizeArgs& in, cudaStream_t stream) {
  const QuantizeArgs a = resolved(in);
  validate(a);
  if (a.rows == 0 || a.k == 0) return;
  int device = 0;
  FP4GEMM_CUDA_CHECK(cudaGetDevice(&device), "quantize_activations");
  const std::int64_t esize = a.input == InputType::f32 ? 4 : 2;
  const int vec = scale_block_size(a.format);
  detail::check_device_buffer("x", -1, a.x, ((a.rows - 1) * a.ldx + a.k) * esize, device);
  detail::check_device_buffer("packed", -1, a.packed, (a.rows - 1) * a.ld_packed + a.k / 2, device);
  detail::check_device_buffer("scales", -1, a.scales,
                              static_cast<std::int64_t>(formats::scale_bytes(a.scale_layout, a.rows, a.k / vec)), device);
  if (a.global_scale_device != nullptr)
    detail::check_device_buffer("global_scale_device", -1, a.global_scale_device, 4, device);
  detail::launch_quantize(a, stream);
}

}  // namespace fp4gemm
