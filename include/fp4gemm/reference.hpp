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
};
void moe_gemm(const MoeHostProblem& problem, int threads = 0);

// Output element conversions used by the reference and the checks (round to nearest even).
std::uint16_t float_to_half_bits(double x);
std::uint16_t float_to_bf16_bits(double x);
double half_bits_to_double(std::uint16_t h);
double bf16_bits_to_double(std::uint16_t h);
// Reads element i of an output buffer of `type` as double.
double load_output(const void* c, OutType type, std::int64_t i);

}  // namespace fp4gemm::reference
