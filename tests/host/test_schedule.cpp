// Scheduler arithmetic: every output element and every k-block is covered exactly once, and the
// split-K hand-off order can never deadlock (writers first in a CTA, owners last).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>

#include "host/core/schedule.hpp"
#include "fp4gemm/fp4gemm.hpp"

using namespace fp4gemm::detail;

namespace {

// The seed suite's shapes (SPEC 4): case 1..4 as {M_g, N, K} per group.
std::vector<ScheduleShape> seed_case(int index) {
  auto same_nk = [](std::initializer_list<int> ms, int n, int k) {
    std::vector<ScheduleShape> v;
    for (int m : ms) v.push_back({m, n, k});
    return v;
  };
  switch (index) {
    case 1: return same_nk({80, 176, 128, 72, 64, 248, 96, 160}, 4096, 7168);
    case 2: return same_nk({40, 76, 168, 72, 164, 148, 196, 160}, 7168, 2048);
    case 3: return same_nk({192, 320}, 3072, 4096);
    default: return same_nk({128, 384}, 4096, 1536);
  }
}

void check_schedule(const std::vector<ScheduleShape>& groups, int ctas, const SchedulePolicy& policy) {
  const Schedule s = build_schedule(groups, ctas, policy);
  SCOPED_TRACE(::testing::Message() << "groups=" << groups.size() << " ctas=" << ctas << " split=" << policy.split_k);
  ASSERT_EQ(s.cta_begin.size(), static_cast<std::size_t>(s.num_ctas) + 1 + (s.tiles.empty() ? 0 : 0));
  ASSERT_EQ(s.cta_class.size(), static_cast<std::size_t>(s.num_ctas));
  std::set<int> classes;
  for (const TileDesc& t : s.tiles) classes.insert(width_class(t.ntok));
  ASSERT_LE(s.num_ctas, std::max<int>(ctas, static_cast<int>(classes.size())));
  const bool overflow = s.num_ctas > ctas;  // more width classes than CTAs: whole tiles only
  // Coverage per group: every token range's tiles take tile_rows(ntok) weight rows each and
  // cover [0, n) exactly; the token ranges partition [0, m).
  for (std::size_t g = 0; g < groups.size(); ++g) {
    std::map<std::pair<int, int>, std::vector<int>> by_tokens;  // (tok0, ntok) -> row0s
    for (const TileDesc& t : s.tiles)
      if (t.group == static_cast<int>(g)) by_tokens[{t.tok0, t.ntok}].push_back(t.row0);
    if (groups[g].m == 0) {
      EXPECT_TRUE(by_tokens.empty());
      continue;
    }
    int next_tok = 0;
    for (auto& [range, row0s] : by_tokens) {
      const auto [tok0, ntok] = range;
      EXPECT_EQ(tok0, next_tok);
      EXPECT_GE(ntok, 1);
      EXPECT_LE(ntok, s.max_tile_tokens);
      EXPECT_LE(ntok, SchedulePolicy::kMaxTokens);
      next_tok = tok0 + ntok;
      const int rows = tile_rows(ntok, s.narrow_rows);
      std::sort(row0s.begin(), row0s.end());
      ASSERT_EQ(row0s.size(), static_cast<std::size_t>((groups[g].n + rows - 1) / rows));
      for (std::size_t i = 0; i < row0s.size(); ++i) EXPECT_EQ(row0s[i], static_cast<int>(i) * rows);
    }
    EXPECT_EQ(next_tok, groups[g].m);
  }
  // Every k-block of every tile exactly once; pieces of a CTA contiguous in (tile, kb) order.
  std::vector<std::vector<int>> seen(s.tiles.size());
  for (std::size_t i = 0; i < s.tiles.size(); ++i) seen[i].assign(s.tiles[i].kblocks, 0);
  std::vector<int> writers(s.tiles.size(), 0);
  std::set<int> slots;
  for (int c = 0; c < s.num_ctas; ++c) {
    ASSERT_LE(s.cta_begin[c], s.cta_begin[c + 1]);
    if (s.cta_begin[c] == s.cta_begin[c + 1]) continue;  // an idle CTA (whole-tile mode) exits at once
    const int cta_class = s.cta_class[c];
    EXPECT_GE(cta_class, 1);
    EXPECT_LE(cta_class, SchedulePolicy::kWidthClasses);
    for (int pi = s.cta_begin[c]; pi < s.cta_begin[c + 1]; ++pi) {
      const WorkPiece& p = s.pieces[pi];
      ASSERT_GE(p.tile, 0);
      ASSERT_LT(p.tile, static_cast<int>(s.tiles.size()));
      const TileDesc& t = s.tiles[p.tile];
      // The kernel runs one mainloop instantiation per CTA.
      EXPECT_EQ(bucket_class(t.ntok, policy.class_round), cta_class) << "CTA " << c << " mixes token-width classes";
      EXPECT_LE(width_class(t.ntok), cta_class);
      if (t.ntok <= SchedulePolicy::kNarrowTokens) EXPECT_LE(cta_class, 8) << "a narrow tile in a wide class";
      if (overflow) EXPECT_TRUE(p.kb_begin == 0 && p.kb_end == t.kblocks) << "no split-K past the resident CTAs";
      ASSERT_LT(p.kb_begin, p.kb_end);
      ASSERT_LE(p.kb_end, t.kblocks);
      for (int kb = p.kb_begin; kb < p.kb_end; ++kb) ++seen[p.tile][kb];
      if (p.kb_begin > 0) {  // writer: first piece of its CTA, unique slot in the tile's range
        EXPECT_EQ(pi, s.cta_begin[c]) << "a writer must be the first piece of its CTA";
        EXPECT_GE(p.slot, t.first_slot);
        EXPECT_LT(p.slot, t.first_slot + t.writers);
        EXPECT_TRUE(slots.insert(p.slot).second);
        ++writers[p.tile];
      } else {
        EXPECT_EQ(p.slot, -1);
        if (p.kb_end < t.kblocks) EXPECT_EQ(pi, s.cta_begin[c + 1] - 1) << "an owner waiting on writers must be last";
      }
      if (!policy.split_k) EXPECT_TRUE(p.kb_begin == 0 && p.kb_end == t.kblocks);
    }
  }
  for (std::size_t i = 0; i < s.tiles.size(); ++i) {
    EXPECT_EQ(writers[i], s.tiles[i].writers);
    for (int kb = 0; kb < s.tiles[i].kblocks; ++kb) EXPECT_EQ(seen[i][kb], 1) << "tile " << i << " kb " << kb;
  }
  // Shared epilogues (SchedulePolicy::share_epilogue): only then, only tiles of one writer whose
  // piece ends its CTA's range, every eligible tile shares, and the owner's slot is its own.
  std::vector<char> writer_last(s.tiles.size(), 1);
  for (int c = 0; c < s.num_ctas; ++c)
    for (int pi = s.cta_begin[c]; pi < s.cta_begin[c + 1]; ++pi)
      if (s.pieces[pi].slot >= 0 && pi + 1 < s.cta_begin[c + 1]) writer_last[s.pieces[pi].tile] = 0;
  for (std::size_t i = 0; i < s.tiles.size(); ++i) {
    const TileDesc& t = s.tiles[i];
    const bool eligible = policy.share_epilogue && t.writers == 1 && writer_last[i];
    EXPECT_EQ(t.owner_slot >= 0, eligible) << "tile " << i;
    if (t.owner_slot >= 0) EXPECT_TRUE(slots.insert(t.owner_slot).second) << "owner slot " << t.owner_slot;
  }
  EXPECT_EQ(static_cast<int>(slots.size()), s.num_slots);
  if (!slots.empty()) EXPECT_EQ(*slots.rbegin(), s.num_slots - 1);
  // Activation rows stacked group after group.
  int rows = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    EXPECT_EQ(s.act_row0[g], rows);
    rows += std::max(0, groups[g].m);
  }
  EXPECT_EQ(s.total_act_rows, rows);
}

}  // namespace

