// Device-visible per-group arguments (the pointer-array plan: one per group; the MoE plan: one per
// expert), copied to the plan's workspace once at plan time.
#pragma once

#include <cstdint>

#include "formats/host_device.hpp"

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

// MoeScheduleParams::q_format of a GLU plan whose bf16 output is the next GEMM's activation
// workspace (kGluKOrder; the layer's W4A16 hand-over, host/moe_layer.cpp): every 64-column block
// in the wgmma k order the pre-pass writes (device/prepass.cuh: 16-byte chunk c, 16-bit slot
// 2i + h holds column 8 (2i + c % 2) + c / 2 + 4h; wgmma_k_source_mxfp4), so that GEMM needs no
// pre-pass. (0: plain output; 1, 2: FP4-quantised output, the Format + 1.)
constexpr int kGluKOrder = 3;
// Its two halves (device/epilogue.cuh; the host tier checks them against wgmma_k_source_mxfp4):
// the buffer slot at which store_tile_glu stages column warp * 8 + q of its warpgroup's 32, and the
// k-order column of glu_drain's thread cp minus the plain one (col0 + 2cp; col0 a multiple of 32).
FP4GEMM_HD constexpr int glu_k_order_slot(int warp, int q) { return 2 * (4 * (q % 4) + 2 * (warp % 2) + warp / 2) + q / 4; }
FP4GEMM_HD constexpr int glu_k_order_shift(int col0, int cp) { return 4 * (cp / 2) - 28 * ((col0 / 32) % 2); }

}  // namespace fp4gemm::detail
