// Host tier: the MoE device schedule's arithmetic (src/device/moe_tiles.hpp, run by every CTA of the
// MoE GEMM in its prologue): an expert's token tiles cover its rows and the weight rows exactly
// once, each tile in the class it is bucketed in; every CTA's share of a bucket, interleaved or
// contiguous, partitions the bucket.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "device/moe_tiles.hpp"
#include "host/core/schedule.hpp"

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

double run_makespan_kblocks(const MoeClassLoad& l, int n, int kblocks, int gain = kMoeSplitMinGain);  // (below)

// A class with full rounds and a partial last one splits only that round. moe_sk_tiles is all
// of a class's tiles where moe_sk_eligible, else count % n from one full round on where that saves
// >= the class's gain (moe_split_min_gain: 16 for the 16-token class, 12 for the 32-token
// one; both tried) k-blocks per CTA (so the run's makespan is within that of the search's
// divisible model), else none; the whole tiles (the bucket's first count - sk, interleaved) and the
// stream-K shares of the last sk tiles cover every (tile, k-block) exactly once, each CTA's share
// of the split round is < 1 tile (<= 2 pieces), and every CTA's work is count / n tiles within one
// k-block -- or, where the split round is too small for n shares of >= 4 k-blocks, within 8.
TEST(MoeScheduleArithmetic, HybridLastRoundCoversEveryUnitOnce) {
  std::mt19937 rng(23);
  int hybrid = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 140);
    const int count = 1 + static_cast<int>(rng() % (6 * n));
    const int kblocks = 1 + static_cast<int>(rng() % 130);
    const int gain = moe_split_min_gain(trial % 2);
    const int sk = moe_sk_tiles(count, kblocks, n, gain);
    if (moe_sk_eligible(count, kblocks, n)) ASSERT_EQ(sk, count);
    else if (count >= n && kblocks * (n - count % n) >= gain * n) ASSERT_EQ(sk, count % n);
    else ASSERT_EQ(sk, 0) << "count " << count << " kblocks " << kblocks << " n " << n;
    // the model's divisible cost (t / n tiles) against the run's, for every n up to count
    for (int m = 1; m <= count && kblocks >= kMoeHybridMinKblocks; m += 1 + m / 8) {
      const MoeClassLoad l{count, 1.0f, m, true, true};
      ASSERT_LE(run_makespan_kblocks(l, m, kblocks, gain) - static_cast<double>(count) * kblocks / m, gain)
          << "count " << count << " kblocks " << kblocks << " on " << m;
    }
    if (sk == 0 || sk == count) continue;
    ++hybrid;
    const int whole = count - sk;
    ASSERT_EQ(whole % n, 0);
    std::vector<int> unit(static_cast<std::size_t>(count) * kblocks, 0);
    std::vector<long long> work(n, 0);
    for (int k = 0; k < n; ++k) {
      const SlotRange r = moe_cta_slots(0, whole, k, n, true);
      ASSERT_EQ(r.end - r.begin, whole / n);
      for (int slot = r.begin; slot < r.end; ++slot) {
        const int t = moe_bucket_position(slot, r, 0, k, n, true);
        ASSERT_LT(t, whole);
        for (int kb = 0; kb < kblocks; ++kb) ++unit[static_cast<std::size_t>(t) * kblocks + kb];
        work[k] += kblocks;
      }
    }
    // Each CTA's pieces (device/moe_schedule.cuh): entries from its first whole tile's slot +
    // kMoeStreamKMaxPieces x its index, its split pieces then its whole tiles: contiguous, disjoint,
    // inside the plan's max_tiles + kMoeStreamKMaxPieces x CTAs entries.
    for (int k = 0, prev_end = 0; k < n; ++k) {
      const SlotRange r = moe_cta_slots(0, whole, k, n, true);
      const int first = r.begin + kMoeStreamKMaxPieces * k;
      const int pieces = moe_sk_piece_count(sk, kblocks, k, moe_sk_ctas(sk, kblocks, n)) + (r.end - r.begin);
      ASSERT_GE(first, prev_end);
      ASSERT_LE(first + pieces, count + kMoeStreamKMaxPieces * n);
      prev_end = first + pieces;
    }
    const int ctas = moe_sk_ctas(sk, kblocks, n);  // (all n, unless a share would be < 4 k-blocks)
    ASSERT_EQ(ctas, std::min(n, sk * kblocks / kMoeStreamKMinKblocks));
    for (int k = 0; k < ctas; ++k) {
      const int m = moe_sk_piece_count(sk, kblocks, k, ctas);
      ASSERT_GE(m, 1);
      ASSERT_LE(m, 2) << "a share of the split round is < 1 tile";
      for (int i = 0; i < m; ++i) {
        const StreamKPiece p = moe_sk_piece(sk, kblocks, k, ctas, i);
        if (!p.owner) ASSERT_EQ(i, 0) << "a writer piece runs first";
        for (int kb = p.kb_begin; kb < p.kb_end; ++kb) ++unit[static_cast<std::size_t>(whole + p.tile) * kblocks + kb];
        work[k] += p.kb_end - p.kb_begin;
      }
    }
    for (int u : unit) ASSERT_EQ(u, 1) << "count " << count << " kblocks " << kblocks << " n " << n;
    const double share = static_cast<double>(count) * kblocks / n;
    const double slack = ctas == n ? 1.0 : 2 * kMoeStreamKMinKblocks;  // (those shares are 4..8 k-blocks)
    for (int k = 0; k < n; ++k) ASSERT_LE(std::abs(static_cast<double>(work[k]) - share), slack) << "CTA " << k;
  }
  EXPECT_GT(hybrid, 1000);
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


