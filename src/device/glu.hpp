// The GLU activations of the dual GEMM / MoE epilogue in FP32: one definition, compiled for the
// kernels and for the host. Every operation is an IEEE-rounded FP32 add, multiply, divide or an
// explicit fmaf (the exponential too: glu_exp below, not the library expf, whose host and device
// versions differ in the last bit), so the host evaluates it bit for bit as the kernel does: given
// the same FP32 gate and up values (GPU MODE data, where every sum is exact), the kernel's output
// equals the host's FP32 evaluation exactly; against the float64 reference it is within a few
// FP32 ulps of the activation plus the products' own FP32 error.
#pragma once

#include <cmath>

#include "formats/host_device.hpp"

namespace fp4gemm::detail {

enum GluKind : int { kGluNone = 0, kGluSilu = 1, kGluSwigluOai = 2 };

// exp(x) in FP32, ~2 ulp: x = n ln2 + r (Cody-Waite, n = rint(x log2 e)), Cephes' degree-7
// polynomial for exp(r), times 2^n in two exact power-of-two steps (gradual underflow below
// 2^-126). NaN -> NaN, x > 88.72... -> +inf, x < -104 -> 0. Branch-free: the polynomial runs on x
// clamped to [-104, 88.72...] and the three ends are selected after it -- the same value as early
// returns everywhere, without divergent branches in the epilogue's loop.
// The shared core of glu_exp and glu_one_plus_exp: for an already clamped xc, y = exp(r) in
// [0.70, 1.42] with xc = n ln2 + r, and t = 1.5 * 2^23 + n, which holds the integer n in its low
// mantissa bits (t in [2^23, 2^24): ulp 1), so n's int is read from t's bits rather than converted
// (F2I runs on the slow conversion pipe). One definition keeps both callers' operations, and so
// their bits, the same.
struct GluExpCore {
  float y, t;
};

FP4GEMM_HD GluExpCore glu_exp_core(float xc) {
  const float t = fmaf(xc, 1.44269502925872802734375f, 12582912.0f);
  const float n = t - 12582912.0f;
  float r = fmaf(n, -0.693145751953125f, xc);
  r = fmaf(n, -1.428606765330187045e-06f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  const float z = r * r;
  return {fmaf(p, z, r) + 1.0f, t};
}

FP4GEMM_HD float glu_exp(float x) {
  const float xc = fminf(fmaxf(x, -104.0f), 88.72283935546875f);  // (NaN -> -104, selected away below)
  const GluExpCore c = glu_exp_core(xc);
  const float y = c.y;
  int tb;
  __builtin_memcpy(&tb, &c.t, 4);
  const int ni = tb - 0x4B400000, h = ni / 2;  // n in [-150, 128]: both halves in [-75, 64]
  auto pow2 = [](int e) {
    const unsigned bits = static_cast<unsigned>(e + 127) << 23;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  };
  const float v = y * pow2(h) * pow2(ni - h);
  return x != x ? x : x > 88.72283935546875f ? __builtin_huge_valf() : x < -104.0f ? 0.0f : v;
}

// y * 2^n of a core whose xc >= -87 (n >= -126): n added to y's exponent field, one integer add
// (glu_one_plus_exp, glu_terms_fast).
FP4GEMM_HD float glu_exp_core_scaled(const GluExpCore& c) {
  unsigned tb, yb;
  __builtin_memcpy(&tb, &c.t, 4);
  __builtin_memcpy(&yb, &c.y, 4);
  const unsigned vb = yb + ((tb - 0x4B400000u) << 23);
  float v;
  __builtin_memcpy(&v, &vb, 4);
  return v;
}

// 1 + glu_exp(x), bit for bit for every FP32 x (a host test checks all 2^32), in ~8 fewer
// operations -- the GLU divisor, evaluated once per output element. Below x = -87,
// exp(x) < 2^-125 and 1 + exp(x) rounds to 1 whatever that tiny value is, so x is clamped there
// instead of at -104 and y * 2^n (n in [-126, 128]) is one integer add to y's exponent field
// (y = exp(r) in [0.70, 1.42]: the field stays in [0, 254]; a field of 0 reads as a tiny
// subnormal, which 1 + rounds away as it did the exact value). Where glu_exp's two power-of-two
// steps give a normal result, the add gives the same bits.
FP4GEMM_HD float glu_one_plus_exp(float x) {
  const float xc = fminf(fmaxf(x, -87.0f), 88.72283935546875f);  // (NaN -> -87, selected away below)
  const float v = glu_exp_core_scaled(glu_exp_core(xc));
  return x != x ? x : x >= 88.72283935546875f ? __builtin_huge_valf() : 1.0f + v;  // (at the clamp, y rounds to 1: inf, as glu_exp)
}

// g / d for d = 1 + exp(...) >= 1 or NaN: IEEE's quotient. d = +inf (the exponential overflowed,
// half of all gates on GPU MODE's data) gives g * 0 -- g's signed zero, NaN for g = +-inf, as
// g / inf does -- without the division, whose out-of-line slow path an infinite divisor takes
// (measured: 5 % of the dual GEMM's samples).
FP4GEMM_HD float glu_div(float g, float d) {
  const bool inf = d == __builtin_huge_valf();
  const float q = g / (inf ? 1.0f : d);
  return inf ? g * 0.0f : q;
}

// Both activations as one formula: g' = min(g, limit), u' = clamp(u, -limit, limit),
// g' / (1 + exp(-(alpha g'))) * (u' + offset). swigluoai (gpt-oss) is (alpha, limit, 1); silu,
// g / (1 + exp(-g)) * u, is (1, +inf, -0): the clamps leave every value alone, 1 * g = g, and
// u + (-0) = u for every u, -0 included -- the same bits as silu's own form, with no branch on the
// kind inside the epilogue's loop. The clamps are comparisons that are false for NaN, so NaN
// passes through them (as in the float64 reference and torch.clamp).
struct GluParams {
  float alpha, limit, offset;
};

FP4GEMM_HD GluParams glu_params(int kind, float alpha, float limit) {
  if (kind == kGluSwigluOai) return {alpha, limit, 1.0f};
  return {1.0f, __builtin_huge_valf(), -0.0f};
}

// The clamped gate, the divisor and the up factor of one pair.
struct GluTerms {
  float g, d, u;
};

FP4GEMM_HD GluTerms glu_terms(float g, float u, const GluParams& p) {
  g = g > p.limit ? p.limit : g;
  // clamp(u, -limit, limit) for limit > 0 (validated), NaN passed through, as selects: the
  // two-sided conditional compiled to a branch in the epilogue's loop.
  u = u != u ? u : fminf(fmaxf(u, -p.limit), p.limit);
  return {g, glu_one_plus_exp(-(p.alpha * g)), u + p.offset};
}

// NaN-propagating min / max against a bound b that is never NaN: x's NaN passes through, as the
// comparisons of glu_terms let it. One FMNMX.NAN each on the device (PTX min.NaN / max.NaN) where
// the comparison and select took two or three; the host's form for the host tier.
FP4GEMM_HD float glu_min_nan(float x, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(b));
  return r;
#else
  return x != x ? x : std::fmin(x, b);
#endif
}
FP4GEMM_HD float glu_max_nan(float x, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(b));
  return r;
#else
  return x != x ? x : std::fmax(x, b);
#endif
}