TEST(Schedule, TokenTiles) {
  EXPECT_TRUE(token_tiles(0).empty());
  for (int m : {1, 7, 8, 40, 127, 128, 129, 255, 256, 257, 300, 320, 384, 513, 1000, 8192}) {
    const auto t = token_tiles(m);
    int next = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
      EXPECT_EQ(t[i].first, next);
      EXPECT_LE(t[i].second, 256);
      if (i + 1 < t.size()) EXPECT_EQ(t[i].second % 8, 0);
      next += t[i].second;
    }
    EXPECT_EQ(next, m);
    EXPECT_EQ(t.size(), static_cast<std::size_t>((m + 255) / 256));
  }
  EXPECT_EQ(token_tiles(320)[0].second, 160);  // balanced, not 256 + 64
  EXPECT_EQ(token_tiles(384)[1].second, 192);
  // Narrower maxima: ceil(m / max) near-equal tiles, multiples of 8 but the last.
  for (int max : {8, 64, 96, 128, 192}) {
    for (int m : {1, 8, 100, 128, 129, 384, 1000}) {
      const auto t = token_tiles(m, max);
      int next = 0;
      for (std::size_t i = 0; i < t.size(); ++i) {
        EXPECT_EQ(t[i].first, next);
        EXPECT_LE(t[i].second, max);
        if (i + 1 < t.size()) EXPECT_EQ(t[i].second % 8, 0);
        next += t[i].second;
      }
      EXPECT_EQ(next, m);
      EXPECT_EQ(t.size(), static_cast<std::size_t>((m + max - 1) / max)) << "m " << m << " max " << max;
    }
  }
  EXPECT_EQ(token_tiles(384, 128).size(), 3u);
  EXPECT_EQ(token_tiles(384, 128)[2].second, 128);
}

