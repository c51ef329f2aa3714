// The MoE device schedule's arithmetic, host- and device-callable (constexpr), so the host tier
// can check it: an expert's token tiles, the place of a tile in its width-class bucket, and each
// CTA's share of a bucket. device/moe_schedule.cuh runs it in every CTA's prologue.
#pragma once

#include <cmath>
#include <cstdint>

#include "device/schedule.hpp"

#include "formats/host_device.hpp"

namespace fp4gemm::detail {

// An expert's token tiles (token_split in device/schedule.hpp, the host schedule's rule): `count` tiles
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
  const TokenSplit split = token_split(rows, SchedulePolicy::kMaxTokens);
  t.count = split.count, t.size = split.size, t.last = split.last;
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

// CTAs per width class. A CTA runs one class, so the run's CTAs are shared among the classes
// present; the schedule's makespan is the slowest class's. Whole tiles take rounds of one tile per
// CTA: a class of t tiles on n CTAs costs ceil(t / n) tiles, so few tiles per CTA make the split
// coarse. Sharing the CTAs in proportion to each class's cost can, in that regime, give a class
// one CTA fewer than its tiles need for the round count the others have: Mixtral-8x7B's down
// projection at T 256 (classes of 48 / 64 / 80 tokens, 32 / 96 / 128 tiles on 132 SMs) got 15
// CTAs for the 48-token class's 32 tiles -- 3 rounds where every other CTA ran 2, one SM in three
// idle for the last (ncu: SMs active 66 % of the kernel). So, with more than one class present,
// the smallest makespan T is searched for (moe_balance_makespan):
// the fewest CTAs with which each class finishes within T (moe_class_need) must add up to at most
// the run's CTAs. The CTAs left over go to the classes in proportion to their cost
// (moe_class_extra), up to what each can use. One class present takes every CTA it can use.
struct MoeClassLoad {
  int tiles;        // the class's tiles in this run
  float w;          // cost of one tile (the cost model's per-k-block figure: every class has the same K)
  int cap;          // most CTAs it can use: its tiles, or for stream-K classes one per kMoeStreamKMinKblocks k-blocks
  bool splittable;  // stream-K can split its tiles (the 16- and 32-token classes)
  bool divisible;   // splittable with K of >= kMoeHybridMinKblocks k-blocks: from one full round on, its
                    // last round's tiles are split (moe_sk_tiles), so on n <= tiles CTAs the model
                    // costs it tiles * w / n (where moe_sk_tiles declines the split, the run takes
                    // < kMoeSplitMinGain k-blocks longer than that)
};
// The fewest CTAs that run a class of `count` tiles by stream-K where it has at most 3/4 of a tile
// per CTA (moe_sk_eligible below): ceil(4 count / 3).
constexpr int moe_sk_min_ctas(int count) { return (4 * count + 2) / 3; }

// ceil(t / r) for whole numbers 1 <= t < 2^21 and r >= 1 held in floats, given rr, an
// approximation of 1 / r within 2 ulps: t * rr is then within 1/2 of t / r, and the ceiling is
// corrected both ways with exact products (whole numbers < 2^24).
FP4GEMM_HD float moe_ceil_div_rcp(float t, float r, float rr) {
  float n = ceilf(t * rr);
  n = (n - 1.0f) * r >= t ? n - 1.0f : n;
  return n * r < t ? n + 1.0f : n;
}
// ceil(t / r) for whole numbers 1 <= t < 2^24 and r >= 1 held in floats: on the device from
// rcp.approx (MUFU.RCP, within 1 ulp) through moe_ceil_div_rcp below t = 2^21, the same value as
// the host's integer division without the ~20-instruction dependent chain of an integer division
// in every step of the search (with integer divisions the search cost ~5 us of prologue per GEMM,
// measured on H200).
FP4GEMM_HD float moe_ceil_div(float t, float r) {
#if defined(__CUDA_ARCH__)
  if (t < 2097152.0f) {
    float rr;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rr) : "f"(r));
    return moe_ceil_div_rcp(t, r, rr);
  }
#endif
  {
    const int ti = static_cast<int>(t), ri = static_cast<int>(r);
    return static_cast<float>((ti + ri - 1) / ri);
  }
}

