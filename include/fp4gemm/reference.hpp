// Exact CPU reference for the grouped GEMM (float64 accumulation), host data.
#pragma once

#include <cstdint>
#include <span>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::reference {

// One group's host buffers, in the same layouts as fp4gemm::GroupDesc.
struct HostGroup {
  int m = 0, n = 0, k = 0;
  const std::uint8_t* a = nullptr;
  std::int64_t lda = 0;  // bytes
  const std::uint8_t* b = nullptr;
  std::int64_t ldb = 0;  // bytes
  const std::uint8_t* sfa = nullptr;
  const std::uint8_t* sfb = nullptr;
  void* c = nullptr;     // output, out_type elements, row stride ldc
  std::int64_t ldc = 0;  // elements
  float alpha = 1.0f;
};

// C = alpha * dq(A) dq(B)^T: exact dequantisation, float64 accumulation, alpha applied in
// float64, rounded once (nearest even) to the output type. NaN propagates (any NaN scale in a
// block that contributes to an element makes it NaN, as in IEEE arithmetic). Multithreaded over
// rows; threads <= 0 uses the hardware concurrency. Only C[0:M, 0:N] is written.
void grouped_gemm(std::span<const HostGroup> groups, Format format, ScaleLayout layout,
                  OutType out_type, int threads = 0);

// ---- dual GEMM with a gated activation (SwiGLU; issue 21, GPU MODE nvfp4_dual_gemm) ----------

// One group of the dual GEMM: A [M, K] shared by the gate weight B1 [N, K] and the up weight
// B2 [N, K] (same layouts as HostGroup; the shape is shared by construction, the strides and
// buffers are per operand). alpha1 / alpha2 are the per-tensor global scales of the two products.
struct DualHostGroup {
  int m = 0, n = 0, k = 0;
  const std::uint8_t* a = nullptr;
  std::int64_t lda = 0;  // bytes
  const std::uint8_t* b1 = nullptr;  // gate
  std::int64_t ldb1 = 0;             // bytes
  const std::uint8_t* b2 = nullptr;  // up
  std::int64_t ldb2 = 0;             // bytes
  const std::uint8_t* sfa = nullptr;
  const std::uint8_t* sfb1 = nullptr;
  const std::uint8_t* sfb2 = nullptr;
  void* c = nullptr;     // output [M, N], out_type elements, row stride ldc
  std::int64_t ldc = 0;  // elements
  float alpha1 = 1.0f, alpha2 = 1.0f;
};

enum class Activation {
  silu,       // silu(g) * u, silu(g) = g / (1 + exp(-g))
  swigluoai,  // gpt-oss: g' = min(g, limit), u' = clamp(u, -limit, limit),
              // g' * sigmoid(alpha * g') * (u' + 1), sigmoid(x) = 1 / (1 + exp(-x))
};

struct DualActivation {
  Activation kind = Activation::silu;
  // swigluoai only (gpt-oss's values); alpha must be finite, limit > 0 (+inf: no clamping).
  // kSwigluAlpha / kSwigluLimit as decimals: the double reference takes gpt-oss's 1.702 itself.
  double swiglu_alpha = 1.702;
  double swiglu_limit = 7.0;
};

// For each group: g = alpha1 * (dq(A) dq(B1)^T), u = alpha2 * (dq(A) dq(B2)^T), then
// C = act(g, u), rounded once (nearest even) to the output type.
// - alpha multiplies each product BEFORE the activation, as a per-tensor global scale (NVFP4's
//   weight_scale_2 * input_scale) must: it is part of the value the activation sees.
// - "Exact": each product is computed exactly as grouped_gemm computes it (exact dequantisation,
//   exact block sums, float64 additions in K order; the same code path), times alpha in float64.
//   The activation is evaluated in float64 by the formulas above (std::exp), then rounded once:
//   the result is the correctly rounded value of act(g, u) up to float64's own error (a few
//   2^-53 relative), so it can differ from it only when that value lies within ~1e-15 relative
//   of a rounding boundary of the output type. On GPU MODE's data (values {0, +-0.5, +-1, +-1.5},
//   scales {1, 2}) g and u are exact in FP32 too, so an FP32 kernel sees the same g and u.
// - g and u are always finite or NaN in float64 (|products| stay far below 2^1024 for every
//   scale code and float alpha), so the output is NaN exactly where g or u is NaN, i.e. where a
//   NaN scale contributes to either product (the clamps of swigluoai keep NaN); an output past
//   the largest finite value of the output type rounds to +-inf.
// - The output buffer may not alias the inputs. Only C[0:M, 0:N] is written. Memory: two float64
//   M x N buffers per group. Errors (fp4gemm::Error) name "groups[i].<field>" (b1, ldb2, sfb2,
//   ...) or "activation.swiglu_alpha" / "activation.swiglu_limit".
void dual_gemm(std::span<const DualHostGroup> groups, Format format, ScaleLayout layout,
               OutType out_type, const DualActivation& activation = {}, int threads = 0);

