// Builds the stream-K work list of the fused kernel (see src/device/schedule.hpp).
#include "device/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace fp4gemm::detail {

std::vector<std::pair<int, int>> token_tiles(int m) {
  std::vector<std::pair<int, int>> out;
  if (m <= 0) return out;
  const int count = (m + SchedulePolicy::kMaxTokens - 1) / SchedulePolicy::kMaxTokens;
  int size = (m + count - 1) / count;
  size = (size + 7) / 8 * 8;
  for (int t0 = 0; t0 < m; t0 += size) out.emplace_back(t0, std::min(size, m - t0));
  return out;
}

Schedule build_schedule(std::span<const ScheduleShape> groups, int max_ctas,
                        const SchedulePolicy& policy) {
  Schedule s;
  s.act_row0.resize(groups.size());
  // 1. Tiles, group by group; a group's token tiles of one weight row-block are adjacent so
  //    their repeated weight reads are close in time.
  int act_rows = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const ScheduleShape& sh = groups[g];
    s.act_row0[g] = act_rows;
    if (sh.m <= 0 || sh.n <= 0 || sh.k <= 0) continue;
    const int kblocks = (sh.k + SchedulePolicy::kBlockK - 1) / SchedulePolicy::kBlockK;
    s.max_kblocks = std::max(s.max_kblocks, kblocks);
    const auto toks = token_tiles(sh.m);
    for (int row0 = 0; row0 < sh.n; row0 += SchedulePolicy::kRowsPerTile)
      for (const auto& [tok0, ntok] : toks)
        s.tiles.push_back(TileDesc{static_cast<int>(g), row0, tok0, ntok, act_rows + tok0, kblocks, 0, -1});
    act_rows += sh.m;
  }
  s.total_act_rows = act_rows;
  if (s.tiles.empty()) {
    s.cta_begin = {0};
    return s;
  }

  // 2. Cost of each tile's k-blocks; total work split evenly over the CTAs.
  std::vector<double> kcost(s.tiles.size());
  double total = 0;
  long long total_kblocks = 0;
  for (std::size_t i = 0; i < s.tiles.size(); ++i) {
    const TileDesc& t = s.tiles[i];
    kcost[i] = (t.ntok + 7) / 8 * 8 + policy.kblock_overhead;
    total += kcost[i] * t.kblocks;
    total_kblocks += t.kblocks;
  }
  const int ctas = static_cast<int>(std::max<long long>(1, std::min<long long>(max_ctas, policy.split_k ? total_kblocks : static_cast<long long>(s.tiles.size()))));
  const double target = total / ctas;
  s.num_ctas = ctas;

  // 3. Assign every k-block (or whole tile) to the CTA whose cost range holds its midpoint.
  //    Assignments are non-decreasing along the sequence, so each CTA's range is contiguous.
  std::vector<double> cta_cost(ctas, 0.0);
  s.cta_begin.assign(1, 0);
  int current_cta = 0;
  double before = 0;
  auto open_cta = [&](int cta) {
    while (current_cta < cta) {
      ++current_cta;
      s.cta_begin.push_back(static_cast<int>(s.pieces.size()));
    }
  };
  for (std::size_t i = 0; i < s.tiles.size(); ++i) {
    TileDesc& t = s.tiles[i];
    if (!policy.split_k) {
      const double mid = before + 0.5 * kcost[i] * t.kblocks;
      const int cta = std::min(ctas - 1, static_cast<int>(mid / target));
      open_cta(std::max(cta, current_cta));
      s.pieces.push_back(WorkPiece{static_cast<int>(i), 0, t.kblocks, -1});
      cta_cost[current_cta] += kcost[i] * t.kblocks;
      before += kcost[i] * t.kblocks;
      continue;
    }
    int kb = 0;
    while (kb < t.kblocks) {
      const int cta = std::min(ctas - 1, static_cast<int>((before + (kb + 0.5) * kcost[i]) / target));
      open_cta(std::max(cta, current_cta));
      // Extend the piece while the next k-blocks stay on this CTA.
      int end = kb + 1;
      while (end < t.kblocks &&
             std::min(ctas - 1, static_cast<int>((before + (end + 0.5) * kcost[i]) / target)) <= current_cta)
        ++end;
      WorkPiece piece{static_cast<int>(i), kb, end, -1};
      if (kb > 0) {  // a writer: partial to a slot, consumed by the owner
        if (t.writers == 0) t.first_slot = s.num_slots;
        piece.slot = s.num_slots++;
        ++t.writers;
      }
      s.pieces.push_back(piece);
      cta_cost[current_cta] += kcost[i] * (end - kb);
      kb = end;
    }
    before += kcost[i] * t.kblocks;
  }
  open_cta(ctas - 1);
  s.cta_begin.push_back(static_cast<int>(s.pieces.size()));
  const double mean = total / ctas;
  s.imbalance = *std::max_element(cta_cost.begin(), cta_cost.end()) / mean;
  return s;
}

}  // namespace fp4gemm::detail