// The fewest CTAs with which class l finishes within T, capped at `most` (more than `most`:
// most + 1). Whole tiles run floor(T / w) rounds; a divisible class (its last round split by
// moe_sk_tiles) ceil(t * w / T) CTAs from one round on; below one tile's cost only stream-K can,
// in equal shares of t * w / n, with at least ceil(4t / 3) CTAs (moe_sk_eligible's 3/4 of a tile
// per CTA) and at most cap. Non-increasing in T, which the search needs. inv_w = 1 / l.w.
FP4GEMM_HD int moe_class_need(const MoeClassLoad& l, float inv_w, float T, int most) {
  if (l.tiles <= 0) return 0;
  // Every case's count is formed and one selected (no branch on T: the device search tests a
  // different T in each lane, and the branches diverged there: ~560 cycles a step in
  // bench/micro/moe_schedule_cost.cu).
  const float tf = static_cast<float>(l.tiles);
  const float rounds = T * inv_w;
  const bool full = rounds >= 1.0f;
  const float q = tf * l.w / T;  // (T = 0: +inf)
  float nq = static_cast<float>(static_cast<int>(q < 1e9f ? q : 1e9f));
  nq += nq < q ? 1.0f : 0.0f;  // ceil(t * w / T)
  const float r = rounds >= tf ? tf : (full ? static_cast<float>(static_cast<int>(rounds)) : 1.0f);
  const float nc = moe_ceil_div(tf, r);  // whole tiles in floor(T / w) rounds
  const float eligible = static_cast<float>(moe_sk_min_ctas(l.tiles));
  const float n = full ? (l.divisible ? nq : nc) : (nq > eligible ? nq : eligible);
  const bool none = !full && (!l.splittable || n > static_cast<float>(l.cap));
  return none || n > static_cast<float>(most) ? most + 1 : static_cast<int>(n);
}

// The smallest makespan that num_ctas CTAs can meet, searched in rounds of kMoeBalancePoints
// points each (the device tests them at once: two per warp, device/moe_schedule.cuh; the host's
// need_sum(T) returns the sum of the classes' needs at T, each capped at num_ctas + 1). The bracket: lo = the total cost over the CTAs (no allocation beats it), hi =
// 2 (lo + the largest tile cost) when that is feasible (it is unless rounding to whole tiles or the
// one-CTA-per-class minimum needs more: then tiny totals), else hi_safe = the max over the classes
// of (tiles + 1) * w, which needs one CTA per class. Round 0 tests hi = min(2 (lo + w_max),
// hi_safe) as its last point and the rest of [lo, hi] in 24ths; later rounds [lo, hi] in 25ths
// (hi is feasible), kMoeBalanceRounds in all when round 0 finds a feasible point, one more when it
// does not (then lo = that hi, hi = hi_safe): the bracket ends below 25^-4 of its start (the earlier
// search by thirds, 11 steps of 2 points in sequence, ended at 3^-11). Monotone needs make the
// first feasible point of a round the new hi and the point before it the new lo.
constexpr int kMoeBalancePoints = 24;
constexpr int kMoeBalanceRounds = 4;
FP4GEMM_HD float moe_balance_point(float lo, float hi, int round, int i) {
  if (round == 0 && i == kMoeBalancePoints - 1) return hi;
  const float frac = static_cast<float>(i + 1) * (round == 0 ? 1.0f / kMoeBalancePoints : 1.0f / (kMoeBalancePoints + 1));
  return fmaf(hi - lo, frac, lo);  // (fmaf: the same rounding on the host and the device)
}
// One round's update from the mask of its feasible points (bit i: point i).
FP4GEMM_HD void moe_balance_update(float& lo, float& hi, int round, unsigned feasible) {
  if (feasible == 0) {
    lo = moe_balance_point(lo, hi, round, kMoeBalancePoints - 1);
    return;
  }
#if defined(__CUDA_ARCH__)
  const int f = __ffs(static_cast<int>(feasible)) - 1;
#else
  const int f = __builtin_ctz(feasible);
#endif
  const float new_lo = f > 0 ? moe_balance_point(lo, hi, round, f - 1) : lo;
  hi = moe_balance_point(lo, hi, round, f);
  lo = new_lo;
}
// The search's state, one definition for the host's evaluation below and the device's parallel
// rounds (device/moe_schedule.cuh): the bracket [lo, hi], hi_safe, and the rounds to run.
struct MoeBalanceSearch {
  float lo, hi, hi_safe;
  int rounds;
};
// The start: lo = the total cost over the CTAs, hi = min(2 (lo + w_max), hi_safe).
FP4GEMM_HD MoeBalanceSearch moe_balance_start(float lo, float w_max, float hi_safe) {
  const float h2 = 2.0f * (lo + w_max);
  return MoeBalanceSearch{lo, h2 < hi_safe ? h2 : hi_safe, hi_safe, kMoeBalanceRounds};
}
// One round's step: round 0 with no feasible point moves the bracket to [hi, hi_safe] (feasible:
// one CTA per class) and adds a round; otherwise moe_balance_update.
FP4GEMM_HD void moe_balance_step(MoeBalanceSearch& b, int round, unsigned feasible) {
  if (round == 0 && feasible == 0) {
    b.lo = b.hi, b.hi = b.hi_safe, ++b.rounds;
    return;
  }
  moe_balance_update(b.lo, b.hi, round, feasible);
}
// The host's evaluation (tests; the device runs the rounds in parallel).
template <class NeedSum>
float moe_balance_makespan(float lo, float w_max, float hi_safe, int num_ctas, NeedSum&& need_sum) {
  MoeBalanceSearch b = moe_balance_start(lo, w_max, hi_safe);
  for (int r = 0; r < b.rounds; ++r) {
    unsigned feasible = 0;
    for (int i = 0; i < kMoeBalancePoints; ++i)
      feasible |= (need_sum(moe_balance_point(b.lo, b.hi, r, i)) <= num_ctas ? 1u : 0u) << i;
    moe_balance_step(b, r, feasible);
  }
  return b.hi;
}

