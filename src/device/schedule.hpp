// Work decomposition of the fused kernel, built on the host per plan and read by every CTA.
//
// A tile is 128 or 256 weight rows (the wgmma M side, "swap-AB") x up to 256 tokens of one
// group: narrow tiles (<= 128 tokens) take 256 rows, wide ones 128 (tile_rows). Its K loop is
// cut into 64-wide k-blocks. The (tile, k-block) sequence is split into one contiguous,
// cost-balanced range per CTA (stream-K): a tile cut between CTAs is finished by the CTA holding
// its first k-block (the "owner"), which adds the other parts' FP32 partials in a fixed order, so
// results are deterministic. Owner parts come last in a CTA's range and writer parts first, so
// no CTA ever waits on work queued behind its own. When the hand-offs would cost more than the
// balance gains, the plan runs whole tiles instead (SchedulePolicy::split_auto).
//
// The kernel compiles one mainloop per token-width class (ceil(tokens / 16): wgmma's N is part
// of the instruction) and a CTA runs exactly one class: ptxas serialises every wgmma of the
// kernel when a loop carries state across the class dispatch (C7512, measured). So tiles are
// bucketed by class, each bucket gets CTAs in proportion to its cost, and stream-K runs inside
// the bucket.
//
// This header holds what host and device share (the tile and piece records, the policy and the
// tiling rules, all constexpr); the host-only work list and its builder are in
// host/core/schedule.hpp.
#pragma once

#include <cstdint>

