// Host tier: the MoE device schedule's arithmetic (src/device/moe_tiles.hpp, run by every CTA of the
// MoE GEMM in its prologue): an expert's token tiles cover its rows and the weight rows exactly
// once, each tile in the class it is bucketed in; every CTA's share of a bucket, interleaved or
// contiguous, partitions the bucket.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "device/moe_tiles.hpp"

namespace fp4gemm::detail {
namespace {

TEST(MoeScheduleArithmetic, ExpertTilesCoverRowsAndWeightsOnce) {
  constexpr int kClasses = SchedulePolicy::kWidthClasses;
  std::vector<int> row_counts;
  for (int r = 0; r <= 1100; ++r) row_counts.push_back(r);
  for (int r : {2047, 2048, 2049, 4095, 4096, 4097, 16384}) row_counts.push_back(r);
  int checked = 0;
  for (int narrow : {128, 256})
    for (int n : {64, 128, 200, 1536, 2880})
      for (int rows : row_counts) {
        const int base = 1000;
        const ExpertTiles x = moe_expert_tiles(base, rows, n, narrow);
        std::vector<int> covered(rows, 0);
        std::set<std::pair<int, int>> seen;  // (token tile, row block)
        int tiles = 0;
        for (int c = 0; c < kClasses; ++c) {
          const int count = moe_tiles_of_class(x, c);
          tiles += count;
          for (int local = 0; local < count; ++local) {
            const TileCoord t = moe_tile_coord(x, c, local);
            ASSERT_EQ(width_class(t.ntok) - 1, c) << "rows " << rows << ": a tile of " << t.ntok << " tokens in class " << c;
            ASSERT_GE(t.ntok, 1);
            ASSERT_LE(t.ntok, SchedulePolicy::kMaxTokens);
            ASSERT_LT(t.row_block * tile_rows(t.ntok, narrow), n) << "a row block past N";
            ASSERT_TRUE(seen.insert({t.token_tile, t.row_block}).second) << "a tile twice";
            if (t.row_block == 0)
              for (int m = t.tok0; m < t.tok0 + t.ntok; ++m) {
                ASSERT_GE(m, base);
                ASSERT_LT(m, base + rows);
                ++covered[m - base];
              }
          }
        }
        const int expected = rows == 0 ? 0 : (x.count - 1) * moe_row_blocks(x.size, n, narrow) + moe_row_blocks(x.last, n, narrow);
        EXPECT_EQ(tiles, expected) << "rows " << rows;
        EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int v) { return v == 1; }))
            << "rows " << rows << ", N " << n << ": every routed row in exactly one token tile";
        if (rows > 0) EXPECT_EQ(x.size % 8, 0) << "token tiles are multiples of 8 tokens (the last excepted)";
        ++checked;
      }
  EXPECT_GT(checked, 10000);
}