// CTAs beyond its need that class l (of cost `cost` = tiles * w) takes from the `spare` ones: its
// share of them by cost, up to its cap. They do not lower the model's makespan but leave fewer
// CTAs running its last round. (Sharing all the CTAs by cost and raising each class to its need
// instead costs a remainder ranking, 16 dependent shuffles, in every prologue and measured 1-2 %
// slower than this on multi-class shapes, H200.)
FP4GEMM_HD int moe_class_extra(const MoeClassLoad& l, int need, int spare, float cost, float total_cost) {
  if (l.tiles <= 0 || !(total_cost > 0.0f) || spare <= 0) return 0;
  const int share = static_cast<int>(static_cast<float>(spare) * (cost / total_cost));
  const int room = l.cap - need;
  return share < room ? share : (room > 0 ? room : 0);
}

// The host's evaluation of the whole rule (tests; device/moe_schedule.cuh runs it one lane per
// class, its float sums in another order): out[c] CTAs for each of the `classes` (<= 16) loads.
// One class present: all the CTAs it can use, no search.
inline void moe_class_ctas(const MoeClassLoad* l, int classes, int num_ctas, int* out) {
  float hi = 0.0f, w_max = 0.0f, total_cost = 0.0f;
  int present = 0;
  for (int c = 0; c < classes; ++c) {
    if (l[c].tiles <= 0) continue;
    const float h = static_cast<float>(l[c].tiles + 1) * l[c].w;
    hi = h > hi ? h : hi;
    w_max = l[c].w > w_max ? l[c].w : w_max;
    total_cost += static_cast<float>(l[c].tiles) * l[c].w;
    ++present;
  }
  if (present <= 1) {
    for (int c = 0; c < classes; ++c) out[c] = l[c].tiles > 0 ? (l[c].cap < num_ctas ? l[c].cap : num_ctas) : 0;
    return;
  }
  auto need = [&](int c, float t) { return moe_class_need(l[c], 1.0f / l[c].w, t, num_ctas); };
  const float T = moe_balance_makespan(total_cost / static_cast<float>(num_ctas), w_max, hi, num_ctas, [&](float t) {
    int sum = 0;
    for (int c = 0; c < classes; ++c) sum += need(c, t);
    return sum;
  });
  int used = 0;
  for (int c = 0; c < classes; ++c) used += out[c] = need(c, T);
  for (int c = 0; c < classes; ++c)
    out[c] += moe_class_extra(l[c], out[c], num_ctas - used, static_cast<float>(l[c].tiles) * l[c].w, total_cost);
}

// Stream-K over a width class's bucket (decode-like runs, device/moe_schedule.cuh): the bucket's
// `count` tiles of `kblocks` k-blocks are count * kblocks units (tile-major), and the class's n
// CTAs take equal contiguous shares, CTA k the units [start(k), start(k + 1)). A CTA's pieces are
// the parts of the tiles its share touches. The CTA holding a tile's last k-block owns it (sums
// the partials, runs the epilogue); the others holding parts of it are its writers, consecutive
// CTAs. A CTA is a writer of at most one tile, the last its share touches, and runs that piece
// first, so an owner waits for pieces that were each their CTA's first: no CTA waits on a CTA
// that is itself waiting.
// Experts the device schedule's scratch holds (= detail::kMaxMoeExperts, host/core/moe_validate.hpp:
// the MoE plan checks the two agree).
constexpr int kMoeMaxExperts = 512;
constexpr int kMoeStreamKMaxPieces = 3;   // per CTA: a share of < 2 tiles touches at most 3 (eligible shares: 2)
constexpr int kMoeStreamKMinKblocks = 4;  // smallest share: fewer CTAs take part below it

