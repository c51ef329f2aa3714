// The producer's scale warp, per stage: where a piece's weight scales come from and how they reach
// the stage's blocked atoms (the consumers read one layout). Three sources:
//   BlockedBulk    scales already in the blocked layout (the user's, the plan's conversion's, an
//                  MoE plan's): one bulk copy per half of the stage's atoms, by lane 0;
//   LinearGather   a pointer-array plan's linear scales: each lane gathers 4 rows' 4-byte words
//                  into the atoms (cp.async), rows past N zero-filled;
//   PairedDual     a dual (GLU) plan's gate / up scales, gathered in the kernel's paired row order.
// Which one runs is the producer's choice per piece (fused_kernel.cuh); each completes the stage's
// full barrier in its own way.
#pragma once

#include <cstdint>

#include "device/kernel_config.cuh"
#include "device/ptx/ptx.cuh"
#include "fp4gemm/fp4gemm.hpp"
#include "formats/scale_layout.hpp"

namespace fp4gemm::detail::sm90 {

// What every source needs of the stage and the piece.
struct ScaleStage {
  std::uint8_t* atoms;   // the stage's scale atoms in shared memory, [half][kbps]
  std::uint64_t* full;   // full[0]: the stage's barrier (a stage pair's one barrier)
  int kb, kb_end;        // the stage's first k-block, the piece's end
  int halves, loaded;    // the tile's 128-row halves, the halves this piece loads
  int lane;
};

struct BlockedBulk {
  // The atoms of the stage's k-blocks inside the piece, [half][kbps] (a row block's atoms are
  // consecutive in the blocked layout): NVFP4 one per k-block, MXFP4 one per two k-blocks (a pair
  // from an odd k-block spans two).
  template <int kbps, int kColsPerKb>
  static __device__ __forceinline__ void issue(const ScaleStage& s, const std::uint8_t* sblk, int row0, int col_blocks) {
    using C = KernelConfig;
    if (s.lane == 0) {
      const int c0 = s.kb * kColsPerKb / 4;
      const int atoms = kbps > 1 ? (min(s.kb + kbps, s.kb_end) - 1) * kColsPerKb / 4 - c0 + 1 : 1;
      ptx::mbarrier_arrive_expect_tx(&s.full[0], s.loaded * atoms * C::kScaleAtomBytes);
      for (int h = 0; h < s.loaded; ++h)
        ptx::bulk_load(s.atoms + h * kbps * C::kScaleAtomBytes,
                       sblk + (static_cast<std::int64_t>(row0 / 128 + h) * col_blocks + c0) * C::kScaleAtomBytes,
                       atoms * C::kScaleAtomBytes, &s.full[0]);
    }
  }
};

struct PairedDual {
  // Kernel row p = row0 + 128h + 32q + lane is source row (row0 + 128h + 32q) / 2 + 8 (lane / 16) +
  // lane % 8 of the map's first (lane % 16 < 8: gate) or second half (up); its 4 columns of this
  // k-block are one aligned word in either layout.
  template <int kColsPerKb>
  static __device__ __forceinline__ void issue(const ScaleStage& s, const std::uint8_t* gate, const std::uint8_t* up,
                                               int row0, int rows, int cols, ScaleLayout layout) {
    using C = KernelConfig;
    if (s.lane == 0) ptx::mbarrier_arrive(&s.full[0]);
    const std::uint8_t* half_src = (s.lane & 8) ? up : gate;
    const int r_lane = 8 * (s.lane / 16) + s.lane % 8, col4 = s.kb * kColsPerKb / 4 * 4;
    std::uint8_t* dst = s.atoms + s.lane * 16;
#pragma unroll 1
    for (int h = 0; h < s.halves; ++h) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int srow = (row0 + 128 * h + 32 * q) / 2 + r_lane;
        const bool valid = 2 * srow < rows;
        const std::int64_t off = layout == ScaleLayout::linear ? static_cast<std::int64_t>(srow) * cols + col4
                                                               : formats::detail::blocked_offset<int>(srow, col4, cols);
        ptx::cp_async_4(dst + h * C::kScaleAtomBytes + 4 * q, valid ? half_src + off : gate, valid);
      }
    }
  }
};

struct LinearGather {
  // Row r's 4 columns go to byte (r % 32) * 16 + (r / 32) * 4 of its half's atom, so lane l fills
  // bytes 16l..16l+15 (rows l + 32q) of each; lane_src: row row0 + lane's scales, row32: 32 rows'
  // bytes, valid_rows bit 4h + q: row row0 + 128h + 32q + lane exists (else zero-filled).
  template <int kColsPerKb>
  static __device__ __forceinline__ void issue(const ScaleStage& s, const std::uint8_t* lane_src, std::int64_t row32,
                                               unsigned valid_rows, const std::uint8_t* fallback) {
    using C = KernelConfig;
    if (s.lane == 0) ptx::mbarrier_arrive(&s.full[0]);
    const std::uint8_t* src = lane_src + s.kb * kColsPerKb / 4 * 4;
    std::uint8_t* dst = s.atoms + s.lane * 16;
#pragma unroll 1
    for (int h = 0; h < s.halves; ++h) {
#pragma unroll
      for (int q = 0; q < 4; ++q, src += row32) {  // rows 128h + 32q + lane of atom h
        const bool valid = (valid_rows >> (4 * h + q)) & 1u;
        ptx::cp_async_4(dst + h * C::kScaleAtomBytes + 4 * q, valid ? src : fallback, valid);
      }
    }
  }
};

}  // namespace fp4gemm::detail::sm90
