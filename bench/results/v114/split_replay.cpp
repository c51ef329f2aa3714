// v114 host replay (a record, not a test): the MoE device schedule's class split (moe_class_ctas) and each CTA's
// k-blocks on 200 uniform top-k routings per cell (Qwen3-30B-A3B and gpt-oss-120b, both GEMMs, T 128-4096), 132
// CTAs, 256-row narrow tiles; stream-K for the classes 0..maxc against main's 0..1. A CTA's cost is its k-blocks
// times its class's model cost per k-block (moe_class_load), plus 10 k-blocks for a split piece. It sees only whole-tile rounding and the class split, not per-CTA variance.
// Build: g++ -O2 -std=c++20 -Isrc -Iinclude bench/results/v114/split_replay.cpp -o /tmp/split_replay
// Run: /tmp/split_replay GAIN MAXC (12 2: exp/split-wider2's rule); output of 12 2 and 12 3: split_replay.txt.
#include "device/moe_tiles.hpp"
#include <cstdio>
#include <random>
#include <vector>
#include <algorithm>
using namespace fp4gemm::detail;
struct Res { double makespan, avg; };
int g_wide = 12;
Res run(const std::vector<int>& rows, int n, int kblocks, int ctas, int maxc, double split_cost_kb, bool verbose) {
  const int narrow = 256;
  int tiles[16] = {0};
  for (int r : rows) { ExpertTiles t = moe_expert_tiles(0, r, n, narrow); for (int c = 0; c < 16; ++c) tiles[c] += moe_tiles_of_class(t, c); }
  MoeCostFigures f{165, 1.28f, 365, 1.7f};
  MoeClassLoad l[16];
  for (int c = 0; c < 16; ++c) {
    l[c] = moe_class_load(c, tiles[c], kblocks, ctas, narrow, true, f);
    // (independent of the header's kMoeSplitMaxClass: classes 0..maxc splittable, as moe_class_load forms it)
    const bool sp = c <= maxc && kblocks >= kMoeStreamKMinKblocks;
    const long long most = (long long)tiles[c] * (kblocks / kMoeStreamKMinKblocks);
    l[c].splittable = sp, l[c].divisible = sp && kblocks >= kMoeHybridMinKblocks;
    l[c].cap = sp ? (int)(most < ctas ? most : ctas) : tiles[c];
  }
  int out[16];
  moe_class_ctas(l, 16, ctas, out);
  double mk = 0, tot = 0; int used = 0;
  for (int c = 0; c < 16; ++c) {
    if (!tiles[c]) continue;
    const int nn = out[c]; used += nn;
    const double w = l[c].w;  // per k-block
    const int sk = c <= maxc ? moe_sk_tiles(tiles[c], kblocks, nn, c >= 2 ? g_wide : moe_split_min_gain(c)) : 0;
    const int whole = tiles[c] - sk;
    double cmax = 0;
    for (int k = 0; k < nn; ++k) {
      double kb = (whole / nn + (k < whole % nn ? 1 : 0)) * (double)kblocks;
      if (sk) kb += (double)sk * kblocks / nn + split_cost_kb;
      cmax = std::max(cmax, kb * w);
      tot += kb * w;
    }
    if (verbose) printf("   class %2d (%3d tok): %4d tiles, %3d CTAs, sk %3d, max %.0f kb\n", c, 16 * (c + 1), tiles[c], nn, sk, cmax / w);
    mk = std::max(mk, cmax);
  }
  return {mk, tot / ctas};
}
int main(int argc, char** argv) {
  if (argc > 1) g_wide = atoi(argv[1]);
  const int maxc_new = argc > 2 ? atoi(argv[2]) : 3;
  struct Shape { const char* name; int E, H, I, k; };
  Shape shapes[] = {{"qwen3", 128, 2048, 768, 8}, {"gpt-oss", 128, 2880, 2880, 4}};
  std::mt19937_64 rng(1);
  for (auto& s : shapes) for (int T : {128, 256, 512, 1024, 2048, 4096}) for (int g = 1; g <= 2; ++g) {
    const int n = g == 1 ? 2 * s.I : s.H, kb = (g == 1 ? s.H : s.I) / 64;
    double so = 0, sn = 0, ao = 0; const int reps = 200; int better = 0, worse = 0;
    for (int r = 0; r < reps; ++r) {
      std::vector<int> rows(s.E, 0);
      for (int t = 0; t < T; ++t) { std::vector<int> p(s.E); for (int e = 0; e < s.E; ++e) p[e] = e;
        for (int j = 0; j < s.k; ++j) { int x = j + rng() % (s.E - j); std::swap(p[j], p[x]); ++rows[p[j]]; } }
      Res o = run(rows, n, kb, 132, 1, 10, false), nw = run(rows, n, kb, 132, maxc_new, 10, false);
      so += o.makespan; sn += nw.makespan; ao += o.avg;
      better += nw.makespan < o.makespan * 0.999; worse += nw.makespan > o.makespan * 1.001;
    }
    printf("%-8s T %5d GEMM%d: makespan new/old %.3f (old / avg %.3f)  better %d worse %d of %d\n", s.name, T, g, sn / so, so / ao, better, worse, reps);
  }
}