// Whether a class of `count` tiles of `kblocks` k-blocks on n CTAs runs stream-K: at most 3/4 of a
// tile per CTA (whole tiles would leave a quarter or more of the class's CTAs idle), and K of at
// least kMoeStreamKMinKblocks k-blocks (every share is then < 1 tile + 1 k-block, so it touches at
// most 2 <= kMoeStreamKMaxPieces tiles). Measured on H200: 64 tiles on 132 CTAs (Mixtral's down
// projection at T 1) -36 %; 96 tiles neutral; 128 tiles on 132 CTAs +2 % (each tile split in two
// for 3 % of balance), 224 tiles neutral -- hence the 3/4. count * kblocks * n < 2^31 keeps the
// arithmetic below in 32 bits: a 64-bit division is a called routine, and its call in the GEMM's
// prologue made ptxas spill in the producer's and consumers' loops (every MoE shape 11-22 %
// slower).
constexpr bool moe_sk_eligible(int count, int kblocks, int n) {
  return count > 0 && n >= moe_sk_min_ctas(count) && kblocks >= kMoeStreamKMinKblocks &&
         static_cast<long long>(count) * kblocks * n < (1ll << 31);
}

// A class with one or more full rounds of whole tiles (count >= n) and a partial last round
// splits that round's r = count % n tiles by stream-K over its n CTAs instead: a makespan of
// count / n tiles instead of ceil(count / n). ncu of issue 20's decode shapes (H200, whole tiles
// only) had the SMs active 95 / 92 / 96 % of the GEMM at (a) / (b) / (c) -- (a)'s 512 tiles on 132
// CTAs are 3.88 rounds run as 4. A split costs each CTA a second piece (the wgmma drain, its
// hand-off, a shorter first piece), measured at roughly 8-14 k-blocks of the 16-token loop (H200:
// +1.1 % where it saved 12.4 k-blocks per CTA (K 1024), +1.5 % at 6.8, -1.2 % at 13.6, -2.9 % at
// 24.7; issue 20's (b) loses -2.6 % of W4A16 when its 32-token class's split, 12.2-12.8 k-blocks,
// is declined), so the round is split only where that saves at least kMoeSplitMinGain k-blocks per
// CTA: kblocks * (n - r) / n.
// The 16-token class loads two k-blocks per stage (stage pairs), so its k-block is cheaper and a
// split's fixed cost is more of them: (a)'s 16-token split (13.6 k-blocks saved per CTA) cost W4A4
// +2.0 % on the H200 and +8 % on an H100 (W4A16 +4 %), so that class splits from
// kMoeSplitMinGain16; the 32-token class keeps 12 ((b)'s, 12.2-12.8, still pays; 16 or 24 there
// cost +2.5 %). docs/PERF.md has the measurements.
constexpr int kMoeSplitMinGain = 12;
constexpr int kMoeSplitMinGain16 = 16;
constexpr int kMoeHybridMinKblocks = kMoeSplitMinGain;  // (no gain of that size with fewer k-blocks)
// The production gain of width class c (0: 16 tokens, 1: 32); the plan passes it to the kernel
// (MoeScheduleParams::split_gain16 / split_gain32) unless options.tuning overrides it.
constexpr int moe_split_min_gain(int c) { return c == 0 ? kMoeSplitMinGain16 : kMoeSplitMinGain; }

// How many of a splittable class's `count` tiles -- the bucket's last ones -- run stream-K on its n
// CTAs: all of them where moe_sk_eligible; with count >= n, the count % n tiles of the last round
// where splitting it saves >= min_gain k-blocks per CTA (the first count - count % n run
// whole, count / n per CTA); else none. (A share of the last round is < 1 tile, so it touches <= 2
// tiles: kMoeStreamKMaxPieces.)
// (min_gain: the class's MoeScheduleParams::split_gain16 / split_gain32, moe_split_min_gain(c)
// unless options.tuning says otherwise.)
constexpr int moe_sk_tiles(int count, int kblocks, int n, int min_gain = kMoeSplitMinGain) {
  if (moe_sk_eligible(count, kblocks, n)) return count;
  if (n <= 0 || count < n || kblocks < kMoeHybridMinKblocks) return 0;
  const int r = count % n;
  return r > 0 && static_cast<long long>(kblocks) * (n - r) >= static_cast<long long>(min_gain) * n &&
                 static_cast<long long>(r) * kblocks * n < (1ll << 31)
             ? r
             : 0;
}
// CTAs of the class that take part: every share >= kMoeStreamKMinKblocks units.
constexpr int moe_sk_ctas(int count, int kblocks, int n) {
  const int most = count * kblocks / kMoeStreamKMinKblocks;
  return most < 1 ? 1 : (most < n ? most : n);
}
constexpr int moe_sk_start(int count, int kblocks, int k, int n) {
  return static_cast<int>(static_cast<unsigned>(count * kblocks * k) / static_cast<unsigned>(n));
}
// The CTA whose share holds unit u: the largest k with start(k) <= u.
constexpr int moe_sk_cta_of(int u, int count, int kblocks, int n) {
  return static_cast<int>(static_cast<unsigned>((u + 1) * n - 1) / static_cast<unsigned>(count * kblocks));
}

