// Internal: where a scale byte lives in the linear and the blocked layout (host + device; the one
// copy of the blocked-offset formula, SPEC §2).
//
// Blocked layout (cuBLASLt / torch._scaled_mm / GPU MODE "reordered"): a [rows, cols] scale
// matrix, rows padded to 128 and columns to 4, is cut into 512-byte atoms of 128 rows x 4
// columns, stored atom-row-major ((row / 128) * ceil(cols / 4) + col / 4). Inside an atom, the
// 32 lines of 16 bytes hold rows r, r + 32, r + 64, r + 96 (line r % 32), 4 columns each:
// scale (r, c) of the atom is byte (r % 32) * 16 + (r / 32) * 4 + c.
//
// The functions are templates over the index type so that device code keeps its 32-bit
// arithmetic where the indices fit (the kernels), and host code its 64-bit one; the atom index
// is always formed in 64 bits.
#pragma once

#include <cstdint>

#include "fp4gemm/fp4gemm.hpp"  // ScaleLayout

#include "formats/host_device.hpp"

namespace fp4gemm::formats::detail {

inline constexpr int kBlockedAtomRows = 128;
inline constexpr int kBlockedAtomCols = 4;
inline constexpr int kBlockedAtomBytes = 512;

// Byte of scale (r, c) inside its atom: r in [0, 128), c in [0, 4).
template <typename I>
FP4GEMM_HD constexpr I blocked_atom_offset(I r, I c) {
  return (r % 32) * 16 + (r / 32) * 4 + c;
}

// The row (in [0, 128)) of the scales in 4-byte word w (in [0, 128)) of an atom: the inverse of
// blocked_atom_offset(r, 0) / 4, whose 4 bytes are that row's 4 columns.
template <typename I>
FP4GEMM_HD constexpr I blocked_atom_row_of_word(I w) {
  return (w % 4) * 32 + w / 4;
}

// Byte offset of scale (row, col) in the blocked layout of a [rows, cols] scale matrix.
template <typename I>
FP4GEMM_HD constexpr std::int64_t blocked_offset(I row, I col, I cols) {
  const I col_blocks = (cols + 3) / 4;
  const std::int64_t atom = static_cast<std::int64_t>(row / 128) * col_blocks + col / 4;
  // = atom * 512 + blocked_atom_offset(row % 128, col % 4), written out: the same SASS as the
  // kernels' earlier copies.
  return atom * kBlockedAtomBytes + (row % 32) * 16 + ((row % 128) / 32) * 4 + col % 4;
}

// Byte offset of scale (row, col) of a [rows, cols] scale matrix in `layout` (linear: row-major).
template <typename I>
FP4GEMM_HD constexpr std::int64_t scale_offset(ScaleLayout layout, I row, I col, I cols) {
  if (layout == ScaleLayout::linear) return static_cast<std::int64_t>(row) * cols + col;
  return blocked_offset(row, col, cols);
}

}  // namespace fp4gemm::formats::detail