// The MoE grouped GEMM (fp4gemm::MoeGemm) on host data. Expert e owns rows [offsets[e],
// offsets[e+1]) (contiguous) or e * capacity + [0, counts[e]) (masked) of C; row r of C reads row
// src(r) of A (gather[r] when given, else r). FP4 activations: A packed e2m1 [*, K/2] (row stride
// lda bytes) with linear scales [*, K/vec] (format's vec); bf16 activations (a_scales null): A is
// [*, K] bf16 bits with row stride lda bytes. W[e] is [N, K/2] at w + e * w_expert_stride bytes
// (row stride ldw) with its scales in `w_layout` at w_scales + e * w_scale_expert_stride bytes.
// The products are exact; sums in float64; alpha[e] (or 1) applied in float64; one rounding.
// Rows outside every expert are not written. The routing must be valid (host data: checked,
// throws fp4gemm::Error naming the argument otherwise).
struct MoeHostProblem {
  int experts = 0, n = 0, k = 0;
  Format format = Format::nvfp4;
  bool bf16_activations = false;
  const std::uint8_t* a = nullptr;
  std::int64_t lda = 0;
  const std::uint8_t* a_scales = nullptr;
  int a_rows = 0;  // rows of A (for gather / bounds)
  const std::uint8_t* w = nullptr;
  std::int64_t ldw = 0, w_expert_stride = 0;
  const std::uint8_t* w_scales = nullptr;
  ScaleLayout w_layout = ScaleLayout::linear;
  std::int64_t w_scale_expert_stride = 0;
  const float* alpha = nullptr;  // [experts] or null
  const int* offsets = nullptr;  // contiguous: [experts + 1]
  const int* counts = nullptr;   // masked: [experts]
  int capacity = 0;              // masked: rows per expert slot
  const int* gather = nullptr;   // optional: [rows]
  void* c = nullptr;
  std::int64_t ldc = 0;
  OutType out_type = OutType::bf16;
  // GLU epilogue (MoeGemm with MoeOptions::epilogue): n is the output width I; W holds the gate
  // and up rows as `gate_up` says (0 stacked: 2I rows, gate first; 1 interleaved: gate 2i, up
  // 2i + 1; 2 separate: I rows in w and I in w_up, same strides, scales in w_up_scales), and
  // C[:, i] = act(alpha[e] * gate_i, alpha_up[e] * up_i) (alpha_up null: alpha), from the exact
  // products. glu_fp32 = false: the activation in float64 (DualActivation's formulas), rounded
  // once. glu_fp32 = true: the kernel's epilogue, i.e. each product times its alpha rounded to
  // FP32 and the activation evaluated in FP32 by the kernel's own code (src/device/glu.hpp) --
  // what the kernel must give bit for bit wherever its FP32 accumulators are exact (GPU MODE data).
  const DualActivation* glu = nullptr;
  int gate_up = 0;
  const std::uint8_t* w_up = nullptr;
  const std::uint8_t* w_up_scales = nullptr;
  const float* alpha_up = nullptr;
  bool glu_fp32 = false;
  // GLU: a per-expert bias of W's rows, [experts, 2I] (gate and up as gate_up says; separate: the
  // I gate rows, then the I up rows), or null: gate_i = alpha * product + bias (FP32: one fma of
  // the FP32-rounded product with glu_fp32; float64 otherwise), likewise up_i.
  const float* bias = nullptr;
};
void moe_gemm(const MoeHostProblem& problem, int threads = 0);