namespace fp4gemm::detail {

struct TileDesc {
  int group;
  int row0;        // first weight row (n) of the tile (tile_rows(ntok) rows from here)
  int tok0;        // first token (m) of the tile, within the group
  int ntok;        // tokens in the tile, 1..256
  int act_row0;    // row of token tok0 in the stacked activation workspace
  int kblocks;     // ceil(K / 64)
  int writers;     // pieces other than the owner (0: the tile is not split)
  int first_slot;  // partial-buffer slot of the first writer; writers use consecutive slots
  // >= 0: the tile's epilogue is shared (SchedulePolicy::share_epilogue; tiles of one writer):
  // the owner also writes its partial, to this slot, and finishes the first half of the tile's
  // output passes, the writer the rest; -1: the owner finishes it.
  int owner_slot;
};

struct WorkPiece {
  int tile;
  int kb_begin, kb_end;  // k-block range [begin, end)
  int slot;              // >= 0: a writer storing its FP32 partial in this slot; -1: owner/whole
};


struct SchedulePolicy {
  static constexpr int kMaxTokens = 256;     // wgmma N <= 256
  static constexpr int kNarrowTokens = 128;  // tiles up to this width take 256 weight rows
  static constexpr int kBlockK = 64;
  static constexpr int kWidthClasses = kMaxTokens / 16;  // mainloop instantiations
  // Cost model (relative units, ~2.2 SM cycles each): a k-block of a tile costs fixed +
  // per_token * tokens (rounded up to 8), with separate figures for 128-row (wide) and 256-row
  // (narrow) tiles; the owner of a tile also pays its epilogue, epilogue_per_elem * rows * tokens.
  // Defaults: a fit of the trace build's cycles per k-block of every tile shape in seed case 1
  // (H200: wide 815 / 862 / 1063 cycles at 160 / 176 / 248 tokens, narrow 1044 / 1100 / 1146 /
  // 1284 at 64 / 80 / 96 / 128). An earlier model (200 + n, 340 + 2 n) charged the wide tiles too
  // little per token, so case 1's 248-token bucket got too few CTAs (-4 % with the fit). The
  // epilogue term (0.05 per element) pays off with the hand-off-aware packing (balance_handoffs).
  double wide_fixed = 165, wide_per_token = 1.28;
  double narrow_fixed = 365, narrow_per_token = 1.7;
  double epilogue_per_elem = 0.05;
  // Width classes are rounded up to a multiple of this (1, 2, 4 or 8): fewer buckets (whole
  // CTAs each) for up to 16 * (class_round - 1) padded token columns per tile.
  int class_round = 1;
  bool split_k = true;  // false: whole tiles only (contiguous ranges cut at tile boundaries)
  // With split_k: build the stream-K and the whole-tile schedule and keep the one with the
  // smaller estimated makespan (Schedule::est_makespan), which charges every split-K hand-off
  // (a writer's FP32 partial out, the owner's read of it) handoff_per_elem per tile element to
  // both CTAs. 1/16 picks the faster of the two on all ten shapes measured on the H200
  // (whole tiles: case 4 -11 %, dense 2048^2 x 512 -24 %; stream-K: cases 1-3 +11 to +34 %).
  bool split_auto = true;
  double handoff_per_elem = 1.0 / 16;
  double owner_read_per_elem = 1.0 / 16;  // the owner's side of a hand-off (per writer)
  // Stream-K balances the hand-offs and epilogues too (each CTA filled up to a common budget that
  // includes them, and an owner's reads start after its writers end; build_schedule step 3), not
  // only the k-blocks (a midpoint split of them). Measured on the H200: seed case 3 -8 %,
  // 256 x 4096 x 2048 -11 %, dense 8192^2 x 1024 -1.5 %, the rest within +-1 %.
  bool balance_handoffs = true;
  // Token tiles are at most this wide (token_tiles). With tile_auto the plan also tries every
  // narrower width of kTileTokenChoices and keeps the smallest estimated makespan: when a problem
  // has fewer tiles than CTAs (seed case 4: 96 tiles of 128 x 192 on 132 SMs), narrower token
  // tiles give every SM a smaller one instead of leaving a third of them idle.
  int max_tile_tokens = kMaxTokens;
  bool tile_auto = true;
  static constexpr int kTileTokenChoices[] = {256, 192, 128};
  // The simpler schedule wins unless the other is estimated cheaper by more than this share:
  // whole tiles over stream-K, wider token tiles over narrower ones. The estimate leaves out what
  // makes stream-K and many small tiles dear in practice (an owner's idle wait, more pipeline
  // fills), and the measured costs are within a few % of the model (H200: schedules it preferred
  // by < 3 % ran up to 4.5 % slower).
  double simpler_margin = 0.03;
  // Weight rows of the <= 128-token tiles: 0 = the plan decides (256 when that still leaves a tile
  // per CTA), else 128 or 256 (measurement knob Tuning::narrow_rows).
  int narrow_rows = 0;
  // Tiles split in two whose writer piece ends its CTA's range share the epilogue between the
  // owner and the writer (TileDesc::owner_slot) instead of the writer's CTA going idle while
  // the owner finishes the whole tile. Dual (GLU) plans set it from Tuning::share_epilogue: their
  // epilogue is ~10x a plain one, so an owner's epilogue dominates the tile's time (measured on
  // H100: -9 % on one GPU MODE shape, +2 % on another, the geometric mean unchanged, so off by
  // default).
  bool share_epilogue = false;
};

// Weight rows of a tile of `ntok` tokens when narrow tiles take `narrow_rows` (256 or 128; the
// plan decides, see build_schedule). Per wgmma, the tensor core's efficiency falls with N
// (measured on H200: 646 TFLOP/s at N = 256, 499 at 128, 329 at 64 with 128-row tiles); a narrow
// tile can therefore take 256 rows -- each consumer warpgroup issues two m64 wgmmas per k-step,
// twice the work per synchronisation and half the activation traffic -- while a wide one keeps
// 128 rows so that its accumulators fit (2 x N/2 FP32 <= 128 per thread).
constexpr int tile_rows(int ntok, int narrow_rows) {
  return ntok <= SchedulePolicy::kNarrowTokens ? narrow_rows : 128;
}


// The smallest mainloop instantiation (1..16) that can run a tile of `ntok` tokens: N = 16 * class.
constexpr int width_class(int ntok) { return (ntok + 15) / 16; }
// The class the schedule runs it in: width_class rounded up to a multiple of `round` (a divisor
// of 8, so narrow tiles stay narrow).
constexpr int bucket_class(int ntok, int round) { return (width_class(ntok) + round - 1) / round * round; }

// The token-tile rule, the one both schedules use (the host's work list through token_tiles, the
// MoE kernel's device schedule through moe_expert_tiles): m token rows as `count` =
// ceil(m / max_tokens) tiles of near-equal `size` tokens, a multiple of 8, and a last tile of
// `last` (<= size) tokens. max_tokens: a multiple of 8 in [8, kMaxTokens]. size <= max_tokens, so
// (count - 1) * size < m and every tile is non-empty.
struct TokenSplit {
  int count = 0, size = 0, last = 0;
};
constexpr TokenSplit token_split(int m, int max_tokens) {
  if (m <= 0) return TokenSplit{};
  const int count = (m + max_tokens - 1) / max_tokens;
  const int size = ((m + count - 1) / count + 7) / 8 * 8;
  return TokenSplit{count, size, m - (count - 1) * size};
}

}  // namespace fp4gemm::detail
