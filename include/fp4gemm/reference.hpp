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

// Output element conversions used by the reference and the checks (round to nearest even).
std::uint16_t float_to_half_bits(double x);
std::uint16_t float_to_bf16_bits(double x);
double half_bits_to_double(std::uint16_t h);
double bf16_bits_to_double(std::uint16_t h);
// Reads element i of an output buffer of `type` as double.
double load_output(const void* c, OutType type, std::int64_t i);

}  // namespace fp4gemm::reference