// ---- CTAs per width class (moe_class_ctas) ----------------------------------------------------

// The search's model of class l on n CTAs: whole tiles in ceil(t / n) rounds; a splittable class
// with at most 3/4 of a tile per CTA (moe_sk_eligible), or a divisible one from one full round on,
// t * w / n. (The schedule declines a split of the last round that would save < kMoeSplitMinGain
// k-blocks per CTA: its makespan is then at most that much above the model's, checked below.)
double class_makespan(const MoeClassLoad& l, int n, int kblocks) {
  if (l.tiles <= 0) return 0;
  if (n <= 0) return 1e30;
  if ((l.splittable && moe_sk_eligible(l.tiles, kblocks, n)) || (l.divisible && n <= l.tiles))
    return static_cast<double>(l.tiles) * l.w / n;
  return std::ceil(static_cast<double>(l.tiles) / n) * l.w;
}
// The makespan as the schedule runs it (moe_sk_tiles), in k-blocks of the class's tiles.
double run_makespan_kblocks(const MoeClassLoad& l, int n, int kblocks, int gain) {
  if (l.tiles <= 0) return 0;
  if (l.splittable && moe_sk_tiles(l.tiles, kblocks, n, gain) > 0) return static_cast<double>(l.tiles) * kblocks / n;
  return std::ceil(static_cast<double>(l.tiles) / n) * kblocks;
}
double makespan(const std::vector<MoeClassLoad>& l, const std::vector<int>& n, int kblocks) {
  double m = 0;
  for (std::size_t c = 0; c < l.size(); ++c) m = std::max(m, class_makespan(l[c], n[c], kblocks));
  return m;
}
MoeClassLoad class_load(int c, int tiles, int kblocks, int num_ctas, bool narrow256, bool stream_k = true) {
  const SchedulePolicy p;  // the plan's cost figures
  return moe_class_load(c, tiles, kblocks, num_ctas, narrow256 ? 256 : 128, stream_k,
                        MoeCostFigures{static_cast<float>(p.wide_fixed), static_cast<float>(p.wide_per_token),
                                       static_cast<float>(p.narrow_fixed), static_cast<float>(p.narrow_per_token)});
}
std::vector<int> class_ctas(const std::vector<MoeClassLoad>& l, int num_ctas) {
  std::vector<int> out(l.size());
  moe_class_ctas(l.data(), static_cast<int>(l.size()), num_ctas, out.data());
  return out;
}

