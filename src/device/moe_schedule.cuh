// The MoE plan's device scheduler, run by every CTA of the fused GEMM in its prologue.
//
// Each CTA reads the expert offsets (or masked counts) of the run, cuts every expert's rows into
// token tiles (host/core/schedule.cpp's rule), buckets the tiles by token-width class, shares the
// CTAs among the classes by the cost model, and writes the tile and piece records of its own
// range only (the ranges of different CTAs are disjoint). Every CTA computes the same class counts
// (and the tile prefix of its own class) from the same offsets, so no CTA waits for another and no
// separate scheduler launch is needed:
// the work overlaps the activation pre-pass that the GEMM is a programmatic dependent of
// (as a one-block kernel before the pre-pass it put 11 us on the critical path).
//
// A bad routing leaves every CTA without work; CTA 0 sets the error word. C is then untouched.
#pragma once

#include <cstdint>

#include "device/params.cuh"
#include "device/prepass.cuh"
#include "device/moe_tiles.hpp"
#include "device/schedule.hpp"
#include "device/trace.cuh"

namespace fp4gemm::detail::sm90 {

using detail::ExpertTiles;
using detail::moe_expert_tiles;
using detail::moe_tiles_of_class;
using detail::SlotRange;
using detail::TileCoord;
using detail::moe_cta_slots;
using detail::moe_bucket_position;
using detail::moe_tile_coord;
using detail::kMoeStreamKMaxPieces;
using detail::kMoeStreamKMinKblocks;
using detail::moe_sk_ctas;
using detail::moe_sk_eligible;
using detail::moe_sk_tiles;
using detail::MoeCostFigures;
using detail::moe_class_load;
using detail::moe_sk_piece;
using detail::moe_sk_piece_count;
using detail::StreamKPiece;
using detail::MoeClassLoad;
using detail::moe_class_extra;
using detail::moe_class_need;
using detail::kMoeBalancePoints;
using detail::MoeBalanceSearch;
using detail::moe_balance_point;
using detail::moe_balance_start;
using detail::moe_balance_step;

// Shared scratch of the schedule (in the ring's memory: nothing is loaded before it is done).
struct MoeScheduleScratch {
  static constexpr int kClasses = SchedulePolicy::kWidthClasses;
  static constexpr int kMaxWarps = 32;
  ExpertTiles experts[kMoeMaxExperts];
  int prefix[kMoeMaxExperts];                    // tiles of this CTA's class before expert e's (step 3b)
  int warp_tiles[kMaxWarps][kClasses];           // step 2: each warp's experts' tiles per class
  int warp_sum[kMaxWarps];                       // step 3b: each warp's part of a chunk's scan
  int search[2][kMoeBalancePoints];              // step 3: the search's need sums, by round parity
  int bucket_base[kClasses + 1], cta_base[kClasses + 1], ctas_of[kClasses], class_tiles[kClasses];
  int total_tiles;
  int begin, end, n16, rank, ctas;  // this CTA's result: its whole tiles' slots, class, and rank among the class's CTAs
  int stream_k;                     // the class's tiles that run stream-K (moe_sk_tiles: the bucket's last ones)
};
// (It lives in the ring's memory, and every plan's ring is at least SmemLayout::kMinRingBytes.)
static_assert(sizeof(MoeScheduleScratch) <= SmemLayout::kMinRingBytes, "the MoE schedule's scratch exceeds the smallest ring");

// Inclusive sums over the warp's lanes of each of the N values (lane l ends with the sum of lanes
// 0..l), all N in the same shuffle steps.
template <int N>
__device__ __forceinline__ void warp_inclusive_scan(int (&v)[N], int lane) {
#pragma unroll
  for (int o = 1; o < 32; o *= 2) {
    int u[N];
#pragma unroll
    for (int i = 0; i < N; ++i) u[i] = __shfl_up_sync(0xFFFFFFFFu, v[i], o);
    if (lane >= o) {
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] += u[i];
    }
  }
}

