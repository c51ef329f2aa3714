// The activation pre-pass's arguments (device/prepass.cuh holds its kernels): plain structs the
// plans fill on the host and the kernels read as their parameters.
#pragma once

#include <cstdint>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail::sm90 {

// The pre-pass's arguments, passed by value: the first kInline groups' fields live in the
// kernel's parameter space, so a block's first global load is its own FP4 data (after the L2
// flush a group-table load first cost a dependent DRAM round trip, ~0.7 us, on every run).
struct PrepassGroup {
  const std::uint8_t* a;
  const std::uint8_t* sfa;
  std::int64_t lda;  // bytes
  int m, k;
  int act_row0;  // first row of the group in the activation workspace
  int pad_;
};
// The pre-pass sees only the groups with work (M > 0): an empty group, whatever its other fields
// hold, gets no block. Blocks loop over groups in steps of gridDim.y (<= 65535), so any number of
// groups fits the grid.
struct PrepassArgs {
  static constexpr int kInline = 32;
  static constexpr int kMaxGridY = 65535;
  PrepassGroup inline_groups[kInline];
  int inline_count;             // groups [0, inline_count) are in inline_groups (<= kInline)
  int num_groups;               // groups with M > 0
  const PrepassGroup* groups;   // all of them (the pre-pass reads those past inline_count)
  void* out;
  int out_cols;
  ScaleLayout layout;
  // The plan's metadata (schedule, tensor maps, group table: one allocation), prefetched into
  // L2 by the pre-pass so that the GEMM producer's chain of dependent loads to its first TMA
  // (CTA range -> piece -> tile -> group -> tensor map) hits L2 instead of DRAM.
  const std::uint8_t* meta;
  int meta_lines;  // 128-byte lines
  // Routed (MoE) activations, device data read at run time (kRouted modes only): only rows
  // [*first_row, *end_row) are read (null: from 0 / to the group's rows; clamped to them); with
  // `gather`, row m reads source row gather[m], which must lie in [0, gather_rows) (else error bit
  // kMoeBadGather and the row is skipped).
  const int* first_row;
  const int* end_row;
  const int* slot_counts;  // masked layout: row m is used iff m % slot_rows < slot_counts[m / slot_rows]
  int slot_rows;
  const int* gather;
  int gather_rows;
  int* error;  // MoeErrorWord
};
static_assert(sizeof(PrepassArgs) <= 4096, "kernel parameters beyond 4 KB");

// What the pre-pass reads: the pointer-array plan's FP4 groups, or one routed (MoE) stack of FP4
// rows or of bf16 rows (W4A16: the pre-pass only reorders them into wgmma K order).
enum class PrepassSource { grouped_fp4, routed_fp4, routed_bf16 };

// Linear weight scales whose rows are not 16-byte multiples (K not a multiple of 16 scale
// blocks) cannot be a TMA source; the plan then converts them to the blocked layout each run.
struct ScaleConversion {
  const std::uint8_t* src;  // linear [rows][cols]
  std::uint8_t* dst;        // blocked, rows padded to 128, cols to 4
  int rows, cols;
};

}  // namespace fp4gemm::detail::sm90