// The device's ceil(t / r) from an approximate reciprocal (MUFU.RCP, relative error < 2^-22):
// with the reciprocal off by up to 2 ulps either way and t < 2^21 (the device divides larger
// counts exactly), the corrected ceiling is the exact one.
TEST(MoeClassCtas, CeilDivisionFromAnApproximateReciprocal) {
  std::mt19937 rng(3);
  int checked = 0;
  for (int trial = 0; trial < 400000; ++trial) {
    const int t = trial < 200000 ? 1 + trial % 2000 : 1 + static_cast<int>(rng() % ((1 << 21) - 1));
    const int r = trial < 200000 ? 1 + static_cast<int>(rng() % t) : 1 + static_cast<int>(rng() % (rng() % 2 ? 64 : t));
    const float exact = 1.0f / static_cast<float>(r);
    const int ulps = static_cast<int>(rng() % 5) - 2;
    std::uint32_t bits;
    std::memcpy(&bits, &exact, 4);
    bits += ulps;
    float rr;
    std::memcpy(&rr, &bits, 4);
    ASSERT_EQ(moe_ceil_div_rcp(static_cast<float>(t), static_cast<float>(r), rr), static_cast<float>((t + r - 1) / r))
        << t << " / " << r << ", reciprocal off by " << ulps << " ulps";
    ++checked;
  }
  EXPECT_EQ(checked, 400000);
}

// moe_class_need forms every case's count and selects one (the device tests a different makespan
// in each lane); against the rule written as its cases (the form it replaced), on random loads and
// makespans around each class's tile cost, 0 and +inf included.
int class_need_by_cases(const MoeClassLoad& l, float inv_w, float T, int most) {
  if (l.tiles <= 0) return 0;
  const float tf = static_cast<float>(l.tiles);
  const float rounds = T * inv_w;
  float n;
  if (rounds >= 1.0f && l.divisible) {
    const float q = tf * l.w / T;
    n = static_cast<float>(static_cast<int>(q));
    n += n < q ? 1.0f : 0.0f;
  } else if (rounds >= 1.0f) {
    const float r = rounds >= tf ? tf : static_cast<float>(static_cast<int>(rounds));
    n = static_cast<float>((l.tiles + static_cast<int>(r) - 1) / static_cast<int>(r));
  } else {
    if (!l.splittable) return most + 1;
    const float q = tf * l.w / T;
    const float eligible = static_cast<float>(moe_sk_min_ctas(l.tiles));
    n = static_cast<float>(static_cast<int>(q < 1e9f ? q : 1e9f));
    n += n < q ? 1.0f : 0.0f;
    n = n > eligible ? n : eligible;
    if (n > static_cast<float>(l.cap)) return most + 1;
  }
  return n > static_cast<float>(most) ? most + 1 : static_cast<int>(n);
}

TEST(MoeClassCtas, NeedMatchesTheRuleByCases) {
  std::mt19937 rng(5);
  int checked = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int num_ctas = 1 + static_cast<int>(rng() % 264);
    const int kblocks = 1 + static_cast<int>(rng() % 120);
    const int c = rng() % 2 ? static_cast<int>(rng() % 2) : static_cast<int>(rng() % 16);
    const int tiles = static_cast<int>(rng() % (rng() % 4 == 0 ? 5000 : 300));
    const SchedulePolicy p;
    const MoeClassLoad l = moe_class_load(c, tiles, kblocks, num_ctas, rng() % 2 ? 256 : 128, rng() % 4 != 0,
                                          MoeCostFigures{static_cast<float>(p.wide_fixed), static_cast<float>(p.wide_per_token),
                                                         static_cast<float>(p.narrow_fixed), static_cast<float>(p.narrow_per_token)});
    const float inv_w = 1.0f / l.w;
    for (int j = 0; j < 24; ++j) {
      float T;
      switch (j) {
        case 0: T = 0.0f; break;
        case 1: T = INFINITY; break;
        case 2: T = l.w; break;
        case 3: T = std::nextafter(l.w, 0.0f); break;
        case 4: T = static_cast<float>(tiles) * l.w; break;
        default: {
          const float x = std::ldexp(static_cast<float>(rng() % 1000000) / 1e6f, static_cast<int>(rng() % 14) - 4);
          T = l.w * x;
        }
      }
      ASSERT_EQ(moe_class_need(l, inv_w, T, num_ctas), class_need_by_cases(l, inv_w, T, num_ctas))
          << "class " << c << ", " << tiles << " tiles, w " << l.w << ", T " << T << ", " << num_ctas << " CTAs";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 480000);
}

