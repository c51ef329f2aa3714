// Builds the stream-K work list of the fused kernel (see src/device/schedule.hpp).
#include "host/core/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail {

std::vector<std::pair<int, int>> token_tiles(int m, int max_tokens) {
  std::vector<std::pair<int, int>> out;
  const TokenSplit s = token_split(m, std::clamp(max_tokens / 8 * 8, 8, SchedulePolicy::kMaxTokens));
  for (int i = 0; i < s.count; ++i) out.emplace_back(i * s.size, i + 1 < s.count ? s.size : s.last);
  return out;
}

namespace {

Schedule build(std::span<const ScheduleShape> groups, int max_ctas, const SchedulePolicy& policy) {
  Schedule s;
  s.max_tile_tokens = policy.max_tile_tokens;
  s.act_row0.resize(groups.size());
  // Rows of the stacked activation workspace: TMA coordinates and the tiles' act_row0 are 32-bit.
  std::int64_t total_rows = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].m <= 0 || groups[g].n <= 0 || groups[g].k <= 0) continue;
    total_rows += groups[g].m;
    if (total_rows > std::numeric_limits<int>::max())
      throw Error("groups[" + std::to_string(g) + "].m", static_cast<int>(g),
                  "the total M over groups 0.." + std::to_string(g) + " is " + std::to_string(total_rows) +
                      ", more than 2^31 - 1 rows (the fused kernel addresses its activation workspace with "
                      "32-bit rows); split the call");
  }
  // 1. Tiles, group by group; a group's token tiles of one weight row-block are adjacent so
  //    their repeated weight reads are close in time.
  // Narrow tiles take 256 rows only when that still leaves a tile per CTA.
  long long tiles256 = 0;
  for (const ScheduleShape& sh : groups) {
    if (sh.m <= 0 || sh.n <= 0 || sh.k <= 0) continue;
    for (const auto& tt : token_tiles(sh.m, policy.max_tile_tokens)) tiles256 += (sh.n + tile_rows(tt.second, 256) - 1) / tile_rows(tt.second, 256);
  }
  s.narrow_rows = policy.narrow_rows != 0 ? policy.narrow_rows : (tiles256 >= max_ctas ? 256 : 128);
  int act_rows = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const ScheduleShape& sh = groups[g];
    s.act_row0[g] = act_rows;
    if (sh.m <= 0 || sh.n <= 0 || sh.k <= 0) continue;
    const int kblocks = (sh.k + SchedulePolicy::kBlockK - 1) / SchedulePolicy::kBlockK;
    s.max_kblocks = std::max(s.max_kblocks, kblocks);
    const auto toks = token_tiles(sh.m, policy.max_tile_tokens);
    for (int row0 = 0; row0 < sh.n; row0 += 128)
      for (const auto& [tok0, ntok] : toks)
        if (row0 % tile_rows(ntok, s.narrow_rows) == 0)
          s.tiles.push_back(TileDesc{static_cast<int>(g), row0, tok0, ntok, act_rows + tok0, kblocks, 0, -1, -1});
    act_rows += sh.m;
  }
  s.total_act_rows = act_rows;
  if (s.tiles.empty()) {
    s.cta_begin = {0};
    return s;
  }

  // 2. Cost of each tile's k-blocks. The kernel compiles one mainloop per token-width class
  //    (tile tokens / 16, rounded up) and a CTA runs a single class, so the tiles are bucketed by
  //    class and every bucket gets its own CTAs (see device/schedule.hpp).
  // Per tile: its k-block cost, epilogue, and a split-K hand-off's cost to the writer (`hand`)
  // and to the owner (`read`, per writer), the last three per output (and FP32 partial) element.
  const std::size_t nt = s.tiles.size();
  std::vector<double> kcost(nt), epi(nt), hand(nt), read(nt);
  // Cost of a tile's k-blocks [0, kb): the epilogue is charged to k-block 0 (held by the owner).
  auto kb_start = [&](std::size_t i, int kb) { return kb * kcost[i] + (kb > 0 ? epi[i] : 0.0); };
  auto kb_mid = [&](std::size_t i, int kb) { return 0.5 * (kb_start(i, kb) + kb_start(i, kb + 1)); };
  auto tile_cost = [&](std::size_t i) { return kb_start(i, s.tiles[i].kblocks); };
  std::vector<std::vector<int>> bucket(SchedulePolicy::kWidthClasses + 1);
  for (std::size_t i = 0; i < s.tiles.size(); ++i) {
    const TileDesc& t = s.tiles[i];
    const int rows = tile_rows(t.ntok, s.narrow_rows);
    const int n = (t.ntok + 7) / 8 * 8;
    kcost[i] = rows == 256 ? policy.narrow_fixed + policy.narrow_per_token * n : policy.wide_fixed + policy.wide_per_token * n;
    kcost[i] = std::max(kcost[i], 1.0);
    const double elems = static_cast<double>(rows) * n;  // tokens rounded to 8
    epi[i] = policy.epilogue_per_elem * elems;
    hand[i] = policy.handoff_per_elem * elems;
    read[i] = policy.owner_read_per_elem * elems;
    bucket[bucket_class(t.ntok, policy.class_round)].push_back(static_cast<int>(i));
  }
  std::vector<int> classes;
  for (int c = 1; c <= SchedulePolicy::kWidthClasses; ++c)
    if (!bucket[c].empty()) classes.push_back(c);
  const int nb = static_cast<int>(classes.size());
  // More classes than CTAs: one CTA per class, whole tiles (no split-K: a CTA that is not
  // resident yet must never be waited on).
  const bool split_k = policy.split_k && nb <= max_ctas;
  const bool fill = split_k && policy.balance_handoffs;
  std::vector<double> bcost(nb, 0.0);
  std::vector<long long> bcap(nb, 0);  // most CTAs a bucket can use
  for (int b = 0; b < nb; ++b)
    for (int i : bucket[classes[b]]) {
      bcost[b] += tile_cost(i);
      bcap[b] += split_k ? s.tiles[i].kblocks : 1;
    }

  // Hand-off-aware stream-K (policy.balance_handoffs): a bucket's CTAs are filled in order up to
  // a common budget, each piece paying what it adds besides its k-blocks -- a writer its partial
  // out (`hand`), the owner of a split tile one partial in per writer (`read`), a tile's owner
  // its epilogue -- so the CTAs that finish tiles get fewer k-blocks. Pieces end where the
  // budget does, so a writer piece can only open a CTA and an owner's partial piece only close
  // one. An owner reads one partial per writer, so it is charged for as many as the rest of its
  // tile needs (writers of `cap` k-blocks), and it cannot read before its writers are done: a
  // writer (first in its CTA) ends early enough for the owner's reads to fit the budget, and the
  // budget fails if the owner's CTA, reads after max(own work, writers' end), overflows it.
  // pack() returns the CTAs used (a huge count when the budget fails); on_piece(cta, tile,
  // kb_begin, kb_end) receives the pieces.
  auto pack = [&](int b, double budget, const auto& on_piece) {
    int cta = 0;
    double load = 0;
    bool overflow = false;
    for (int i : bucket[classes[b]]) {
      const int kblocks = s.tiles[i].kblocks;
      const double kc = kcost[i], part_out = hand[i], part_in = read[i];
      double owner_pre = 0, writer_end = 0;  // the owner's CTA before its reads; its writers' latest end
      int reads = 0, writers = 0, kb = 0;    // partials the owner was charged for / has
      while (kb < kblocks) {
        const int left = kblocks - kb;
        const double start = kb > 0 ? part_out : epi[i];  // partial out, or the epilogue
        // A writer (always first in its CTA) must end in time for the owner to read its partial
        // and then store the tile.
        const double limit = kb > 0 ? budget - reads * part_in - epi[i] : budget;
        int take = left, w_take = 0;
        if (load + start + left * kc > limit) {
          if (kb > 0) {  // a writer going on: as many k-blocks as fit
            take = std::min(left - 1, static_cast<int>(std::floor((limit - load - start) / kc)));
          } else {  // an owner, charged one read per writer that the rest of the tile needs
            take = 0;
            for (int w = 1; w <= left; ++w) {
              const int cap = static_cast<int>(std::floor((budget - part_out - w * part_in) / kc));  // per writer
              const int t = std::min(left - 1, static_cast<int>(std::floor((budget - load - start - w * part_in) / kc)));
              if (cap < 1 || t <= 0) break;
              if ((left - t + cap - 1) / cap <= w) {
                take = t, w_take = w;
                break;
              }
            }
          }
          if (take <= 0) {
            if (load > 0) {  // nothing fits here: next CTA
              ++cta, load = 0;
              continue;
            }
            take = 1, w_take = kb > 0 ? 0 : 1;  // an empty CTA takes at least one k-block
          }
        }
        on_piece(cta, i, kb, kb + take);
        load += start + take * kc;
        if (w_take > 0) {  // the owner of a split tile: its CTA closes after its reads
          owner_pre = load - epi[i], reads = w_take, writers = 0, writer_end = 0;
          load += reads * part_in;
        }
        if (kb > 0) {  // a writer: the owner reads the last partial in, then stores the tile
          writer_end = std::max(writer_end, load);
          if (std::max(owner_pre, writer_end) + std::max(++writers, reads) * part_in + epi[i] > budget) overflow = true;
        }
        kb += take;
        if (kb < kblocks) ++cta, load = 0;  // the CTA is full; the tile goes on in the next
      }
    }
    return overflow ? std::numeric_limits<int>::max() : cta + (load > 0 ? 1 : 0);
  };
  // The smallest budget (bisection, to 0.1 %) for which bucket b fits `ctas` CTAs.
  auto min_budget = [&](int b, int ctas) {
    auto fits = [&](double budget) { return pack(b, budget, [](int, int, int, int) {}) <= ctas; };
    double lo = 0, hi = std::max(bcost[b] / ctas, 1.0);
    while (!fits(hi)) lo = hi, hi *= 1.5;
    for (int it = 0; it < 40 && hi - lo > 1e-3 * hi; ++it) {
      const double mid = 0.5 * (lo + hi);
      (fits(mid) ? hi : lo) = mid;
    }
    // pack()'s CTA count is not monotonic in the budget: greedy packing can lock into a pattern
    // that leaves CTAs of the bucket empty at `hi` (seed case 3: 4 of 84) while a lower budget,
    // below a failing one, fits all of them. Then scan from the ideal split up to `hi`.
    if (pack(b, hi, [](int, int, int, int) {}) == ctas) return hi;
    const double ideal = bcost[b] / ctas;
    for (int i = 0; i < 64; ++i) {
      const double x = ideal + (hi - ideal) * i / 64;
      if (fits(x)) return x;
    }
    return hi;
  };

  // CTAs per bucket: one each, then each further CTA to the bucket with the largest cost per CTA
  // (with hand-offs balanced: the largest packed budget).
  std::vector<int> bctas(nb, 1);
  std::vector<double> budget(nb, 0.0);
  auto per_cta = [&](int b) { return fill ? budget[b] : bcost[b] / bctas[b]; };
  if (fill)
    for (int b = 0; b < nb; ++b) budget[b] = min_budget(b, 1);
  for (int extra = std::max(0, max_ctas - nb); extra > 0; --extra) {
    int best = -1;
    for (int b = 0; b < nb; ++b)
      if (bctas[b] < bcap[b] && (best < 0 || per_cta(b) > per_cta(best))) best = b;
    if (best < 0) break;
    ++bctas[best];
    if (fill) budget[best] = min_budget(best, bctas[best]);
  }

  // 3. Stream-K inside each bucket: with hand-offs balanced, pack() at the bucket's budget;
  //    otherwise every k-block (or whole tile) goes to the bucket CTA whose cost range holds its
  //    midpoint. Either way assignments are non-decreasing along the sequence, so each CTA's
  //    range is contiguous.
  s.cta_begin.assign(1, 0);
  std::vector<double> cta_cost;
  for (int b = 0; b < nb; ++b) {
    const int ctas = bctas[b];
    const int first_cta = s.num_ctas;
    const double target = bcost[b] / ctas;
    cta_cost.resize(first_cta + ctas, 0.0);
    int current = 0;
    double before = 0;
    auto open_cta = [&](int cta) {
      while (current < cta) {
        ++current;
        s.cta_begin.push_back(static_cast<int>(s.pieces.size()));
      }
    };
    auto cta_of = [&](double mid) { return std::min(ctas - 1, static_cast<int>(mid / target)); };
    auto add_piece = [&](std::size_t i, int kb, int end) {
      TileDesc& t = s.tiles[i];
      WorkPiece piece{static_cast<int>(i), kb, end, -1};
      if (kb > 0) {  // a writer: partial to a slot, consumed by the owner
        if (t.writers == 0) t.first_slot = s.num_slots;
        piece.slot = s.num_slots++;
        ++t.writers;
      }
      s.pieces.push_back(piece);
      cta_cost[first_cta + current] += kb_start(i, end) - kb_start(i, kb);
    };
    if (fill) {
      pack(b, budget[b], [&](int cta, int i, int kb, int end) {
        open_cta(cta);
        add_piece(i, kb, end);
      });
    } else {
      for (int i : bucket[classes[b]]) {
        TileDesc& t = s.tiles[i];
        if (!split_k) {
          open_cta(std::max(cta_of(before + 0.5 * tile_cost(i)), current));
          s.pieces.push_back(WorkPiece{i, 0, t.kblocks, -1});
          cta_cost[first_cta + current] += tile_cost(i);
          before += tile_cost(i);
          continue;
        }
        int kb = 0;
        while (kb < t.kblocks) {
          open_cta(std::max(cta_of(before + kb_mid(i, kb)), current));
          // Extend the piece while the next k-blocks stay on this CTA.
          int end = kb + 1;
          while (end < t.kblocks && cta_of(before + kb_mid(i, end)) <= current) ++end;
          add_piece(i, kb, end);
          kb = end;
        }
        before += tile_cost(i);
      }
    }
    open_cta(ctas - 1);
    s.cta_begin.push_back(static_cast<int>(s.pieces.size()));
    s.cta_class.insert(s.cta_class.end(), ctas, classes[b]);
    s.num_ctas += ctas;
  }
  // Makespan estimate with the split-K hand-offs: a writer piece charges its CTA handoff_per_elem
  // per element of the tile's FP32 partial, the owner's CTA owner_read_per_elem per writer, and
  // the owner cannot start reading before its writers (each first in its CTA) are done; its
  // epilogue comes after the reads.
  std::vector<double> writers_end(s.tiles.size(), 0.0);
  for (int c = 0; c < s.num_ctas; ++c)
    if (s.cta_begin[c] < s.cta_begin[c + 1]) {
      const WorkPiece& p = s.pieces[s.cta_begin[c]];
      if (p.slot >= 0)
        writers_end[p.tile] = std::max(writers_end[p.tile], hand[p.tile] + (p.kb_end - p.kb_begin) * kcost[p.tile]);
    }
  double sum = 0;
  for (int c = 0; c < s.num_ctas; ++c) {
    double cost = cta_cost[c], after = 0;
    for (int pi = s.cta_begin[c]; pi < s.cta_begin[c + 1]; ++pi) {
      const WorkPiece& piece = s.pieces[pi];
      if (piece.slot >= 0) {
        cost += hand[piece.tile];
      } else if (s.tiles[piece.tile].writers > 0) {  // an owner (last in its CTA): reads, then stores
        after = read[piece.tile] * s.tiles[piece.tile].writers + epi[piece.tile];
        cost = std::max(cost - epi[piece.tile], writers_end[piece.tile]);
      }
    }
    cost += after;
    s.est_makespan = std::max(s.est_makespan, cost);
    sum += cost;
  }
  s.imbalance = s.est_makespan / (sum / s.num_ctas);
  return s;
}