TEST(Schedule, TileRows) {
  EXPECT_EQ(tile_rows(1, 256), 256);
  EXPECT_EQ(tile_rows(128, 256), 256);
  EXPECT_EQ(tile_rows(128, 128), 128);
  EXPECT_EQ(tile_rows(129, 256), 128);
  EXPECT_EQ(tile_rows(256, 256), 128);
  // Few tiles: narrow tiles stay at 128 rows (rows 0, 128, ..., 896).
  const Schedule small = build_schedule(std::vector<ScheduleShape>{{64, 1000, 128}}, 132);
  EXPECT_EQ(small.narrow_rows, 128);
  ASSERT_EQ(small.tiles.size(), 8u);
  // Enough tiles for every CTA: 256 rows (case 1 of the seed suite: 5 narrow groups x 16 + 3 wide x 32).
  const Schedule big = build_schedule(seed_case(1), 132);
  EXPECT_EQ(big.narrow_rows, 256);
  EXPECT_EQ(big.tiles.size(), 5u * 16 + 3u * 32);
  // Case 4 (128 and 384 tokens): 16 + 64 = 80 tiles < 132 CTAs -> 128 rows.
  const std::vector<ScheduleShape> case4 = seed_case(4);
  EXPECT_EQ(build_schedule(case4, 132).narrow_rows, 128);
  // The policy can fix the height either way (measurement knob Tuning::narrow_rows); the schedule
  // stays valid, and every narrow tile starts on a multiple of its height.
  for (int rows : {128, 256}) {
    SchedulePolicy fixed;
    fixed.narrow_rows = rows;
    fixed.tile_auto = false;
    fixed.max_tile_tokens = 128;
    const Schedule f = build_schedule(case4, 132, fixed);
    EXPECT_EQ(f.narrow_rows, rows);
    EXPECT_EQ(f.tiles.size(), 4u * 4096 / rows);  // 4 token tiles of 128 per row block
    for (const TileDesc& t : f.tiles) EXPECT_EQ(t.row0 % rows, 0);
    check_schedule(case4, 132, fixed);
  }
  SchedulePolicy fixed128;
  fixed128.narrow_rows = 128;  // on a problem whose plan would take 256
  const Schedule f = build_schedule(std::vector<ScheduleShape>{{64, 8192, 7168}, {96, 8192, 7168}, {80, 8192, 7168}}, 132, fixed128);
  EXPECT_EQ(f.narrow_rows, 128);
  EXPECT_EQ(f.tiles.size(), 3u * 64);
}

