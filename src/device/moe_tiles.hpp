// The MoE device schedule's arithmetic, host- and device-callable (constexpr), so the host tier
// can check it: an expert's token tiles, the place of a tile in its width-class bucket, and each
// CTA's share of a bucket. device/moe_schedule.cuh runs it in every CTA's prologue.
#pragma once

#include <cstdint>

#include "device/schedule.hpp"

namespace fp4gemm::detail {

// An expert's token tiles (token_tiles in host/core/schedule.cpp, the same rule): `count` tiles
// of `size` tokens (a multiple of 8), the last one `last` tokens; their width classes (0-based;
// -1: none) and tile counts (token tiles x row blocks): the count - 1 full token tiles, and the
// last one.
struct ExpertTiles {
  int base, rows, count, size, last;
  int class_full, class_last, tiles_full, tiles_last;
};

constexpr int moe_row_blocks(int ntok, int n, int narrow_rows) {
  const int rows = tile_rows(ntok, narrow_rows);
  return (n + rows - 1) / rows;
}

constexpr ExpertTiles moe_expert_tiles(int base, int rows, int n, int narrow_rows) {
  ExpertTiles t{base, rows, 0, 0, 0, -1, -1, 0, 0};
  if (rows <= 0) return t;
  constexpr int kMax = SchedulePolicy::kMaxTokens;
  t.count = (rows + kMax - 1) / kMax;
  t.size = ((rows + t.count - 1) / t.count + 7) / 8 * 8;
  t.last = rows - (t.count - 1) * t.size;
  if (t.count > 1)
    t.class_full = width_class(t.size) - 1, t.tiles_full = (t.count - 1) * moe_row_blocks(t.size, n, narrow_rows);
  t.class_last = width_class(t.last) - 1, t.tiles_last = moe_row_blocks(t.last, n, narrow_rows);
  return t;
}

constexpr int moe_tiles_of_class(const ExpertTiles& t, int c) {
  return (t.class_full == c ? t.tiles_full : 0) + (t.class_last == c ? t.tiles_last : 0);
}

// CTA k of the n CTAs of a class with `count` tiles: its slots [begin, end) of the work list
// (the bucket's slots start at bucket_base). Interleaved (prefill): the CTA runs the bucket's
// tiles k, k + n, k + 2n, ... stored in that order; else a contiguous range of the bucket.
struct SlotRange {
  int begin, end;
};
constexpr SlotRange moe_cta_slots(int bucket_base, int count, int k, int n, bool interleave) {
  if (interleave) {
    const int q = count / n, r = count % n;
    const int begin = bucket_base + k * q + (k < r ? k : r);
    return SlotRange{begin, begin + q + (k < r ? 1 : 0)};
  }
  return SlotRange{bucket_base + static_cast<int>(std::int64_t{count} * k / n),
                   bucket_base + static_cast<int>(std::int64_t{count} * (k + 1) / n)};
}

// The bucket position (0..count-1) of the tile at `slot` of CTA k's range.
constexpr int moe_bucket_position(int slot, const SlotRange& range, int bucket_base, int k, int n, bool interleave) {
  return interleave ? k + (slot - range.begin) * n : slot - bucket_base;
}

// Tile `local` (0-based) of expert x's tiles of class c: the class's token tiles (the full ones,
// then the last), each over its row blocks (tiles of one class have one height, so the full and
// last token tiles have the same row-block count when they share the class).
struct TileCoord {
  int row_block, token_tile, tok0, ntok;
};
constexpr TileCoord moe_tile_coord(const ExpertTiles& x, int c, int local) {
  const int rbs = x.class_last == c ? x.tiles_last : x.tiles_full / (x.count - 1);
  const int rb = local % rbs, j = local / rbs + (x.class_full == c ? 0 : x.count - 1);
  return TileCoord{rb, j, x.base + j * x.size, j == x.count - 1 ? x.last : x.size};
}

}  // namespace fp4gemm::detail