// Stream-K or whole tiles at the policy's token-tile width, whichever is estimated cheaper.
Schedule build_split_or_whole(std::span<const ScheduleShape> groups, int max_ctas, const SchedulePolicy& policy) {
  Schedule split = build(groups, max_ctas, policy);
  if (policy.split_k && policy.balance_handoffs && split.split()) {
    // The packing fills CTAs greedily and can lock into a pattern that leaves CTAs idle (seed
    // case 3 on 114 CTAs: 2 tiles per 3 CTAs, one CTA empty, the other bucket short of one);
    // the k-block midpoints then estimate cheaper, and are kept.
    SchedulePolicy midpoints = policy;
    midpoints.balance_handoffs = false;
    Schedule m = build(groups, max_ctas, midpoints);
    if (m.est_makespan < split.est_makespan) split = std::move(m);
  }
  if (!policy.split_k || !policy.split_auto || !split.split()) return split;
  SchedulePolicy whole_policy = policy;
  whole_policy.split_k = false;
  Schedule whole = build(groups, max_ctas, whole_policy);
  return whole.est_makespan <= split.est_makespan * (1 + policy.simpler_margin) ? whole : split;
}

}  // namespace

// SchedulePolicy::share_epilogue: a tile split in two (one writer) shares its epilogue when the
// writer's piece is the last piece of its CTA -- a sharing writer waits for the owner's partial,
// and a wait at the end of a CTA's range holds nothing queued behind it (a writer piece first in
// a longer range would wait on the owner's whole range, and that owner's first piece on its own
// owner's, ...). The owner's piece is last in its CTA already. One writer, because the sums'
// order must not depend on who finishes: o + w is w + o, but a second writer's ((o + w0) + w1)
// would need a second register copy of its tile. (The cost model still charges the owner the
// whole epilogue: the choice between schedules is made as without sharing.)
void mark_shared_epilogues(Schedule& s) {
  std::vector<char> eligible(s.tiles.size(), 1);
  for (int c = 0; c < s.num_ctas; ++c)
    for (int pi = s.cta_begin[c]; pi < s.cta_begin[c + 1]; ++pi)
      if (s.pieces[pi].slot >= 0 && pi + 1 < s.cta_begin[c + 1]) eligible[s.pieces[pi].tile] = 0;
  for (std::size_t t = 0; t < s.tiles.size(); ++t)
    if (s.tiles[t].writers == 1 && eligible[t]) s.tiles[t].owner_slot = s.num_slots++;
}

Schedule build_schedule(std::span<const ScheduleShape> groups, int max_ctas, const SchedulePolicy& policy) {
  Schedule best = build_split_or_whole(groups, max_ctas, policy);
  if (policy.tile_auto) {
    for (int width : SchedulePolicy::kTileTokenChoices) {
      if (width >= policy.max_tile_tokens) continue;
      SchedulePolicy narrower = policy;
      narrower.max_tile_tokens = width;
      Schedule s = build_split_or_whole(groups, max_ctas, narrower);
      if (s.est_makespan * (1 + policy.simpler_margin) < best.est_makespan) best = std::move(s);  // near-ties keep the wider tiles
    }
  }
  if (policy.share_epilogue) mark_shared_epilogues(best);
  return best;
}

}  // namespace fp4gemm::detail
