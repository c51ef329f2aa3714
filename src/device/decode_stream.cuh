// The decode path's parts (kernels/decode_layer.cu): a warp streams 16 MXFP4 weight rows of one
// expert through a register ring, dequantising exactly to bf16 and multiplying with `mma.sync`
// m16n8k16 (FP32 accumulators) against up to 8 token columns; a warp-level stream-K walks a
// flattened list of such units so that every warp gets the same number of 64-wide k chunks.
//
// Why warps and mma.sync rather than the fused kernel's TMA ring and wgmma: with 1-8 tokens per
// expert the GEMM is a matrix-vector product; what bounds it is how many weight bytes the SMs keep
// in flight and how few instructions each weight costs, not the tensor rate. A warp with its own
// loads (no producer, no barriers, no shared memory) starts streaming at once, and thousands of
// warps over all SMs keep HBM busy (Little's law: ~32 KB per SM in flight at 4 TB/s).
//
// Register layout (the m16n8k16 fragments are the wgmma register-A fragment of one 16-row slab):
// lane (g, c) = (lane / 4, lane % 4) holds weight rows g and g + 8 and, of each 64-wide k chunk,
// elements 16c..16c+15 (8 bytes per row): dequant_row turns them into the A registers of the
// chunk's 4 k-steps in the K order wgmma_k_source_mxfp4 names; the B registers (token g's 16
// activations) are permuted to the same order with 8 PRMTs. Exact: e2m1 * 2^e is exact in bf16,
// the products are exact in FP32.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "device/dequant.cuh"
#include "device/mainloop.cuh"
#include "formats/scale_layout.hpp"

