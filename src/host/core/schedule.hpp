// The fused kernel's work list on the host: the Schedule a plan builds (build_schedule, in
// schedule.cpp) and uploads for every CTA to read. The records and rules it is made of are shared
// with the device: device/schedule.hpp.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "device/schedule.hpp"

namespace fp4gemm::detail {

struct ScheduleShape {  // what the schedule needs of a group
  int m, n, k;
};

struct Schedule {
  std::vector<TileDesc> tiles;
  std::vector<WorkPiece> pieces;
  std::vector<int> cta_begin;     // pieces of CTA i: [cta_begin[i], cta_begin[i+1])
  std::vector<int> cta_class;     // width class (mainloop instantiation) of CTA i
  std::vector<int> act_row0;      // per group: first row in the activation workspace
  int num_ctas = 0;               // >= 1 per width class present (can exceed max_ctas only
                                  // when there are more classes than CTAs; then no split-K)
  int num_slots = 0;              // writer partial buffers needed
  int total_act_rows = 0;
  int max_kblocks = 0;
  double imbalance = 0;           // est_makespan / mean CTA cost (hand-offs included)
  double est_makespan = 0;        // max over CTAs of k-block costs + hand-off charges (see split_auto)
  // Weight rows of the narrow (<= 128-token) tiles: 256 when there are at least as many tiles
  // as CTAs that way, else 128 (a small problem would otherwise be cut into many split-K pieces
  // whose FP32 hand-off costs more than the wider wgmma gains: 35 vs 20 us measured on H200).
  int narrow_rows = 256;
  int max_tile_tokens = SchedulePolicy::kMaxTokens;  // the token-tile width it was built with
  bool split() const { return num_slots > 0; }  // some tile is cut between CTAs (stream-K pieces)
};

// Token tiles of a group by token_split (max_tokens first rounded down to a multiple of 8 and
// clamped to [8, kMaxTokens]). Returns (tok0, ntok) pairs.
std::vector<std::pair<int, int>> token_tiles(int m, int max_tokens = SchedulePolicy::kMaxTokens);

// Builds the schedule for up to `max_ctas` CTAs (fewer when there is less work).
Schedule build_schedule(std::span<const ScheduleShape> groups, int max_ctas,
                        const SchedulePolicy& policy = {});

}  // namespace fp4gemm::detail
