// Device-visible per-group arguments (the pointer-array plan: one per group; the MoE plan: one per
// expert), copied to the plan's workspace once at plan time.
#pragma once

#include <cstdint>

namespace fp4gemm::detail {

struct GroupParams {
  int m, n, k;
  int pad_;
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
  int pad2_;
};

}  // namespace fp4gemm::detail