// glu_terms in fewer operations, for the GLU epilogue's drain: the same g' and u' bits (the clamps
// as NaN-propagating min / max: limit > 0, so no zero meets its bound), and the same divisor bits
// wherever x = -(alpha g') is not NaN. The exponent is clamped from below only: for x at or above
// 88.72283935546875 (where glu_one_plus_exp returns +inf) the core's value is garbage and is selected
// away by the one comparison x < 88.72... -- strict, as glu_one_plus_exp's x >= 88.72... is the
// overflow end (at that x the core's y rounds to 1 and the add would make 2^128 a NaN). A NaN x
// gives d = +inf instead of NaN: with alpha finite (validated), x is NaN only for a NaN gate or an
// infinite one with alpha 0, and then g / d is NaN either way (NaN / NaN; +-inf * 0 from
// glu_div's infinite-divisor case). So the divisor is >= 1 or +inf, never NaN: glu_div_fast<false>.
FP4GEMM_HD GluTerms glu_terms_fast(float g, float u, const GluParams& p) {
  g = glu_min_nan(g, p.limit);
  u = glu_min_nan(glu_max_nan(u, -p.limit), p.limit);
  const float x = -(p.alpha * g);
  const float v = glu_exp_core_scaled(glu_exp_core(fmaxf(x, -87.0f)));  // (NaN -> -87: selected away below)
  return {g, x < 88.72283935546875f ? 1.0f + v : __builtin_huge_valf(), u + p.offset};
}

FP4GEMM_HD float glu_apply(float g, float u, const GluParams& p) {
  const GluTerms t = glu_terms(g, u, p);
  return glu_div(t.g, t.d) * t.u;
}