// Stream-K shares (decode-like classes, fewer than 2 tiles per CTA): every (tile, k-block) unit in
// exactly one piece; one owner per tile, holding its last k-block; its writers are exactly the
// CTAs first_writer .. owner_cta - 1, each with one piece of it, and that piece is their first; at
// most kMoeStreamKMaxPieces pieces per CTA, none empty.
TEST(MoeScheduleArithmetic, StreamKSharesCoverEveryUnitOnce) {
  std::mt19937 rng(11);
  int checked = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 140);
    const int count = 1 + static_cast<int>(rng() % (2 * n));  // up to 2n: eligible only up to 3n / 4
    const int kblocks = trial < 200 ? kMoeStreamKMinKblocks + trial % 8 : 1 + static_cast<int>(rng() % 240);
    ASSERT_EQ(moe_sk_eligible(count, kblocks, n), 4 * count <= 3 * n && kblocks >= kMoeStreamKMinKblocks &&
                                                      std::int64_t{count} * kblocks * n < (std::int64_t{1} << 31));
    if (!moe_sk_eligible(count, kblocks, n)) continue;
    const int ctas = moe_sk_ctas(count, kblocks, n);
    ASSERT_GE(ctas, 1);
    ASSERT_LE(ctas, n);
    std::vector<int> unit(static_cast<std::size_t>(count) * kblocks, 0), owners(count, 0);
    std::vector<std::vector<int>> writers(count);
    for (int k = 0; k < ctas; ++k) {
      StreamKPiece p[kMoeStreamKMaxPieces]{};
      const int m = moe_sk_piece_count(count, kblocks, k, ctas);
      for (int i = 0; i < m && i < kMoeStreamKMaxPieces; ++i) p[i] = moe_sk_piece(count, kblocks, k, ctas, i);
      ASSERT_GE(m, 1) << "count " << count << " kblocks " << kblocks << " CTA " << k << " of " << ctas;
      ASSERT_LE(m, kMoeStreamKMaxPieces);
      ASSERT_GE(moe_sk_start(count, kblocks, k + 1, ctas) - moe_sk_start(count, kblocks, k, ctas),
                std::min(kMoeStreamKMinKblocks, count * kblocks))
          << "a share below the smallest";
      for (int i = 0; i < m; ++i) {
        ASSERT_GE(p[i].tile, 0);
        ASSERT_LT(p[i].tile, count);
        ASSERT_LT(p[i].kb_begin, p[i].kb_end);
        ASSERT_LE(p[i].kb_end, kblocks);
        for (int kb = p[i].kb_begin; kb < p[i].kb_end; ++kb) ++unit[static_cast<std::size_t>(p[i].tile) * kblocks + kb];
        ASSERT_EQ(p[i].owner, p[i].kb_end == kblocks);
        if (p[i].owner) {
          ++owners[p[i].tile];
          ASSERT_EQ(p[i].owner_cta, k);
        } else {
          ASSERT_EQ(i, 0) << "a writer piece runs first";
          writers[p[i].tile].push_back(k);
        }
        ASSERT_LE(p[i].first_writer, p[i].owner_cta);
      }
    }
    for (int u : unit) ASSERT_EQ(u, 1) << "count " << count << " kblocks " << kblocks << " n " << ctas;
    for (int t = 0; t < count; ++t) {
      ASSERT_EQ(owners[t], 1);
      const int owner = moe_sk_cta_of((t + 1) * kblocks - 1, count, kblocks, ctas);
      const int first = moe_sk_cta_of(t * kblocks, count, kblocks, ctas);
      ASSERT_EQ(static_cast<int>(writers[t].size()), owner - first);
      for (std::size_t w = 0; w < writers[t].size(); ++w) ASSERT_EQ(writers[t][w], first + static_cast<int>(w));
    }
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

TEST(MoeScheduleArithmetic, CtaSlotsPartitionTheBucket) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 3000; ++trial) {
    const int count = trial < 300 ? trial : static_cast<int>(rng() % 5000);
    const int n = 1 + static_cast<int>(rng() % 140);
    const int bucket_base = static_cast<int>(rng() % 1000);
    for (bool interleave : {false, true}) {
      std::vector<int> position_seen(count, 0);
      int next = bucket_base, most = 0, least = count + 1;
      for (int k = 0; k < n; ++k) {
        const SlotRange r = moe_cta_slots(bucket_base, count, k, n, interleave);
        ASSERT_EQ(r.begin, next) << "ranges follow each other in CTA order";
        ASSERT_LE(r.begin, r.end);
        next = r.end;
        most = std::max(most, r.end - r.begin), least = std::min(least, r.end - r.begin);
        for (int slot = r.begin; slot < r.end; ++slot) {
          const int t = moe_bucket_position(slot, r, bucket_base, k, n, interleave);
          ASSERT_GE(t, 0);
          ASSERT_LT(t, count);
          ++position_seen[t];
          if (interleave) ASSERT_EQ(t % n, k) << "CTA k runs the bucket's tiles k, k + n, ...";
        }
      }
      EXPECT_EQ(next, bucket_base + count) << "the ranges cover the bucket";
      EXPECT_TRUE(std::all_of(position_seen.begin(), position_seen.end(), [](int v) { return v == 1; }))
          << "count " << count << ", n " << n << ", interleave " << interleave << ": every tile exactly once";
      EXPECT_LE(most - least, 1) << "CTAs of a class get the same number of tiles, +-1";
    }
  }
}

}  // namespace
}  // namespace fp4gemm::detail