// Run by all kThreads threads of the CTA. Writes the tile records of its work (at their bucket
// slots), its pieces [begin, end) and its first producer record (first_pieces[blockIdx.x]);
// returns begin == end when the CTA has no work. A CTA's pieces are its stream-K pieces (if its
// class splits tiles), then its whole tiles, in entries begin_slot + kMoeStreamKMaxPieces * cta + j
// of the piece array (begin_slot: its first whole tile's slot), so each CTA's are contiguous and
// disjoint from the others' (the plan sizes pieces for max_tiles + kMoeStreamKMaxPieces per CTA).
template <int kThreads>
__device__ void moe_schedule_cta(const MoeScheduleParams& a, MoeScheduleScratch& s, int& begin_out, int& end_out,
                                 int& n16_out) {
  constexpr int kClasses = MoeScheduleScratch::kClasses;
  constexpr int kWarps = kThreads / 32;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const bool reporter = blockIdx.x == 0;  // one CTA names the error

  // 1. Every expert's rows, validated.
  bool bad = false;
#pragma unroll 1
  for (int e = tid; e < a.experts; e += kThreads) {
    int base = 0, rows = 0;
    if (a.masked) {
      rows = a.counts[e];
      base = e * a.capacity;
      if (rows < 0 || rows > a.capacity) {
        if (reporter) moe_report(a.error, kMoeBadCount, e, rows);
        bad = true;
      }
    } else {
      base = a.offsets[e];
      const int next = a.offsets[e + 1];
      rows = next - base;
      if ((e == 0 && base < 0) || next < base) {
        if (reporter)
          moe_report(a.error, kMoeBadOffsets, e == 0 && base < 0 ? 0 : e + 1, e == 0 && base < 0 ? base : next);
        bad = true;
      }
      if (e == a.experts - 1 && next > a.capacity) {
        if (reporter) moe_report(a.error, kMoeOverCapacity, a.experts, next);
        bad = true;
      }
    }
    s.experts[e] = moe_expert_tiles(base, bad ? 0 : rows, a.n, a.narrow_rows);
  }
  const bool any_bad = __syncthreads_or(bad);  // then nothing runs; C stays untouched
  Trace::schedule_step(0);
  // CTAs interleave over their class's bucket (below): CTA k runs tiles k, k + n, ..., so the CTAs
  // running at once share a token tile's activations and an expert's weights in L2. Decode-like
  // runs interleave too: with contiguous ranges one CTA ran an expert's row blocks one after
  // another, ~50 us apart, and re-read its activations from DRAM for each (interleaving: (c) 2.41
  // -> 2.03 GB DRAM reads, H100 (c) -7 % W4A16 / -13 % NVFP4, H200 within +-2 %).
  constexpr bool interleave = true;

  // 2. Each class's tiles: warp w takes experts w * 32 + l, + kThreads, ... (lane l; consecutive
  //    lanes read consecutive records, no bank conflicts), one REDUX per class present among them
  //    (an expert has tiles in at most two classes), lane c keeps class c's sum. Step 3 adds the
  //    warps' sums; the prefix over the experts is needed for this CTA's class only (step 3b). (A
  //    scan of class c by warp c over runs of E / 32 experts per lane, 16 times over, has 8-way
  //    bank conflicts at E 256: 7.5 k cycles there, against ~1 k for this.)
  static_assert(kWarps <= MoeScheduleScratch::kMaxWarps, "one row of warp sums per warp");
  {
    int mine = 0;
#pragma unroll 1
    for (int x0 = any_bad ? a.experts : warp * 32; x0 < a.experts; x0 += kThreads) {  // warp-uniform
      const int x = x0 + lane;
      const ExpertTiles t = x < a.experts ? s.experts[x] : ExpertTiles{0, 0, 0, 0, 0, -1, -1, 0, 0};
      const unsigned bits = (t.tiles_full > 0 ? 1u << t.class_full : 0u) | (t.tiles_last > 0 ? 1u << t.class_last : 0u);
#pragma unroll 1
      for (unsigned m = __reduce_or_sync(0xFFFFFFFFu, bits); m != 0; m &= m - 1) {
        const int cls = __ffs(m) - 1;
        const int sum = __reduce_add_sync(0xFFFFFFFFu, moe_tiles_of_class(t, cls));
        if (lane == cls) mine += sum;
      }
    }
    if (lane < kClasses) s.warp_tiles[warp][lane] = mine;
  }
  __syncthreads();
  Trace::schedule_step(1);

  // 3. CTAs per class (moe_tiles.hpp, moe_class_ctas is the host's copy of this step): one class
  //    present takes every CTA it can use; more search the smallest makespan the run's CTAs can
  //    meet, each class then the fewest CTAs that meet it and the spare ones shared by cost.
  //    Every warp forms the classes' loads (lane c and c + 16: class c) and takes part in the
  //    search, two of a round's points per warp; warp 0 then sets the CTAs per class. (Warp 0
  //    alone, two points per step in 12 steps, took 4-7 k cycles of the prologue:
  //    bench/micro/moe_schedule_cost.cu.)
  static_assert(2 * kWarps >= kMoeBalancePoints, "two search points per warp");
  {
    const int c = lane % kClasses;
    int tiles = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) tiles += s.warp_tiles[w][c];  // (0 for a bad routing: step 2 skipped)
    // (stream-K can split the tiles of the 16- and 32-token classes: up to one CTA per
    // kMoeStreamKMinKblocks k-blocks; other classes one per tile)
    const MoeClassLoad load = moe_class_load(c, tiles, a.kblocks, a.num_ctas, a.narrow_rows, a.stream_k != 0,
                                             MoeCostFigures{a.wide_fixed, a.wide_per_token, a.narrow_fixed, a.narrow_per_token});
    const bool first = lane < kClasses;
    const unsigned present = __ballot_sync(0xFFFFFFFFu, first && tiles > 0);  // (the same in every warp)
    int mine = 0;
    float T = 0.0f, cost = 0.0f, total_cost = 0.0f;
    const float inv_w = 1.0f / load.w;
    if (__popc(present) > 1) {  // (block-uniform)
      // (positive floats order as their bit patterns)
      const float h = tiles > 0 ? static_cast<float>(tiles + 1) * load.w : 0.0f;
      const float hi_safe = __uint_as_float(__reduce_max_sync(0xFFFFFFFFu, __float_as_uint(h)));
      const float w_max = __uint_as_float(__reduce_max_sync(0xFFFFFFFFu, __float_as_uint(tiles > 0 ? load.w : 0.0f)));
      cost = static_cast<float>(tiles) * load.w;
      total_cost = cost;  // (lanes 16-31 hold the same classes: the 16-lane sums match)
#pragma unroll
      for (int o = 8; o > 0; o /= 2) total_cost += __shfl_xor_sync(0xFFFFFFFFu, total_cost, o);
      // moe_balance_makespan's rounds, the points tested at once: warp w point 2 w (lanes 0-15)
      // and 2 w + 1 (16-31); each warp's two sums through shared memory (a buffer per round's
      // parity: a warp writing round r + 1 cannot meet one still reading round r).
      MoeBalanceSearch b = moe_balance_start(total_cost / static_cast<float>(a.num_ctas), w_max, hi_safe);
      const int point = 2 * warp + (first ? 0 : 1);
#pragma unroll 1
      for (int r = 0; r < b.rounds; ++r) {
        const int need = point < kMoeBalancePoints
                             ? moe_class_need(load, inv_w, moe_balance_point(b.lo, b.hi, r, point), a.num_ctas)
                             : 0;
        const int sums = __reduce_add_sync(0xFFFFFFFFu, first ? need : need << 16);
        if (lane == 0 && point < kMoeBalancePoints) {
          s.search[r & 1][point] = sums & 0xFFFF;
          s.search[r & 1][point + 1] = sums >> 16;
        }
        __syncthreads();
        const unsigned feasible =
            __ballot_sync(0xFFFFFFFFu, lane < kMoeBalancePoints && s.search[r & 1][lane < kMoeBalancePoints ? lane : 0] <= a.num_ctas);
        moe_balance_step(b, r, feasible);
      }
      T = b.hi;
    }
    if (warp == 0) {
      if (lane < kClasses) s.class_tiles[c] = tiles;
      if (__popc(present) <= 1) {
        mine = tiles > 0 ? min(load.cap, a.num_ctas) : 0;
      } else {
        mine = first ? moe_class_need(load, inv_w, T, a.num_ctas) : 0;
        const int used = __reduce_add_sync(0xFFFFFFFFu, mine);
        mine += first ? moe_class_extra(load, mine, a.num_ctas - used, cost, total_cost) : 0;
      }
      if (!first) mine = 0;
      // Exclusive prefix sums of tiles and CTAs over the classes.
      int before[2] = {first ? tiles : 0, mine};
      warp_inclusive_scan(before, lane);
      const int tiles_before = before[0], ctas_before = before[1];
      if (lane < kClasses) {
        s.bucket_base[c] = tiles_before - tiles, s.cta_base[c] = ctas_before - mine, s.ctas_of[c] = mine;  // (first)
      }
      const int total_tiles = __shfl_sync(0xFFFFFFFFu, tiles_before, kClasses - 1);
      const bool none = any_bad || total_tiles > a.max_tiles;  // (the latter cannot happen for a routing
                                                               // that passed step 1: plan sizing)
      if (lane == kClasses - 1) {
        s.bucket_base[kClasses] = s.total_tiles = tiles_before, s.cta_base[kClasses] = ctas_before;
        if (!any_bad && none && reporter) moe_report(a.error, kMoeOverCapacity, a.experts, tiles_before);
      }
      __syncwarp();  // lane 0 reads the other lanes' entries below
      const unsigned class_after = __ballot_sync(0xFFFFFFFFu, first && static_cast<int>(blockIdx.x) >= ctas_before - mine);
      // This CTA's class and range: the CTAs of class c split its bucket evenly (whole tiles of one
      // class cost alike); CTAs past the last class get none.
      if (lane == 0) {
        const int cta = blockIdx.x;
        const int c2 = __popc(class_after & ((1u << kClasses) - 2u));  // classes 1.. whose CTAs start at or before it
        int begin = 0, end = 0, n16 = 1, k = 0, n = 1, sk = 0;
        if (cta < s.cta_base[kClasses] && !none) {
          k = cta - s.cta_base[c2], n = s.ctas_of[c2];
          // Stream-K (moe_tiles.hpp, moe_sk_tiles) where whole tiles would leave a quarter or more
          // of the class's CTAs idle (decode-like runs: at most 3/4 of a tile per CTA), and for the
          // partial last round of a class with full rounds before it. Only the 16- and
          // 32-token classes: their partials fit the plan's slots (one per CTA, kMoeSlotFloats).
          // The rest of the bucket runs whole, interleaved tiles.
          sk = a.stream_k != 0 && c2 <= 1 ? moe_sk_tiles(s.class_tiles[c2], a.kblocks, n, c2 == 0 ? a.split_gain16 : a.split_gain32) : 0;
          const SlotRange r = moe_cta_slots(s.bucket_base[c2], s.class_tiles[c2] - sk, k, n, interleave);
          begin = r.begin, end = r.end;
          // (contiguous ranges had every token tile of every expert in flight and re-read the
          // activations from DRAM for each row block: prefill (d) 1776 -> 1421 us with interleaving;
          // decode-like runs too: the 10 % it once cost (a) and (c) no longer shows)
          n16 = c2 + 1;
        }
        s.begin = begin, s.end = end, s.n16 = n16, s.rank = k, s.ctas = n, s.stream_k = sk;
      }
    }
  }
  __syncthreads();
  Trace::schedule_step(2);
  const int n16 = s.n16, c = n16 - 1, rank = s.rank, ctas = s.ctas;

  // 3b. The exclusive prefix of class c's tile counts over the experts (tile_at's search): chunks
  //     of kThreads experts, thread t the chunk's expert t, a warp scan and the warps' sums.
  if (s.begin != s.end || s.stream_k > 0) {  // (block-uniform)
    int carry = 0;
#pragma unroll 1
    for (int x0 = 0; x0 < a.experts; x0 += kThreads) {
      const int x = x0 + tid;
      const int v = x < a.experts ? moe_tiles_of_class(s.experts[x], c) : 0;
      int scan[1] = {v};
      warp_inclusive_scan(scan, lane);
      const int incl = scan[0];
      if (lane == 31) s.warp_sum[warp] = incl;
      __syncthreads();
      int before = carry, chunk = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const int ws = s.warp_sum[w];
        before += w < warp ? ws : 0;
        chunk += ws;
      }
      if (x < a.experts) s.prefix[x] = before + incl - v;
      carry += chunk;
      __syncthreads();  // the next chunk rewrites warp_sum
    }
  }

  // The tile at bucket position t of class c.
  auto tile_at = [&](int t, int writers, int first_slot) {
    int lo = 0, hi = a.experts - 1;  // the last expert whose prefix in class c is <= t
#pragma unroll 1
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (s.prefix[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    const ExpertTiles x = s.experts[lo];
    const TileCoord tc = moe_tile_coord(x, c, t - s.prefix[lo]);
    return TileDesc{lo, tc.row_block * tile_rows(tc.ntok, a.narrow_rows), tc.tok0, tc.ntok, tc.tok0, a.kblocks,
                    writers, first_slot, -1};
  };
  // 4'. Stream-K: this CTA's (<= 3) pieces of the bucket's last s.stream_k tiles; every CTA
  //     touching a tile writes its (identical) record. A writer's partial goes to the slot of its
  //     CTA. They run before the CTA's whole tiles (below), a writer piece first, so an owner waits
  //     only on pieces that were each their CTA's first. (Running them after the whole tiles, so
  //     that a CTA's first piece is a whole tile with a full early fill, measured slower on most
  //     shapes.)
  const int sk_tiles = s.stream_k, whole = s.class_tiles[c] - sk_tiles;
  const int begin = s.begin, end = s.end;
  const int first = begin + kMoeStreamKMaxPieces * static_cast<int>(blockIdx.x);  // this CTA's pieces
  int sk_count = 0;
  if (sk_tiles > 0) {
    const int n = moe_sk_ctas(sk_tiles, a.kblocks, ctas);
    sk_count = moe_sk_piece_count(sk_tiles, a.kblocks, rank, n);
    if (tid < sk_count) {  // (one thread per piece)
      const StreamKPiece sk = moe_sk_piece(sk_tiles, a.kblocks, rank, n, tid);
      const int index = s.bucket_base[c] + whole + sk.tile;
      const TileDesc tile = tile_at(whole + sk.tile, sk.owner_cta - sk.first_writer, s.cta_base[c] + sk.first_writer);
      const WorkPiece piece{index, sk.kb_begin, sk.kb_end, sk.owner ? -1 : s.cta_base[c] + rank};
      a.tiles[index] = tile;
      a.pieces[first + tid] = piece;
      if (tid == 0)
        a.first_pieces[blockIdx.x] =
            make_producer_piece(piece, tile, a.n, a.cols, halves_of_class(n16, a.narrow_rows),
                                a.weight_maps + kMoeMapsPerExpert * tile.group, a.scales + tile.group * a.scale_stride, nullptr);
    }
  }

  // 4. This CTA's whole tiles. The bucket's order: expert-major, then token tile, then row block
  //    (the CTAs that run adjacent tiles at once share the token tile's activations and the
  //    expert's weights through L2).
#pragma unroll 1
  for (int index = begin + tid; index < end; index += kThreads) {
    const int t = moe_bucket_position(index, SlotRange{begin, end}, s.bucket_base[c], rank, ctas, interleave);
    const TileDesc tile = tile_at(t, 0, -1);
    const WorkPiece piece{index, 0, a.kblocks, -1};
    a.tiles[index] = tile;
    a.pieces[first + sk_count + (index - begin)] = piece;
    if (index == begin && sk_count == 0)
      a.first_pieces[blockIdx.x] =
          make_producer_piece(piece, tile, a.n, a.cols, halves_of_class(n16, a.narrow_rows),
                              a.weight_maps + kMoeMapsPerExpert * tile.group, a.scales + tile.group * a.scale_stride, nullptr);
  }
  __syncthreads();  // the records above are read by this CTA's producers and consumers
  Trace::schedule_step(3);
  begin_out = first, end_out = first + sk_count + (end - begin), n16_out = n16;
}

}  // namespace fp4gemm::detail::sm90