namespace fp4gemm::detail::decode {

// One chunk's loads for one lane: 8 bytes of each of the two weight rows, their two scale codes,
// and 16 activations of token g (zero where the lane's k range is past K or token g is absent).
struct Stage {
  uint2 wg, wh;
  unsigned codes;  // row g's code | row g + 8's code << 8
  uint4 x0, x1;
};

// Streaming weight load: read once, not kept in L1; the L2 fetches the row's next 256 bytes with
// it (a warp reads 32 bytes per row per chunk: without the hint each row's sectors arrive one by
// one).
__device__ __forceinline__ uint2 load_weights(const std::uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

__device__ __forceinline__ uint4 load_activations(const __nv_bfloat16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

__device__ __forceinline__ void mma_bf16(float (&d)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                         std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc += this chunk's A (the 8 + 8 dequantised registers of rows g and g + 8) times token g's 16
// activations.
__device__ __forceinline__ void multiply(const std::uint32_t (&ag)[8], const std::uint32_t (&ah)[8], const Stage& st,
                                         float (&acc)[4]) {
  const std::uint32_t x[8] = {st.x0.x, st.x0.y, st.x0.z, st.x0.w, st.x1.x, st.x1.y, st.x1.z, st.x1.w};
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    // k-step s reads elements (s, s + 4) into b0 and (s + 8, s + 12) into b1 (wgmma_k_source_mxfp4)
    const unsigned sel = (s & 1) ? 0x7632u : 0x5410u;
    const std::uint32_t b0 = __byte_perm(x[s / 2], x[s / 2 + 2], sel);
    const std::uint32_t b1 = __byte_perm(x[4 + s / 2], x[6 + s / 2], sel);
    mma_bf16(acc, ag[s], ah[s], ag[4 + s], ah[4 + s], b0, b1);
  }
}

template <int kMx>
__device__ __forceinline__ void multiply_mx(const Stage& st, std::uint32_t s0, std::uint32_t s1, float (&acc)[4]) {
  std::uint32_t ag[8], ah[8];
  sm90::dequant_row<Format::mxfp4, kMx>(st.wg, s0, ag);
  sm90::dequant_row<Format::mxfp4, kMx>(st.wh, s1, ah);
  multiply(ag, ah, st, acc);
}

// A chunk with a scale code >= 128 (rare).
__device__ __forceinline__ void consume_full_range(const Stage& st, float (&acc)[4]) {
  std::uint32_t s0, s1;
  sm90::weight_scale_pairs<Format::mxfp4>(st.codes, s0, s1);
  multiply_mx<sm90::kMxTwo>(st, s0, s1, acc);
}

// NVFP4 weights in bf16 (the activations are bf16 here): raw e2m1 * 2^-126 times 2^126, then times
// the block's E4M3 scale as bf16 -- every step exact (e2m1 x E4M3 has <= 6 significant bits and
// lies in [2^-10, 2688]); the same K order as MXFP4's, so the activations' permutation is shared.
__device__ __forceinline__ std::uint32_t nv_scale_bf16x2(unsigned code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  const __nv_bfloat16 b = __float2bfloat16_rn(__half2float(__half(h)));  // exact (NaN stays NaN)
  const std::uint16_t bits = *reinterpret_cast<const std::uint16_t*>(&b);
  return static_cast<std::uint32_t>(bits) | static_cast<std::uint32_t>(bits) << 16;
}

__device__ __forceinline__ void dequant_nv_row(uint2 q, std::uint32_t scale2, std::uint32_t (&out)[8]) {
  const __nv_bfloat162 s = *reinterpret_cast<const __nv_bfloat162*>(&scale2);
  const __nv_bfloat162 two126 = __floats2bfloat162_rn(0x1p126f, 0x1p126f);
  std::uint32_t lo[4], hi[4];
  e2m1_quad_bf16_raw(q.x, lo);
  e2m1_quad_bf16_raw(q.y, hi);
  auto cvt = [&](std::uint32_t raw) {
    const __nv_bfloat162 r = __hmul2(__hmul2(*reinterpret_cast<const __nv_bfloat162*>(&raw), two126), s);
    return *reinterpret_cast<const std::uint32_t*>(&r);
  };
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[i] = cvt(lo[i]);
    out[4 + i] = cvt(hi[i]);
  }
}

// acc (rows g, g + 8 x token columns 2c, 2c + 1) += this chunk's 16 x 64 weights x activations.
// MXFP4: scale codes <= 127 (real checkpoints): one multiply per weight pair, the multiplier
// 2^(code-1) built with one IMAD (the raw e2m1 pattern carries 2^-126); a code >= 128 takes the
// full-range decode (two multiplies, codes 0 and 0xFF special) for this chunk. NVFP4: two
// multiplies (dequant_nv_row).
template <Format F>
__device__ __forceinline__ void consume(const Stage& st, float (&acc)[4]) {
  if constexpr (F == Format::nvfp4) {
    std::uint32_t ag[8], ah[8];
    dequant_nv_row(st.wg, nv_scale_bf16x2(st.codes & 0xFFu), ag);
    dequant_nv_row(st.wh, nv_scale_bf16x2(st.codes >> 8), ah);
    multiply(ag, ah, st, acc);
  } else {
    // (warp-uniform: mma.sync needs every lane; a lane with a large code sends the warp down the
    // full-range path, exact for every code)
    if (__builtin_expect(!__any_sync(0xFFFFFFFFu, st.codes & 0x8080u), 1)) {
      const std::uint32_t s0 = (st.codes & 0xFFu) * 0x00800080u + 0x3F003F00u;
      const std::uint32_t s1 = (st.codes >> 8) * 0x00800080u + 0x3F003F00u;
      multiply_mx<sm90::kMxOne>(st, s0, s1, acc);
    } else {
      consume_full_range(st, acc);
    }
  }
}

// One unit's operands for this lane: rows g and g + 8 of one expert's [N, K] packed weights and
// scales, and token g's activation row (the zero row where token g is not in the unit).
struct Unit {
  const std::uint8_t* wg;  // row g at k = 0
  const std::uint8_t* wh;
  const std::uint8_t* scales;  // the expert's scale matrix [N, K/32]
  const __nv_bfloat16* x;
  int row_g, row_h;
};

struct Operand {
  int k;           // K
  int scale_cols;  // K / vec
  bool blocked;    // ScaleLayout::blocked (else linear)
  const __nv_bfloat16* zero;  // a zero row of >= K + 64 elements
};

// The load side's position: this lane's bytes of the next chunk to load, advanced by constant
// steps (scales: +2 columns per chunk -- linear +2 bytes; blocked +2 inside a 4-column atom row,
// +510 to the next atom's).
struct Cursor {
  const std::uint8_t *wg, *wh, *sg, *sh;
  const __nv_bfloat16* x;
  int kk;  // this lane's first element
};

template <Format F>
__device__ __forceinline__ Cursor cursor(const Unit& u, const Operand& op, int ch, int c) {
  const int kk = 64 * ch + 16 * c, col = kk / (F == Format::nvfp4 ? 16 : 32);
  const ScaleLayout l = op.blocked ? ScaleLayout::blocked : ScaleLayout::linear;
  return Cursor{u.wg + kk / 2, u.wh + kk / 2, u.scales + formats::detail::scale_offset(l, u.row_g, col, op.scale_cols),
                u.scales + formats::detail::scale_offset(l, u.row_h, col, op.scale_cols), u.x + kk, kk};
}

// Loads the cursor's chunk into st and advances the cursor. Past K: zero weights (scale 1) and
// the zero row, nothing read.
template <Format F>
__device__ __forceinline__ void load(Stage& st, Cursor& cur, const Operand& op) {
  const bool live = cur.kk < op.k;
  if (live) {
    st.wg = load_weights(cur.wg);
    st.wh = load_weights(cur.wh);
    st.codes = static_cast<unsigned>(*cur.sg) | static_cast<unsigned>(*cur.sh) << 8;
  } else {
    st.wg = st.wh = make_uint2(0, 0);
    st.codes = 0x7F7Fu;
  }
  const __nv_bfloat16* x = live ? cur.x : op.zero;
  st.x0 = load_activations(x);
  st.x1 = load_activations(x + 8);
  // the next chunk's scale column: NVFP4 +4 (linear +4 bytes, blocked the next atom: +512),
  // MXFP4 +2 (linear +2, blocked +2 inside an atom row or +510 to the next atom)
  const int step = F == Format::nvfp4 ? (op.blocked ? 512 : 4) : (op.blocked && ((cur.kk >> 6) & 1) ? 510 : 2);
  cur.wg += 32, cur.wh += 32, cur.sg += step, cur.sh += step, cur.x += 64, cur.kk += 64;
}

constexpr int kStages = 4;  // chunks in flight per warp

// A warp's arrival on *counter, one of `arrivals`: true in the warp that arrives last (which resets
// the counter for the next run), after every arriving warp's earlier global writes are visible to
// it. Warp-uniform; every lane calls it.
__device__ __forceinline__ bool last_arrival(unsigned* counter, unsigned arrivals) {
  __threadfence();
  __syncwarp();
  unsigned last = 0;
  if (threadIdx.x % 32 == 0) {
    last = atomicAdd(counter, 1u) == arrivals - 1;
    if (last) *counter = 0;
  }
  if (!__shfl_sync(0xFFFFFFFFu, last, 0)) return false;
  __threadfence();
  return true;
}

template <int R>
__device__ __forceinline__ void rotate(Stage (&st)[kStages]) {  // st[d] <- st[(d + R) % kStages]
  Stage t[kStages];
#pragma unroll
  for (int d = 0; d < kStages; ++d) t[d] = st[d];
#pragma unroll
  for (int d = 0; d < kStages; ++d) st[d] = t[(d + R) % kStages];
}

// Warp-level stream-K over `units` units of `n` chunks each: warp w of W takes a balanced share of
// the flattened chunks (C = units * n < 2^31; W is capped at C, so no share is empty), walking
// unit boundaries without draining its loads. A unit the warp covers whole goes to finish(u, acc)
// at once; a split unit's pieces are written to `records` (two 128-float records per warp: its
// first and its last unit) and the last piece to arrive on counters[u] (reset by it) adds them in
// warp order and calls finish -- deterministic for a given (C, W). unit_of(u) gives a unit's
// operands.
template <Format F, class UnitOf, class Finish>
__device__ __forceinline__ void stream_units(int units, int n, const Operand& op, UnitOf unit_of, Finish finish,
                                             float* __restrict__ records, unsigned* __restrict__ counters, int w,
                                             int W) {
  // Balanced shares without 64-bit division: warp w starts at w * base + min(w, extra).
  const int C = units * n;
  if (W > C) W = C;
  if (w >= W) return;
  const int base = C / W, extra = C % W;
  auto start_of = [&](int v) { return v * base + min(v, extra); };
  auto warp_of = [&](int x) {  // the warp whose share holds chunk x
    const int big = extra * (base + 1);
    return x < big ? x / (base + 1) : extra + (x - big) / base;
  };
  const int c0 = start_of(w), c1 = start_of(w + 1);
  const int lane = threadIdx.x % 32, c = lane % 4;
  const int total = c1 - c0;
  const int first = c0 / n;
  int lu = first, lleft = n - c0 % n;  // load side: unit, chunks left in it
  int cu = first, cleft = lleft;       // multiply side
  bool whole = lleft == n;  // the unit being multiplied started at its chunk 0
  Cursor cur = cursor<F>(unit_of(lu), op, n - lleft, c);
  float acc[4] = {0, 0, 0, 0};
  auto load_next = [&](Stage& st) {
    load<F>(st, cur, op);
    if (__builtin_expect(--lleft == 0, 0)) {
      lleft = n;
      if (++lu * n < c1) cur = cursor<F>(unit_of(lu), op, 0, c);
    }
  };
  // A piece of unit u is in acc: finish it, or hand it over (the last piece finishes).
  auto piece_done = [&](int u, bool complete) {
    if (!complete) {
      const int slot = u == first ? 0 : 1;
      float* rec = records + (static_cast<long long>(w) * 2 + slot) * 128;
      *reinterpret_cast<float4*>(rec + lane * 4) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      const int wf = warp_of(u * n), wl = warp_of(u * n + n - 1);  // the unit's first and last pieces
      if (!last_arrival(counters + u, static_cast<unsigned>(wl - wf + 1))) return;
      for (int q = wf; q <= wl; ++q) {
        const int qfirst = start_of(q) / n;
        const float4 p = __ldcg(reinterpret_cast<const float4*>(records + (static_cast<long long>(q) * 2 + (u == qfirst ? 0 : 1)) * 128) + lane);
        if (q == wf) acc[0] = p.x, acc[1] = p.y, acc[2] = p.z, acc[3] = p.w;
        else acc[0] += p.x, acc[1] += p.y, acc[2] += p.z, acc[3] += p.w;
      }
    }
    finish(u, acc);
  };

  // The ring: st[0] always holds the next chunk to multiply. Runs of chunks inside one unit go
  // through the unrolled loop; at a unit's end the ring is rotated back to st[0] (rare).
  Stage st[kStages];
  int loads = total;  // chunks not yet loaded
#pragma unroll
  for (int d = 0; d < kStages; ++d)
    if (loads > 0) load_next(st[d]), --loads;
  int done = 0;
  while (done < total) {
    const int r = min(cleft, total - done);
    int j = 0;
    for (; j + kStages <= r; j += kStages) {
#pragma unroll
      for (int d = 0; d < kStages; ++d) {
        consume<F>(st[d], acc);
        if (loads > 0) load_next(st[d]), --loads;
      }
    }
    const int rem = r - j;
#pragma unroll
    for (int d = 0; d < kStages - 1; ++d) {
      if (d < rem) {
        consume<F>(st[d], acc);
        if (loads > 0) load_next(st[d]), --loads;
      }
    }
    static_assert(kStages == 4, "the rotation below names each shift");
    if (rem == 1) rotate<1>(st);  // st[rem] is next: rotate it to st[0]
    else if (rem == 2) rotate<2>(st);
    else if (rem == 3) rotate<3>(st);
    done += r;
    cleft -= r;
    piece_done(cu, whole && cleft == 0);
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    ++cu, cleft = n, whole = true;
  }
}

}  // namespace fp4gemm::detail::decode