TEST(Schedule, SeedCasesBalanced) {
  const std::vector<std::vector<ScheduleShape>> cases = {seed_case(1), seed_case(2), seed_case(3), seed_case(4)};
  SchedulePolicy stream_k, midpoint;  // hand-off-aware packing / k-block midpoints
  stream_k.split_auto = midpoint.split_auto = false;
  stream_k.tile_auto = midpoint.tile_auto = false;
  midpoint.balance_handoffs = false;
  for (const auto& groups : cases) {
    for (int ctas : {132, 114}) {
      check_schedule(groups, ctas, {});
      check_schedule(groups, ctas, stream_k);
      check_schedule(groups, ctas, midpoint);
      const Schedule s = build_schedule(groups, ctas, stream_k), m = build_schedule(groups, ctas, midpoint);
      EXPECT_EQ(s.num_ctas, ctas);
      EXPECT_EQ(m.num_ctas, ctas);
      // Midpoints balance the k-blocks but not the hand-offs. The plan keeps the packing unless
      // the midpoints estimate cheaper (the packing can lock into a pattern with an idle CTA:
      // case 3 on 114 CTAs), so it is never estimated slower.
      EXPECT_LE(s.est_makespan, m.est_makespan) << "groups " << groups.size() << " ctas " << ctas;
    }
  }
  // Seed case 3 (72 tiles of 64 k-blocks on 132 CTAs, every tile split): with the hand-offs in
  // the packing, the estimate is well below the midpoints' (measured on an H200: 36.0 -> 33.2 us).
  const std::vector<ScheduleShape> case3 = seed_case(3);
  EXPECT_LT(build_schedule(case3, 132, stream_k).est_makespan, 0.95 * build_schedule(case3, 132, midpoint).est_makespan);
  // Every CTA gets work there: the smallest budget found by bisection left 4 of the 160-token
  // bucket's 84 CTAs empty, a lower budget fits all 84.
  for (const Schedule& s : {build_schedule(case3, 132, stream_k), build_schedule(case3, 132)})
    for (int c = 0; c < s.num_ctas; ++c) EXPECT_LT(s.cta_begin[c], s.cta_begin[c + 1]) << "case 3, CTA " << c;
}

// Stream-K or whole tiles: the plan keeps the schedule with the smaller estimated makespan
// (hand-offs charged). On the shapes measured on an H200 that is the faster one:
// stream-K for seed cases 1-3 and 256 tokens (T 192: 21.2 us vs 29.7 whole at 256), whole tiles
// for seed case 4 (128 x 128 tiles), dense 2048^2 x 512 and 1024 tokens.
TEST(Schedule, SplitOrWholeTiles) {
  struct Case {
    std::vector<ScheduleShape> groups;
    bool whole_faster;
  };
  const std::vector<Case> cases = {
      {seed_case(1), false},
      {seed_case(2), false},
      {seed_case(3), false},
      {seed_case(4), true},
      {{{2048, 2048, 512}}, true},
      {{{1024, 4096, 2048}}, true},
      {{{256, 4096, 2048}}, false},
  };
  for (const Case& c : cases) {
    // At the token-tile width the plan picks, stream-K and whole tiles are both built and the
    // cheaper estimate kept.
    const Schedule a = build_schedule(c.groups, 132);
    SchedulePolicy split, whole;
    split.tile_auto = whole.tile_auto = false;
    split.max_tile_tokens = whole.max_tile_tokens = a.max_tile_tokens;
    split.split_auto = false;
    whole.split_k = false;
    const Schedule s = build_schedule(c.groups, 132, split), w = build_schedule(c.groups, 132, whole);
    EXPECT_FALSE(w.split());  // (stream-K may still keep every tile whole where hand-offs cost more)
    EXPECT_EQ(a.est_makespan, std::min(s.est_makespan, w.est_makespan));
    EXPECT_EQ(a.split(), !c.whole_faster) << "groups " << c.groups.size() << ", m0 " << c.groups[0].m;
    check_schedule(c.groups, 132, {});
  }
  // Without hand-off charges, stream-K (balanced within a few k-blocks) always looks cheaper.
  SchedulePolicy free_handoff;
  free_handoff.tile_auto = false;
  free_handoff.handoff_per_elem = free_handoff.owner_read_per_elem = 0;
  free_handoff.simpler_margin = 0;
  EXPECT_TRUE(build_schedule(seed_case(4), 132, free_handoff).split());
}