// The search by rounds of 24 points against the search it replaced (by thirds, 11 steps after
// testing 2 (lo + w_max)): both end at a feasible makespan within their resolution of the least
// one, so on random multi-class loads they give the same CTAs per class (or, where a class's
// count changes between the two ends, the same makespan).
float makespan_by_thirds(const std::vector<MoeClassLoad>& l, int num_ctas) {
  float hi_safe = 0.0f, w_max = 0.0f, total_cost = 0.0f;
  for (const MoeClassLoad& x : l) {
    if (x.tiles <= 0) continue;
    hi_safe = std::max(hi_safe, static_cast<float>(x.tiles + 1) * x.w);
    w_max = std::max(w_max, x.w);
    total_cost += static_cast<float>(x.tiles) * x.w;
  }
  auto sum = [&](float t) {
    int s = 0;
    for (const MoeClassLoad& x : l) s += moe_class_need(x, 1.0f / x.w, t, num_ctas);
    return s;
  };
  float lo = total_cost / static_cast<float>(num_ctas);
  const float h2 = 2.0f * (lo + w_max);
  float hi = h2 < hi_safe && sum(h2) <= num_ctas ? h2 : hi_safe;
  for (int i = 0; i < 11; ++i) {
    const float third = (hi - lo) * (1.0f / 3.0f);
    const float t1 = lo + third, t2 = hi - third;
    if (sum(t1) <= num_ctas) hi = t1;
    else if (sum(t2) <= num_ctas) lo = t1, hi = t2;
    else lo = t2;
  }
  return hi;
}

TEST(MoeClassCtas, RoundsMatchTheSearchByThirds) {
  std::mt19937 rng(17);
  int same = 0, checked = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int num_ctas = 16 + static_cast<int>(rng() % 250);
    const int kblocks = 4 + static_cast<int>(rng() % 100);
    std::vector<MoeClassLoad> l(16);
    const int present = 2 + static_cast<int>(rng() % 6);
    for (int c = 0; c < 16; ++c) l[c] = class_load(c, 0, kblocks, num_ctas, false);
    for (int i = 0; i < present; ++i) {
      const int c = static_cast<int>(rng() % 16);
      l[c] = class_load(c, 1 + static_cast<int>(rng() % (rng() % 4 == 0 ? 2000 : 200)), kblocks, num_ctas, rng() % 2, rng() % 4 != 0);
    }
    const std::vector<int> n = class_ctas(l, num_ctas);
    // The thirds' allocation: need at its makespan, then the spare CTAs by cost (as moe_class_ctas).
    const float T3 = makespan_by_thirds(l, num_ctas);
    float total_cost = 0.0f;
    for (const MoeClassLoad& x : l) total_cost += static_cast<float>(x.tiles) * x.w;
    std::vector<int> n3(16);
    int used = 0;
    for (int c = 0; c < 16; ++c) used += n3[c] = moe_class_need(l[c], 1.0f / l[c].w, T3, num_ctas);
    for (int c = 0; c < 16; ++c)
      n3[c] += moe_class_extra(l[c], n3[c], num_ctas - used, static_cast<float>(l[c].tiles) * l[c].w, total_cost);
    if (n == n3) {
      ++same;
    } else {
      ASSERT_LE(makespan(l, n, kblocks), makespan(l, n3, kblocks) * (1 + 1e-5)) << "trial " << trial;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 20000);
  std::printf("[ rounds ] the same CTAs per class as the thirds' search on %d of %d loads\n", same, checked);
  EXPECT_GE(same, 19800) << "the two searches should rarely end apart";
}

