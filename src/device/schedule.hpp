// Work decomposition of the fused kernel, built on the host per plan and read by every CTA.
//
// A tile is 128 weight rows (the wgmma M side, "swap-AB") x up to 256 tokens of one group. Its
// K loop is cut into 64-wide k-blocks. The (tile, k-block) sequence is split into one contiguous,
// cost-balanced range per CTA (stream-K): a tile cut between CTAs is finished by the CTA holding
// its first k-block (the "owner"), which adds the other parts' FP32 partials in a fixed order, so
// results are deterministic. Owner parts come last in a CTA's range and writer parts first, so
// no CTA ever waits on work queued behind its own.
//
// The kernel compiles one mainloop per token-width class (ceil(tokens / 16): wgmma's N is part
// of the instruction) and a CTA runs exactly one class: ptxas serialises every wgmma of the
// kernel when a loop carries state across the class dispatch (C7512, measured). So tiles are
// bucketed by class, each bucket gets CTAs in proportion to its cost, and stream-K runs inside
// the bucket.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fp4gemm::detail {

struct TileDesc {
  int group;
  int row0;        // first weight row (n) of the tile
  int tok0;        // first token (m) of the tile, within the group
  int ntok;        // tokens in the tile, 1..256
  int act_row0;    // row of token tok0 in the stacked activation workspace
  int kblocks;     // ceil(K / 64)
  int writers;     // pieces other than the owner (0: the tile is not split)
  int first_slot;  // partial-buffer slot of the first writer; writers use consecutive slots
};

struct WorkPiece {
  int tile;
  int kb_begin, kb_end;  // k-block range [begin, end)
  int slot;              // >= 0: a writer storing its FP32 partial in this slot; -1: owner/whole
};

struct ScheduleShape {  // what the schedule needs of a group
  int m, n, k;
};

struct SchedulePolicy {
  static constexpr int kRowsPerTile = 128;
  static constexpr int kMaxTokens = 256;
  static constexpr int kBlockK = 64;
  static constexpr int kWidthClasses = kMaxTokens / 16;  // mainloop instantiations
  // Cost of one k-block of a tile = tokens rounded to 8 + this overhead (dequantising the 128
  // weight rows and the pipeline costs that do not shrink with the token count).
  int kblock_overhead = 240;  // tuned on H200 (PERF.md v4, v5): 32 -> 160 -> 240 as the pre-pass got cheaper
  bool split_k = true;  // false: whole tiles only (contiguous ranges cut at tile boundaries)
};

struct Schedule {
  std::vector<TileDesc> tiles;
  std::vector<WorkPiece> pieces;
  std::vector<int> cta_begin;     // pieces of CTA i: [cta_begin[i], cta_begin[i+1])
  std::vector<int> act_row0;      // per group: first row in the activation workspace
  int num_ctas = 0;               // >= 1 per width class present (can exceed max_ctas only
                                  // when there are more classes than CTAs; then no split-K)
  int num_slots = 0;              // writer partial buffers needed
  int total_act_rows = 0;
  int max_kblocks = 0;
  double imbalance = 0;           // max CTA cost / mean CTA cost
};

// The mainloop instantiation (1..16) that runs a tile of `ntok` tokens: N = 16 * class.
constexpr int width_class(int ntok) { return (ntok + 15) / 16; }

// Token tiles of a group: ceil(m / 256) tiles of near-equal size, each a multiple of 8 except
// possibly the last. Returns (tok0, ntok) pairs.
std::vector<std::pair<int, int>> token_tiles(int m);

// Builds the schedule for up to `max_ctas` CTAs (fewer when there is less work).
Schedule build_schedule(std::span<const ScheduleShape> groups, int max_ctas,
                        const SchedulePolicy& policy = {});

}  // namespace fp4gemm::detail