// Token-tile width: the plan also tries narrower token tiles and keeps the smallest estimated
// makespan. Seed case 4 (96 tiles of 128 x <=192 on 132 CTAs at width 256) gets 128 whole
// 128 x 128 tiles; seed cases 1-3, whose tiles outnumber the CTAs, keep width 256.
TEST(Schedule, TokenTileWidth) {
  const std::vector<ScheduleShape> case4 = seed_case(4);
  const Schedule a = build_schedule(case4, 132);
  EXPECT_EQ(a.max_tile_tokens, 128);
  EXPECT_FALSE(a.split());
  EXPECT_EQ(a.tiles.size(), 128u);
  for (const TileDesc& t : a.tiles) EXPECT_EQ(t.ntok, 128);
  for (int width : SchedulePolicy::kTileTokenChoices) {  // the choice is the cheapest candidate
    SchedulePolicy fixed;
    fixed.tile_auto = false;
    fixed.max_tile_tokens = width;
    const Schedule f = build_schedule(case4, 132, fixed);
    EXPECT_EQ(f.max_tile_tokens, width);
    EXPECT_LE(a.est_makespan, f.est_makespan) << "width " << width;
  }
  const std::vector<std::vector<ScheduleShape>> many_tiles = {seed_case(1), seed_case(2), seed_case(3), {{8192, 8192, 1024}}};
  for (const auto& groups : many_tiles) EXPECT_EQ(build_schedule(groups, 132).max_tile_tokens, 256);
  // Without the search the policy's width is kept.
  SchedulePolicy fixed;
  fixed.tile_auto = false;
  EXPECT_EQ(build_schedule(case4, 132, fixed).max_tile_tokens, 256);
  check_schedule(case4, 132, {});
}

TEST(Schedule, RandomProblems) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    const int g = 1 + rng() % 64;
    std::vector<ScheduleShape> groups;
    for (int i = 0; i < g; ++i) {
      const int m = (rng() % 5 == 0) ? 0 : static_cast<int>(rng() % 700);
      const int n = 1 + rng() % 1500;
      const int k = 16 * (1 + rng() % 300);
      groups.push_back({m, n, k});
    }
    SchedulePolicy policy;
    policy.split_k = iter % 3 != 0;
    policy.split_auto = iter % 2 == 0;
    policy.class_round = 1 << (iter % 4);  // 1, 2, 4, 8
    policy.tile_auto = iter % 5 != 0;
    if (iter % 7 == 0) policy.max_tile_tokens = 8 * (1 + rng() % 32);
    policy.share_epilogue = iter % 2 == 1;
    check_schedule(groups, 1 + rng() % 140, policy);
  }
}

// The dual GEMM's GPU MODE shapes (2N kernel rows): the stream-K ones share the epilogue of their
// two-piece tiles when the policy asks for it (256 x 4096 x 7168: all 64 tiles).
TEST(Schedule, SharedEpilogues) {
  SchedulePolicy share;
  share.share_epilogue = true;
  for (const ScheduleShape g : {ScheduleShape{256, 8192, 7168}, ScheduleShape{256, 6144, 4096},
                                ScheduleShape{512, 6144, 7168}, ScheduleShape{512, 8192, 7168}}) {
    check_schedule({g}, 132, share);
    check_schedule({g}, 132, {});
  }
  const Schedule s = build_schedule(std::vector<ScheduleShape>{{256, 8192, 7168}}, 132, share);
  int shared = 0;
  for (const TileDesc& t : s.tiles) shared += t.owner_slot >= 0;
  EXPECT_EQ(shared, 64);
  EXPECT_EQ(s.num_slots, 128);
}