FP4GEMM_HD float glu_activate(int kind, float g, float u, float alpha, float limit) {
  return glu_apply(g, u, glu_params(kind, alpha, limit));
}

#if defined(__CUDACC__)
// g / d (d = 1 + exp(...): >= 1, +inf or NaN) without a branch, for the epilogue's loop: the
// reciprocal's Newton step and the residual correction that ptxas emits for an IEEE division
// (MUFU.RCP, 5 FMAs), whose result is the correctly rounded quotient whenever no intermediate
// leaves the normal range -- ptxas guards that with FCHK and an out-of-line slow path, a branch
// that keeps the compiler from interleaving independent activations (measured: ~550 cycles per
// activation in the GLU epilogue). Here `ok` is set instead, over a range well inside the safe one
// (|g| and d' in [2^-100, 2^100] with |g| >= 2^-60 d', so every intermediate is normal; or a zero
// result: g = +-0 or d = +inf give g * 0, IEEE's signed zero); the caller redoes the rare rest
// with the literal division. A GPU test (GluDevice) compares it with the IEEE division.
// Divisors above 2^64 (finite: silu gates in about (-88.7, -44.4)) divide as d' = d * 2^-64 in
// (1, 2^64] and the quotient is scaled back by 2^-64: both scalings are exact (d' is normal, and
// the accepted range keeps |g / d'| in [2^-60, 2^100], so the result is >= 2^-124, normal), so the
// bits are the correctly rounded g / d. Unscaled, |g| >= 2^-60 d declined every silu gate in about
// (-88.7, -45) (d > |g| 2^60) -- ~10 % of the activations on GPU MODE's data, whose gates are sums
// of thousands of products, so nearly every warp of the dual GEMM's drain took the slow branch and
// its out-of-line division (ncu source counters). Scaled, a silu gate passes down to -88.7, where
// d becomes +inf (the zero case): unscaled, e^|g| <= |g| 2^60 up to |g| = 44.4 (d = 2^64); scaled,
// d' <= 2^64 <= 16 * 2^60 <= |g| 2^60.
// The divisor is >= 1, +inf or NaN (kNanDivisor false: never NaN -- glu_terms_fast's), so d' = d or
// d 2^-64 is in [1, 2^64]: d' <= 2^100 holds, and |g| >= 2^-60 d' implies |g| >= 2^-100 -- two of
// the range's four bounds need no test (a NaN d' fails the last one).
template <bool kNanDivisor = true>
__device__ __forceinline__ float glu_div_fast(float g, float d, bool& ok) {
  const float s = d > 0x1p64f ? 0x1p-64f : 1.0f;  // (false for NaN; +inf is the zero case below)
  const float ds = d * s;
  float y0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y0) : "f"(ds));
  const float e = fmaf(-ds, y0, 1.0f);
  const float y = fmaf(y0, e, y0);
  const float q0 = __fmul_rn(g, y);
  const float r = fmaf(-ds, q0, g);
  const float q = __fmul_rn(fmaf(y, r, q0), s);
  const float ag = fabsf(g);
  const bool zero = d == __builtin_huge_valf() || (g == 0.0f && (!kNanDivisor || d == d));  // (0 / NaN is NaN)
  ok = zero || (ag <= 0x1p100f && ag >= ds * 0x1p-60f);
  return zero ? g * 0.0f : q;
}

// Two activations of the GLU epilogue's drain (epilogue.cuh, glu_drain), gate / up pairs a and b:
// glu_terms_fast, the fast division, and the IEEE one for both where either declines (rare). One
// basic block but for that branch, so the compiler interleaves the two independent chains. The
// GPU tier (GluDevice) runs this function against the host's glu_activate.
__device__ __forceinline__ float2 glu_activate_pair(float2 a, float2 b, const GluParams& p) {
  const GluTerms t0 = glu_terms_fast(a.x, a.y, p), t1 = glu_terms_fast(b.x, b.y, p);
  bool ok0, ok1;
  float o0 = glu_div_fast<false>(t0.g, t0.d, ok0) * t0.u;
  float o1 = glu_div_fast<false>(t1.g, t1.d, ok1) * t1.u;
  if (!(ok0 && ok1)) {  // outside the fast division's range: the IEEE division
    o0 = glu_div(t0.g, t0.d) * t0.u;
    o1 = glu_div(t1.g, t1.d) * t1.u;
  }
  return make_float2(o0, o1);
}
#endif

}  // namespace fp4gemm::detail