// The case that showed the old proportional rule's loss (ncu on the H200: SMs active 66 % of
// Mixtral-8x7B's down projection at T 256): 32 / 96 / 128 tiles of 48 / 64 / 80 tokens, 128-row
// tiles, 224 k-blocks, 132 CTAs. The old rule gave the 48-token class 15 CTAs (3 rounds); every
// class now runs 2.
TEST(MoeClassCtas, MixtralDownProjectionRunsTwoRounds) {
  std::vector<MoeClassLoad> l(16, MoeClassLoad{0, 1.0f, 0, false, false});
  l[2] = class_load(2, 32, 224, 132, false), l[3] = class_load(3, 96, 224, 132, false), l[4] = class_load(4, 128, 224, 132, false);
  const std::vector<int> n = class_ctas(l, 132);
  int used = 0;
  for (int c = 0; c < 16; ++c) used += n[c];
  EXPECT_LE(used, 132);
  for (int c : {2, 3, 4}) EXPECT_LE((l[c].tiles + n[c] - 1) / n[c], 2) << "class " << 16 * (c + 1) << ": " << n[c] << " CTAs";
  EXPECT_DOUBLE_EQ(makespan(l, n, 224), 2.0 * l[4].w);
}

// Against every allocation of up to 3 classes on up to 24 CTAs: the search's makespan is the
// optimum (exactly, in these trials; the assertion allows the search's 3^-11 resolution, and the
// leftover CTAs cannot raise it), every class with tiles gets a CTA, none more than its cap, and
// the total fits.
TEST(MoeClassCtas, MatchesTheExhaustiveOptimum) {
  std::mt19937 rng(11);
  int checked = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const int classes = 1 + static_cast<int>(rng() % 3), num_ctas = classes + static_cast<int>(rng() % 22);
    const int kblocks = 1 + static_cast<int>(rng() % 40);
    std::vector<MoeClassLoad> l;
    std::vector<int> cls;
    for (int i = 0; i < classes; ++i) {
      int c = static_cast<int>(rng() % 16);
      if (rng() % 2) c = static_cast<int>(rng() % 2);  // the stream-K classes often
      const int tiles = static_cast<int>(rng() % (rng() % 4 == 0 ? 200 : 30));
      l.push_back(class_load(c, tiles, kblocks, num_ctas, rng() % 2, rng() % 4 != 0));
    }
    const std::vector<int> n = class_ctas(l, num_ctas);
    int used = 0;
    for (int i = 0; i < classes; ++i) {
      used += n[i];
      if (l[i].tiles > 0) ASSERT_GE(n[i], 1);
      else ASSERT_EQ(n[i], 0);
      ASSERT_LE(n[i], std::max(l[i].cap, 1));
    }
    ASSERT_LE(used, num_ctas);
    // Exhaustive: every n_i in [1, num_ctas] for the classes with tiles.
    double best = 1e30;
    std::vector<int> m(classes, 0);
    std::function<void(int, int)> walk = [&](int i, int left) {
      if (i == classes) {
        best = std::min(best, makespan(l, m, kblocks));
        return;
      }
      if (l[i].tiles == 0) {
        m[i] = 0;
        walk(i + 1, left);
        return;
      }
      for (int k = 1; k <= left - (classes - 1 - i) && k <= std::max(l[i].cap, 1); ++k) {
        m[i] = k;
        walk(i + 1, left - k);
      }
    };
    walk(0, num_ctas);
    const double got = makespan(l, n, kblocks);
    ASSERT_LE(got, best * (1 + 1e-3)) << "trial " << trial << ": the search's allocation is not optimal (to its 3^-11 resolution)";
    ++checked;
  }
  EXPECT_EQ(checked, 4000);
}