// The cost model steers the split: a dearer 256-row k-block gives the narrow buckets more CTAs,
// and an epilogue term keeps every schedule valid and balanced by its own measure.
TEST(Schedule, CostModelParameters) {
  const std::vector<ScheduleShape> groups = seed_case(1);
  auto narrow_ctas = [&](const SchedulePolicy& policy) {
    const Schedule s = build_schedule(groups, 132, policy);
    int n = 0;
    for (int c : s.cta_class) n += c <= SchedulePolicy::kNarrowTokens / 16 ? 1 : 0;
    return n;
  };
  SchedulePolicy base, cheap, dear;  // at width 256 (a cheap narrow tile also moves the width search)
  base.tile_auto = cheap.tile_auto = dear.tile_auto = false;
  cheap.narrow_fixed = 100;
  dear.narrow_fixed = 1000;
  EXPECT_LT(narrow_ctas(cheap), narrow_ctas(base));
  EXPECT_GT(narrow_ctas(dear), narrow_ctas(base));
  SchedulePolicy epi;
  epi.epilogue_per_elem = 0.05;
  check_schedule(groups, 132, epi);
  EXPECT_LT(build_schedule(groups, 132, epi).imbalance, 1.10);
  epi.split_k = false;
  check_schedule(groups, 132, epi);
}

TEST(Schedule, EmptyAndTiny) {
  check_schedule({}, 132, {});
  check_schedule({{0, 128, 64}, {0, 64, 64}}, 132, {});
  check_schedule({{1, 1, 16}}, 132, {});
  const Schedule s = build_schedule(std::vector<ScheduleShape>{{1, 1, 16}}, 132);
  EXPECT_EQ(s.num_ctas, 1);  // one k-block of work: one CTA
}

// Issue 19 item 9: the stacked activation rows are addressed with 32-bit ints; a total M past
// 2^31 - 1 must be rejected (naming the group where it overflows), not wrap around.
TEST(Schedule, TotalRowsPastInt32Rejected) {
  const int big = 1 << 30;
  // Empty groups (and K = 0 ones) add nothing; the third real group crosses 2^31 - 1.
  const std::vector<ScheduleShape> groups{{big, 8, 64}, {0, 0, 0}, {big - 1, 8, 64}, {5, 0, 0}, {2, 8, 64}};
  try {
    (void)build_schedule(groups, 132);
    ADD_FAILURE() << "a total M of 2^31 + 1 rows was accepted";
  } catch (const fp4gemm::Error& e) {
    EXPECT_EQ(e.argument(), "groups[4].m") << e.what();
    EXPECT_EQ(e.group(), 4);
    EXPECT_NE(std::string(e.what()).find("2^31"), std::string::npos) << e.what();
  }
  // Exactly 2^31 - 1 rows is fine as far as the row count goes (checked before any tile is built).
}

// Issue 19 item 1: groups with M = 0 get no tiles and no workspace rows, whatever their N and K.
TEST(Schedule, EmptyGroupsGetNothing) {
  const std::vector<ScheduleShape> groups{{0, 0, 0}, {200, 256, 512}, {0, 0, 0}, {100, 256, 512}, {0, 4096, 7168}};
  const Schedule s = build_schedule(groups, 132);
  for (const TileDesc& t : s.tiles) EXPECT_TRUE(t.group == 1 || t.group == 3) << "tile of empty group " << t.group;
  EXPECT_EQ(s.total_act_rows, 300);
  EXPECT_EQ(s.act_row0[1], 0);
  EXPECT_EQ(s.act_row0[3], 200);
  EXPECT_EQ(s.max_kblocks, 8);
}
