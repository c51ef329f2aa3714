// The device error word of an MoE plan (host + device): what the kernels report about bad routing
// data, and what MoeGemm::check() reads back and names.
#pragma once

namespace fp4gemm::detail::sm90 {

// The bits of everything that was wrong, and the place of the first report (its kind, the offset
// / count index or the row, the bad value).
struct MoeErrorWord {
  int bits;
  int kind;   // the bit of the first report, 0 while there is none
  int index;  // expert_offsets / expert_counts index, or gather_index row
  int value;  // the bad value (offset, count or gather index)
};
constexpr int kMoeBadOffsets = 1, kMoeOverCapacity = 2, kMoeBadCount = 4, kMoeBadGather = 8, kMoeBadScaleCode = 16;

}  // namespace fp4gemm::detail::sm90
