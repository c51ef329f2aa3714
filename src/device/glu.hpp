// The GLU activations of the dual GEMM / MoE epilogue in FP32: one definition, compiled for the
// kernels and for the host. Every operation is an IEEE-rounded FP32 add, multiply, divide or an
// explicit fmaf (the exponential too: glu_exp below, not the library expf, whose host and device
// versions differ in the last bit), so the host evaluates it bit for bit as the kernel does: given
// the same FP32 gate and up values (GPU MODE data, where every sum is exact), the kernel's output
// equals the host's FP32 evaluation exactly; against the float64 reference it is within a few
// FP32 ulps of the activation plus the products' own FP32 error.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define FP4GEMM_GLU_HD __host__ __device__ __forceinline__
#else
#define FP4GEMM_GLU_HD inline
#endif

namespace fp4gemm::detail {

enum GluKind : int { kGluNone = 0, kGluSilu = 1, kGluSwigluOai = 2 };

// exp(x) in FP32, ~2 ulp: x = n ln2 + r (Cody-Waite, n = rint(x log2 e)), Cephes' degree-7
// polynomial for exp(r), times 2^n in two exact power-of-two steps (gradual underflow below
// 2^-126). NaN -> NaN, x > 88.72... -> +inf, x < -104 -> 0. Branch-free (v19): the polynomial runs
// on x clamped to [-104, 88.72...] and the three ends are selected after it -- the same value as
// v18's early returns everywhere, without divergent branches in the epilogue's loop.
FP4GEMM_GLU_HD float glu_exp(float x) {
  const float xc = fminf(fmaxf(x, -104.0f), 88.72283935546875f);  // (NaN -> -104, selected away below)
  const float n = fmaf(xc, 1.44269502925872802734375f, 12582912.0f) - 12582912.0f;
  float r = fmaf(n, -0.693145751953125f, xc);
  r = fmaf(n, -1.428606765330187045e-06f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  const float z = r * r;
  const float y = fmaf(p, z, r) + 1.0f;
  const int ni = static_cast<int>(n), h = ni / 2;  // n in [-150, 128]: both halves in [-75, 64]
  auto pow2 = [](int e) {
    const unsigned bits = static_cast<unsigned>(e + 127) << 23;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  };
  const float v = y * pow2(h) * pow2(ni - h);
  return x != x ? x : x > 88.72283935546875f ? __builtin_huge_valf() : x < -104.0f ? 0.0f : v;
}

// g / d for d = 1 + exp(...) >= 1 or NaN: IEEE's quotient. d = +inf (the exponential overflowed,
// half of all gates on GPU MODE's data) gives g * 0 -- g's signed zero, NaN for g = +-inf, as
// g / inf does -- without the division, whose out-of-line slow path an infinite divisor takes
// (v18: 5 % of the dual GEMM's samples).
FP4GEMM_GLU_HD float glu_div(float g, float d) {
  const bool inf = d == __builtin_huge_valf();
  const float q = g / (inf ? 1.0f : d);
  return inf ? g * 0.0f : q;
}

// silu: g / (1 + exp(-g)) * u. swigluoai (gpt-oss): g' = min(g, limit), u' = clamp(u, -limit,
// limit), g' / (1 + exp(-alpha g')) * (u' + 1). The clamps are comparisons that are false for
// NaN, so NaN passes through them (as in the float64 reference and torch.clamp).
FP4GEMM_GLU_HD float glu_activate(int kind, float g, float u, float alpha, float limit) {
  if (kind == kGluSwigluOai) {
    g = g > limit ? limit : g;
    u = u > limit ? limit : (u < -limit ? -limit : u);
    return glu_div(g, 1.0f + glu_exp(-(alpha * g))) * (u + 1.0f);
  }
  return glu_div(g, 1.0f + glu_exp(-g)) * u;
}

}  // namespace fp4gemm::detail