// The layer shapes of the bench suite at 132 CTAs, with routings drawn as `fp4gemm layer` draws
// them: never a larger makespan than the earlier proportional rule, evaluated here as it ran.
std::vector<int> proportional_ctas(const std::vector<MoeClassLoad>& l, int num_ctas) {
  const int k = static_cast<int>(l.size());
  std::vector<float> cost(k);
  float total = 0;
  int present = 0;
  for (int c = 0; c < k; ++c) cost[c] = static_cast<float>(l[c].tiles) * l[c].w, total += cost[c], present += l[c].tiles > 0;
  const int spare = std::max(0, num_ctas - present);
  std::vector<int> mine(k);
  std::vector<float> rem(k);
  int sum = 0;
  for (int c = 0; c < k; ++c) {
    const float share = total > 0 ? spare * (cost[c] / total) : 0.f;
    mine[c] = l[c].tiles > 0 ? std::min(l[c].cap, 1 + static_cast<int>(share)) : 0;
    sum += mine[c];
    rem[c] = mine[c] < l[c].cap ? share - std::floor(share) : -1.f;
  }
  std::vector<int> out = mine;
  for (int c = 0; c < k; ++c) {
    int rank = 0;
    for (int o = 0; o < k; ++o) rank += rem[o] > rem[c] || (rem[o] == rem[c] && o < c);
    if (rem[c] >= 0.f && rank < num_ctas - sum) ++out[c];
  }
  return out;
}

TEST(MoeClassCtas, NeverWorseThanTheProportionalRuleOnLayerRoutings) {
  struct Model {
    int experts, hidden, inter, topk;
  };
  int improved = 0, cases = 0;
  for (const Model& m : {Model{256, 7168, 2048, 8}, Model{128, 2048, 768, 8}, Model{128, 2880, 2880, 4}, Model{8, 4096, 14336, 2}})
    for (int tokens : {1, 8, 32, 128, 256, 1024, 4096})
      for (int gemm = 0; gemm < 2; ++gemm) {
        const int n = gemm == 0 ? 2 * m.inter : m.hidden, kblocks = (gemm == 0 ? m.hidden : m.inter) / 64;
        std::mt19937_64 rng(1111);
        std::vector<int> pool(m.experts), rows(m.experts, 0);
        for (int e = 0; e < m.experts; ++e) pool[e] = e;
        for (int t = 0; t < tokens; ++t) {
          for (int j = 0; j < m.topk; ++j) std::swap(pool[j], pool[j + rng() % (m.experts - j)]);
          for (int j = 0; j < m.topk; ++j) ++rows[pool[j]], rng();
        }
        const int reachable = std::min(m.experts, tokens * m.topk);
        const int narrow = reachable * ((n + 255) / 256) >= 132 ? 256 : 128;
        std::vector<int> tiles(16, 0);
        int base = 0;
        for (int e = 0; e < m.experts; ++e) {
          const ExpertTiles x = moe_expert_tiles(base, rows[e], n, narrow);
          base += rows[e];
          for (int c = 0; c < 16; ++c) tiles[c] += moe_tiles_of_class(x, c);
        }
        std::vector<MoeClassLoad> l;
        for (int c = 0; c < 16; ++c) l.push_back(class_load(c, tiles[c], kblocks, 132, narrow == 256));
        const double now = makespan(l, class_ctas(l, 132), kblocks), before = makespan(l, proportional_ctas(l, 132), kblocks);
        EXPECT_LE(now, before * (1 + 1e-6)) << "E " << m.experts << " T " << tokens << " GEMM " << gemm + 1;
        improved += now < before * 0.99;
        ++cases;
      }
  EXPECT_EQ(cases, 56);
  EXPECT_GE(improved, 3) << "Mixtral T 128 / 256 / 1024 down projections, Qwen3 T 1024";
}

}  // namespace
}  // namespace fp4gemm::detail

namespace fp4gemm::detail {
namespace {

// The MoE device schedule and the host work list cut token rows the same way (one rule,
// token_split): every m, the same tiles at the same offsets.
TEST(MoeScheduleArithmetic, TokenTilesAreTheHostRule) {
  for (int m = 0; m <= 5000; ++m) {
    const ExpertTiles x = moe_expert_tiles(0, m, 256, 256);
    const auto host = token_tiles(m);
    ASSERT_EQ(static_cast<int>(host.size()), x.count) << m;
    for (int i = 0; i < x.count; ++i) {
      ASSERT_EQ(host[i].first, i * x.size) << m;
      ASSERT_EQ(host[i].second, i + 1 < x.count ? x.size : x.last) << m;
    }
  }
  static_assert(token_split(320, 256).size == 160 && token_split(384, 128).count == 3 && token_split(1, 256).last == 1);
}

}  // namespace
}  // namespace fp4gemm::detail
