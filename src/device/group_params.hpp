// Device-visible per-group arguments (the pointer-array plan: one per group; the MoE plan: one per
// expert), copied to the plan's workspace once at plan time.
#pragma once

#include <cstdint>

namespace fp4gemm::detail {

struct GroupParams {
  int m, n, k;
  // Pointer-array dual GEMMs (Options::epilogue): n counts the kernel's weight rows (2N, 8 gate
  // rows then their 8 up rows per 16, params.cuh); glu_swap = 1 when the weight map's first 8
  // rows of each 16 are the up rows (b_up below b). The MoE plan keeps these in MoeScheduleParams.
  int glu_swap;
  const std::uint8_t* a;
  std::int64_t lda;  // bytes
  const std::uint8_t* b;
  std::int64_t ldb;  // bytes
  const std::uint8_t* sfa;
  const std::uint8_t* sfb;
  void* c;
  std::int64_t ldc;  // elements
  const float* alpha_device;  // nullable
  float alpha;
  float alpha_up;                 // dual GEMMs: the up rows' alpha
  const float* alpha_up_device;   // nullable, overrides alpha_up
};

}  // namespace fp4gemm::detail