// One piece of CTA k's share: tile `tile` (0-based in the bucket), k-blocks [kb_begin, kb_end);
// owner (the share holds the tile's last k-block) or a writer; the tile's writers are CTAs
// first_writer .. owner_cta - 1 (none when first_writer == owner_cta).
struct StreamKPiece {
  int tile, kb_begin, kb_end;
  bool owner;
  int first_writer, owner_cta;
};
// How many pieces CTA k's share has (0 .. kMoeStreamKMaxPieces when moe_sk_eligible).
constexpr int moe_sk_piece_count(int count, int kblocks, int k, int n) {
  if (k >= n || count <= 0) return 0;
  const int u0 = moe_sk_start(count, kblocks, k, n), u1 = moe_sk_start(count, kblocks, k + 1, n);
  return u1 <= u0 ? 0 : (u1 - 1) / kblocks - u0 / kblocks + 1;
}
// Piece i (< moe_sk_piece_count) of CTA k's share, the writer piece (if any) first: computed per
// index, no arrays (the kernel's threads 0..2 take one each).
constexpr StreamKPiece moe_sk_piece(int count, int kblocks, int k, int n, int i) {
  const int u0 = moe_sk_start(count, kblocks, k, n), u1 = moe_sk_start(count, kblocks, k + 1, n);
  const int t0 = u0 / kblocks, t1 = (u1 - 1) / kblocks;
  const bool writer_first = u1 < (t1 + 1) * kblocks;  // the share ends inside tile t1
  const int t = writer_first ? (i == 0 ? t1 : t0 + i - 1) : t0 + i;
  const int b = t * kblocks;
  const int lo = u0 > b ? u0 : b, hi = u1 < b + kblocks ? u1 : b + kblocks;
  return StreamKPiece{t, lo - b, hi - b, hi == b + kblocks, moe_sk_cta_of(b, count, kblocks, n),
                      moe_sk_cta_of(b + kblocks - 1, count, kblocks, n)};
}

// The cost model's figures (SchedulePolicy: per k-block, fixed + per token, for 128-row (wide) and
// 256-row (narrow) tiles), as the MoE plan passes them to the kernel.
struct MoeCostFigures {
  float wide_fixed, wide_per_token, narrow_fixed, narrow_per_token;
};

// Width class c's load (16 (c + 1) tokens, `tiles` tiles of `kblocks` k-blocks) on num_ctas CTAs,
// as step 3 of moe_schedule_cta builds it (and the host tests): the tile cost at the tile's height;
// with stream-K (the 16- and 32-token classes, K of >= kMoeStreamKMinKblocks k-blocks) up to one
// CTA per kMoeStreamKMinKblocks k-blocks, else one per tile; divisible from kMoeHybridMinKblocks.
FP4GEMM_HD MoeClassLoad moe_class_load(int c, int tiles, int kblocks, int num_ctas, int narrow_rows, bool stream_k,
                                           const MoeCostFigures& f) {
  const int tokens = 16 * (c + 1);
  const bool narrow_tile = tile_rows(tokens, narrow_rows) == 256;
  const bool splittable = stream_k && c <= 1 && kblocks >= kMoeStreamKMinKblocks;
  const long long most = static_cast<long long>(tiles) * (kblocks / kMoeStreamKMinKblocks);
  const int cap = splittable ? static_cast<int>(most < num_ctas ? most : static_cast<long long>(num_ctas)) : tiles;
  return MoeClassLoad{tiles,
                      narrow_tile ? f.narrow_fixed + f.narrow_per_token * tokens : f.wide_fixed + f.wide_per_token * tokens,
                      cap, splittable, splittable && kblocks >= kMoeHybridMinKblocks};
}

}  // namespace fp4gemm::detail