// The expert layer (fp4gemm::MoeLayer) on the host, step by step as the device runs it, each step
// exact and rounded as the device rounds: the stable routing sort; W4A4: the tokens quantised by
// formats::quantize (global scale a1_scale), W4A16: the bf16 tokens as given; GEMM1 with the FP32
// GLU epilogue (moe_gemm's glu_fp32) and alphas fl(w13_alpha[e] * a1_scale) -> bf16; W4A4: the
// intermediate quantised (a2_scale); GEMM2, alpha fl(w2_alpha[e] * a2_scale), exact products
// rounded once to bf16; the combine: acc = fma(w[t, j], y, acc) in FP32 over j in order, ids
// outside [0, E) skipped, rounded once to bf16. The device's FP32 sums differ from these exact
// ones only where they are inexact (never on GPU MODE data for GEMM1; GEMM2's within SPEC §3).
struct MoeLayerHostProblem {
  int experts = 0, hidden = 0, inter = 0, topk = 0, tokens = 0;
  Format format = Format::nvfp4;
  bool bf16_activations = false;   // W4A16 (mxfp4 weights)
  DualActivation act{};            // silu or swigluoai
  int gate_up = 0;                 // 0: w13 stacked (gate rows, then up), 1: interleaved
  const std::uint8_t* w13 = nullptr;         // [E, 2I, H/2], dense
  const std::uint8_t* w13_scales = nullptr;  // linear [E, 2I, H/vec]
  const std::uint8_t* w2 = nullptr;          // [E, H, I/2], dense
  const std::uint8_t* w2_scales = nullptr;   // linear [E, H, I/vec]
  const float* w13_alpha = nullptr;          // [E] or null (1)
  const float* w13_alpha_up = nullptr;       // [E] or null (w13_alpha)
  const float* w2_alpha = nullptr;           // [E] or null (1)
  // Biases (gpt-oss), or null: w13_bias [E, 2I] in w13's row order, added before the activation
  // (MoeHostProblem::bias); w2_bias [E, H], added to each pair's bf16 y row in FP32 in the combine
  // (moe_combine's bias).
  const float* w13_bias = nullptr;
  const float* w2_bias = nullptr;
  float a1_scale = 1.0f, a2_scale = 1.0f;
  const std::uint16_t* x = nullptr;          // the hidden states, bf16 bits [T, ld_x]
  std::int64_t ld_x = 0;
  // W4A4 alternative to x: the tokens already quantised (packed [T, H/2], linear scales [T, H/vec]).
  const std::uint8_t* x_packed = nullptr;
  const std::uint8_t* x_scales = nullptr;
  const std::int64_t* topk_ids = nullptr;    // [T, topk]
  const float* topk_weights = nullptr;       // [T, topk]
  std::uint16_t* out = nullptr;              // bf16 bits [T, ld_out]
  std::int64_t ld_out = 0;
};
void moe_layer(const MoeLayerHostProblem& problem, int threads = 0);

// The layer's combine alone (also expert parallelism's last step): out[t, h] = bf16(acc) with
// acc = fma(w[t, j], y[t * k + j, h] + bias[e, h], acc) over j = 0..k-1 in order, from 0, skipping
// ids outside [0, experts) (e = the pair's id; the sum in FP32; bias null: y alone). y: bf16 bits
// [T * k, ld_y], one row per (token, slot); out: bf16 bits [T, ld_out]; bias [experts, hidden].
void moe_combine(const std::uint16_t* y, std::int64_t ld_y, const float* weights, const std::int64_t* ids, int tokens,
                 int k, int experts, int hidden, std::uint16_t* out, std::int64_t ld_out,
                 const float* bias = nullptr);

// act(g, u) of a DualActivation in float64 (the dual GEMM reference's formulas).
double activate(const DualActivation& act, double g, double u);

// Output element conversions used by the reference and the checks (round to nearest even).
std::uint16_t float_to_half_bits(double x);
std::uint16_t float_to_bf16_bits(double x);
double half_bits_to_double(std::uint16_t h);
double bf16_bits_to_double(std::uint16_t h);
// Reads element i of an output buffer of `type` as double.
double load_output(const void* c, OutType type, std::int64_t i);

}  // namespace fp4gemm::reference
