// The fused kernel's consumer side: one work piece per call -- weights dequantised from shared memory
// into wgmma A registers, the k-block loop over the ring, the split-K hand-off, the epilogue.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "device/dequant.cuh"
#include "device/epilogue.cuh"
#include "device/kernel_config.cuh"
#include "device/params.cuh"
#include "device/prepass.cuh"  // moe_report
#include "device/ptx/ptx.cuh"
#include "device/ptx/wgmma_rs.cuh"
#include "device/trace.cuh"
#include "formats/scale_layout.hpp"

namespace fp4gemm::detail::sm90 {

// ---------------------------------------------------------------------------------------------
// Scales
// ---------------------------------------------------------------------------------------------


// The scale multipliers of rows r and r + 8 as half2 pairs (both halves equal) of the weights'
// operand type, from their codes packed as code0 | code1 << 8. NVFP4: both E4M3 codes in one
// conversion, times 2^7 in f16 (exact: <= 57344). MXFP4: UE8M0 2^(code-127) as bf16, exponent
// field = code; 0 -> 2^-127 (subnormal); 0xFF -> NaN. (MXFP4 with kSmallMx decodes its codes in
// consume_piece: one IMAD each.)
template <Format F>
__device__ __forceinline__ void weight_scale_pairs(unsigned codes, std::uint32_t& s0, std::uint32_t& s1) {
  if constexpr (F == Format::nvfp4) {
    const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), __NV_E4M3);
    const __half2 p = __hmul2(__half2(r), __float2half2_rn(kNvfp4AccScale));
    const __half2 p0 = __low2half2(p), p1 = __high2half2(p);
    s0 = *reinterpret_cast<const std::uint32_t*>(&p0);
    s1 = *reinterpret_cast<const std::uint32_t*>(&p1);
  } else {
    auto pair = [](unsigned code) {
      const std::uint32_t bits = code == 0 ? 0x0040u : (code == 0xFFu ? 0x7FC0u : (code << 7));
      return bits | (bits << 16);
    };
    s0 = pair(codes & 0xFFu);
    s1 = pair(codes >> 8);
  }
}

__device__ __forceinline__ std::uint32_t bf16x2_bits(__nv_bfloat162 v) { return *reinterpret_cast<const std::uint32_t*>(&v); }

// Dequantises this thread's 16 weights of one row (8 bytes) into 8 A-operand registers:
// out[s] feeds k-step s slots {2t, 2t+1}, out[4 + s] slots {2t+8, 2t+9}.
// kPieces: the words of weights in pieces, bits permuted at pack time (e2m1_quad_bf16_pieces / e2m1_quad_f16_pieces).
template <Format F, int kSmallMx, bool kPieces = false>
__device__ __forceinline__ void dequant_row(uint2 q, std::uint32_t scale2, std::uint32_t (&out)[8]) {
  if constexpr (F == Format::nvfp4) {
    const __half2 s = *reinterpret_cast<const __half2*>(&scale2);
    auto cvt = [&](std::uint32_t raw) {
      const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&raw), s);
      return *reinterpret_cast<const std::uint32_t*>(&r);
    };
    std::uint32_t lo[4], hi[4];  // wgmma_k_source_nvfp4: lower slots from q.x, upper from q.y
    e2m1_quad<true, kPieces>(q.x, lo);
    e2m1_quad<true, kPieces>(q.y, hi);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[i] = cvt(lo[i]);
      out[4 + i] = cvt(hi[i]);
    }
  } else {
    const __nv_bfloat162 s = *reinterpret_cast<const __nv_bfloat162*>(&scale2);
    const __nv_bfloat162 two126 = __floats2bfloat162_rn(0x1p126f, 0x1p126f);
    auto cvt = [&](std::uint32_t raw) {
      __nv_bfloat162 r = *reinterpret_cast<const __nv_bfloat162*>(&raw);
      if constexpr (kSmallMx == kMxTwo) r = __hmul2(r, two126);  // else scale2 already holds the 2^126
      // (kMxOneChecked: the multiplier is scale2's low half; its high half is the guard's)
      return bf16x2_bits(__hmul2(r, kSmallMx == kMxOneChecked ? __low2bfloat162(s) : s));
    };
    std::uint32_t lo[4], hi[4];  // wgmma_k_source_mxfp4: register s holds nibbles (s, s + 4)
    e2m1_quad<false, kPieces>(q.x, lo);
    e2m1_quad<false, kPieces>(q.y, hi);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[i] = cvt(lo[i]);
      out[4 + i] = cvt(hi[i]);
    }
  }
}

template <Format F, int N8, int A>
__device__ __forceinline__ void wgmma_rs(float (&d)[A], const std::uint32_t (&a)[4],
                                         std::uint64_t desc, int scale_d) {
  if constexpr (F == Format::nvfp4) ptx::wgmma_rs_f16<N8, A>(d, a, desc, scale_d);
  else ptx::wgmma_rs_bf16<N8, A>(d, a, desc, scale_d);
}

// Per-thread state of a consumer that survives from piece to piece (the ring position).
struct ConsumerState {
  int cw, ctid, lane, t, row_in_tile;
  std::uint8_t* s_smem;  // the ring's weight-scale stages
  int stages, act_stage_bytes;  // the CTA's ring geometry
  int stage = 0;
  std::uint32_t phase = 0;
  Trace::Row trace;  // the recording thread's counters (TraceOff: empty)
};

// Keeps the compiler from moving accumulator reads/writes across wgmma fences, for every half.
template <int H, int A>
__device__ __forceinline__ void fence_acc(float (&acc)[H][A]) {
#pragma unroll
  for (int h = 0; h < H; ++h) ptx::fence_registers(acc[h]);
}

// The units of a tile's output this piece finishes. A shared GLU epilogue (TileDesc::owner_slot;
// tiles of one writer): the tile's output is H halves x `passes` passes of 64 tokens, "units" in
// that order; the owner finishes the first half of them and the writer the rest, so each sums only
// its units' accumulators. Otherwise the owner finishes all of them.
struct PieceUnits {
  bool shared;
  int passes, u0, u1;
};

template <int H, bool kGlu>
__device__ __forceinline__ PieceUnits piece_units(const WorkPiece& piece, const TileDesc& tile) {
  PieceUnits r{false, 1, 0, H};
  if constexpr (kGlu) {
    r.passes = (tile.ntok + kGluPassTokens - 1) / kGluPassTokens;
    r.u1 = H * r.passes;
    if (tile.owner_slot >= 0) {
      r.shared = true;
      const int parts = tile.writers + 1, part = piece.slot >= 0 ? piece.slot - tile.first_slot + 1 : 0;
      r.u0 = part * H * r.passes / parts, r.u1 = (part + 1) * H * r.passes / parts;
    }
  }
  return r;
}

// The split-K hand-off of a piece's accumulators (see device/schedule.hpp): a writer publishes its
// partial (false: the piece is done, unless the tile's GLU epilogue is shared); the owner adds its
// writers' partials in slot order (deterministic sums) and goes on to the epilogue (true).
template <int N8, int H, bool kRouted>
__device__ __forceinline__ bool splitk_handoff(const FusedParams& p, ConsumerState& st, const WorkPiece& piece,
                                               const TileDesc& tile, float (&acc)[H][4 * N8], const PieceUnits& pu,
                                               Trace::Stamp t_mark) {
  using C = KernelConfig;
  constexpr int kAcc = 4 * N8;
  // Partials: accumulators 4i..4i+3 of half h as one float4 at [(h * kAcc / 4 + i)][thread], so a
  // warp stores or loads 512 contiguous bytes per instruction (one float per thread and
  // instruction takes 4x the instructions: seed cases 1-3 0.7-1.4 % slower on H200).
  static_assert(kAcc % 4 == 0, "float4 partials");
  // (MoE plans: slots of kMoeSlotFloats, for the 16- and 32-token classes that their schedule
  // splits; the pointer-array plan's hold any tile)
  constexpr int kSlotFloats = kRouted ? kMoeSlotFloats : C::kPartialFloats;
  static_assert(!kRouted || N8 > 4 || H * kAcc * C::kConsumerThreads <= kMoeSlotFloats, "MoE partial slot too small");
  auto slot_of = [&](int slot) {
    return reinterpret_cast<float4*>(p.partials + static_cast<std::int64_t>(slot) * kSlotFloats);
  };
  auto at = [&](int h, int i) { return (h * kAcc + i) / 4 * C::kConsumerThreads + st.ctid; };
  auto publish = [&](float4* part, auto&& stored) {  // the partial, then the tile's counter
#pragma unroll
    for (int h = 0; h < H; ++h)
#pragma unroll
      for (int i = 0; i < kAcc; i += 4)
        if (stored(h, i)) __stcg(part + at(h, i), make_float4(acc[h][i], acc[h][i + 1], acc[h][i + 2], acc[h][i + 3]));
    ptx::named_barrier_sync(kConsumersBarrier, C::kConsumerThreads);
    if (st.ctid == 0) {
      __threadfence();
      ptx::red_release_gpu_add(p.flags + piece.tile, 1);
    }
  };
  const bool shared = pu.shared;
  const int passes = pu.passes, u0 = pu.u0, u1 = pu.u1;
  auto own = [&](int h, int i) {
    const int u = h * passes + i / (4 * kGluPassTokens / 8);
    return !shared || (u >= u0 && u < u1);
  };
  if (piece.slot >= 0) {  // a writer: its partial (a sharing one: of the others' units)
    publish(slot_of(piece.slot), [&](int h, int i) { return !shared || !own(h, i); });
    if (!shared) {
      st.trace.add_since(kTraceHandoff, t_mark);
      return false;
    }
  } else if (shared) {  // a sharing owner: its partial of the writers' units
    publish(slot_of(tile.owner_slot), [&](int h, int i) { return !own(h, i); });
  }
  if (tile.writers > 0) {
    const int published = tile.writers + (shared ? 1 : 0);
    if (st.ctid == 0) {
      while ((ptx::ld_acquire_gpu(p.flags + piece.tile) & 0xFFFF) < published) __nanosleep(64);
    }
    ptx::named_barrier_sync(kConsumersBarrier, C::kConsumerThreads);
    // The owner adds its writers' partials in slot order (deterministic sums); a sharing writer
    // (the only one) adds the owner's partial to its own: o + w in either order, the same bits.
    const int sources = piece.slot >= 0 ? 1 : tile.writers;
    for (int w = 0; w < sources; ++w) {
      const float4* part = slot_of(piece.slot >= 0 ? tile.owner_slot : tile.first_slot + w);
#pragma unroll
      for (int h = 0; h < H; ++h)
#pragma unroll
        for (int i = 0; i < kAcc; i += 4) {
          if (!own(h, i)) continue;
          const float4 v = __ldcg(part + at(h, i));
          acc[h][i] += v.x, acc[h][i + 1] += v.y, acc[h][i + 2] += v.z, acc[h][i + 3] += v.w;
        }
    }
    ptx::named_barrier_sync(kConsumersBarrier, C::kConsumerThreads);
    if (st.ctid == 0) {  // ready for the next run: reset by the last participant to finish reading
      if (!shared) {
        p.flags[piece.tile] = 0;
      } else if ((atomicAdd(p.flags + piece.tile, 0x10000) >> 16) == tile.writers) {
        p.flags[piece.tile] = 0;
      }
    }
  }
  st.trace.add_since(kTraceHandoff, t_mark);
  return true;
}

// The epilogue of a piece: C[m][n] = alpha * acc (transposed back from the swap-AB tile), or the
// GLU of gate / up pairs, for the units pu names.
template <Format F, int N8, int H, bool kRouted, bool kGlu>
__device__ __forceinline__ void store_piece(const FusedParams& p, ConsumerState& st, const TileDesc& tile,
                                            const GroupParams& g, float (&acc)[H][4 * N8], const PieceUnits& pu,
                                            std::uint8_t* epi_smem, OutType out_type, Trace::Stamp t_mark) {
  using C = KernelConfig;
  const int t = st.t;
  const int passes = pu.passes, u0 = pu.u0, u1 = pu.u1;
  float mul = g.alpha_device ? *g.alpha_device : g.alpha;
  if constexpr (F == Format::nvfp4) mul *= kNvfp4AccScale;
  // A GLU kernel runs GLU plans only (launch_gemm): gate / up pairs -> one output column per pair (params.cuh).
  if constexpr (kGlu) {
    const MoeScheduleParams& m = p.moe;
    // MoE: per expert (tile.group) in the schedule's parameters; pointer-array: per group.
    float mul_up;
    int swap, width;
    if constexpr (kRouted) {
      mul_up = m.alpha_up_device ? m.alpha_up_device[tile.group] : m.alpha_up;
      swap = m.glu_swap, width = m.glu_width;
    } else {
      mul_up = g.alpha_up_device ? *g.alpha_up_device : g.alpha_up;
      swap = g.glu_swap, width = g.n / 2;
    }
    if constexpr (F == Format::nvfp4) mul_up *= kNvfp4AccScale;
    const void* bias = nullptr;  // (MoE only: this tile's expert's row of the bias)
    if constexpr (kRouted)
      if (m.glu_bias != nullptr)
        bias = static_cast<const char*>(m.glu_bias) +
               static_cast<std::int64_t>(tile.group) * 2 * width * (m.glu_bias_f32 ? 4 : 2);
    const GluArgs glu{m.glu, swap, width, m.swiglu_alpha, m.swiglu_limit, swap ? mul_up : mul, swap ? mul : mul_up,
                      kRouted ? m.q_format : 0, m.q_gs, m.q_scales, bias, m.glu_bias_f32, m.glu_bias_interleaved};
    std::uint8_t* epi = epi_smem + st.cw * (C::kEpiBytes / C::kConsumerWarpgroups);
    const int wtid = st.ctid % 128;
#pragma unroll
    for (int h = 0; h < H; ++h) {
      const int n_wg = tile.row0 + h * 128 + st.cw * 64;
      if (n_wg >= g.n) break;
      const int pb = min(max(u0 - h * passes, 0), passes), pe = min(max(u1 - h * passes, 0), passes);
      switch (out_type) {
        case OutType::f16: store_tile_glu<__half, N8>(acc[h], g, tile, n_wg, st.lane, glu, wtid / 32, st.cw, wtid, epi, pb, pe); break;
        case OutType::bf16: store_tile_glu<__nv_bfloat16, N8>(acc[h], g, tile, n_wg, st.lane, glu, wtid / 32, st.cw, wtid, epi, pb, pe); break;
        case OutType::f32: store_tile_glu<float, N8>(acc[h], g, tile, n_wg, st.lane, glu, wtid / 32, st.cw, wtid, epi, pb, pe); break;
      }
    }
    st.trace.add_since(kTraceEpilogue, t_mark);
    return;
  }
  // The MoE kernel's 16-token tiles store straight from the accumulators (2-byte stores, 8
  // consecutive n for 4 tokens per warp instruction, 8 per thread and half): no shared-memory
  // round trip and none of its named barriers, so the warpgroup goes on to its next piece at once.
  // Measured on H200: (a) -2.4 %, (c) -2.7 %, Qwen3 T 32 -5.9 %, its layer -4.8 %, (b) W4A4
  // +0.6 %; the 32-token class too cost (b) W4A4 +1.9 %, so it keeps the staged stores.
  constexpr bool kDirect = kRouted && N8 <= 2;
  if constexpr (kDirect) {
#pragma unroll
    for (int h = 0; h < H; ++h) {
      const int n_wg = tile.row0 + h * 128 + st.cw * 64;
      if (n_wg >= g.n) break;
      switch (out_type) {
        case OutType::f16: store_tile<__half, N8>(acc[h], g, tile, n_wg + st.row_in_tile % 64, t, mul); break;
        case OutType::bf16: store_tile<__nv_bfloat16, N8>(acc[h], g, tile, n_wg + st.row_in_tile % 64, t, mul); break;
        case OutType::f32: store_tile<float, N8>(acc[h], g, tile, n_wg + st.row_in_tile % 64, t, mul); break;
      }
    }
    st.trace.add_since(kTraceEpilogue, t_mark);
    return;
  }
  std::uint8_t* epi = epi_smem + st.cw * (C::kEpiBytes / C::kConsumerWarpgroups);
  const CUtensorMap* cmap = p.c_maps != nullptr && p.c_tma[tile.group] ? p.c_maps + 2 * tile.group : nullptr;
#pragma unroll
  for (int h = 0; h < H; ++h) {
    const int n_wg = tile.row0 + h * 128 + st.cw * 64;  // first weight row (n) of this half
    if (n_wg >= g.n) break;                            // (warpgroup-uniform) rows past N
    switch (out_type) {
      case OutType::f16: store_tile_smem<__half, N8>(acc[h], g, tile, n_wg, st.cw, st.ctid % 128, mul, epi, cmap); break;
      case OutType::bf16: store_tile_smem<__nv_bfloat16, N8>(acc[h], g, tile, n_wg, st.cw, st.ctid % 128, mul, epi, cmap); break;
      case OutType::f32: store_tile<float, N8>(acc[h], g, tile, n_wg + st.row_in_tile % 64, t, mul); break;
    }
  }
  st.trace.add_since(kTraceEpilogue, t_mark);
}

// One work piece (a k-block range of one tile) for a consumer warpgroup, in three parts: the
// mainloop (here), the split-K hand-off (splitk_handoff) and the epilogue (store_piece). N8 =
// tile tokens / 8, rounded up; the tile has H = 1 or 2 halves of 128 weight rows, and the
// warpgroup owns rows h * 128 + cw * 64 + [0, 64) of half h (whose scales are the stage's atom h).
template <Format F, int N8, int H, bool kRouted, bool kGlu, int kSmallMx, bool kPieces>
__device__ __forceinline__ void consume_piece(const FusedParams& p, ConsumerState& st, const WorkPiece& piece,
                                              const TileDesc& tile, std::uint8_t* act_smem,
                                              std::uint8_t* w_smem, std::uint64_t* full,
                                              std::uint64_t* empty, std::uint8_t* epi_smem, OutType out_type) {
  using C = KernelConfig;
  constexpr int kVec = F == Format::nvfp4 ? 16 : 32;
  constexpr int kAcc = 4 * N8;
  static_assert(H * kAcc <= C::kAccRegs, "accumulators beyond the register budget");
  const int stages = st.stages;
  GroupParams g = p.groups[tile.group];
  if (p.moe.experts > 0) g.c = p.moe.c, g.ldc = p.moe.ldc;  // the MoE plan's experts share the run's C
  const int t = st.t;
  const int cols = g.k / kVec;
  constexpr int kColsPerKb = 64 / kVec;

  float acc[H][kAcc];
  // Per k-block one commit group of every half (kKblockGroups): two sets of A-operand registers
  // [k-block parity][half][register: 4 k-steps x {lo, hi} slots][row r / r+8]; k-block kb is
  // dequantised into set kb % 2 while the group of k-block kb - 1 still runs, and a set is
  // rewritten only after wgmma_wait<1> has retired the group that read it. Two halves of 112 or
  // 128 tokens have no registers for two sets of both halves: there each half is its own group
  // and has its own set (in the order retire, dequantise, issue, half by half).
  constexpr bool kKblockGroups = kblock_groups(N8, H);
  constexpr int kSets = kKblockGroups ? 2 : 1;
  // Tiles of 16 tokens: two k-blocks per commit group (below).
  constexpr bool kPairs = kKblockGroups && N8 <= C::kPairMaxN8;
  // The MoE kernel's classes with one group per k-block (the 16-token class too; kernel_config.cuh,
  // moe_wide_stages): stage pairs from one weight box (below).
  constexpr bool kWide = kRouted && moe_wide_stages(N8, H);
  static_assert(!kWide || kKblockGroups, "stage pairs are consumed with two register sets");
  std::uint32_t a[kSets][H][8][2];

  // Weight scales come with the stage (the producer loads them). Blocked atom (SPEC 2): row r's
  // byte for column c is at (r % 32) * 16 + (r / 32) * 4 + c % 4; row r + 8 is 128 bytes further
  // (r % 32 is < 24 for every consumer row r). NVFP4: this thread's column is 4 kb + t, so c % 4 =
  // t; MXFP4 (one atom spans two k-blocks): 2 kb + t / 2, so c % 4 = 2 (kb % 2) + t / 2.
  const int tcol = F == Format::nvfp4 ? t : t / 2;  // scale column of this thread within the k-block
  const int s_off = formats::detail::blocked_atom_offset(st.row_in_tile, tcol);
  // Columns past K read as scale 0 (the padding of a user's blocked buffer may hold anything,
  // NaN codes included): k-block kb has this thread's column iff kb * kColsPerKb < col_end.
  const int col_end = cols - tcol;
  // kSmallMx == kMxOneChecked: per half, bit 31 once a scale code > 128 was read (dequant_raw;
  // reported below).
  std::uint32_t bad_code[H] = {};
  // Arrives on the `empty` barrier of the stage before the current one (its groups are done).
  // Every consumer thread arrives, after its own retiring wait, so each thread's LDS of the stage
  // is ordered before the producer's refill by its own arrive (as CUTLASS's consumer release
  // does). One arrive per warpgroup, relying on the wgmma being a warpgroup operation, leaves the
  // stage refills unordered for the other threads' loads: racecheck flagged them once a test CTA
  // reused its ring's stages.
  auto release_previous_stage = [&] { ptx::mbarrier_arrive(&empty[st.stage == 0 ? stages - 1 : st.stage - 1]); };
  // Half h of k-block kb as read from stage `stage`: its two rows' 16 weights and scale codes.
  struct HalfRaw {
    uint2 q0, q1;
    unsigned c0, c1;
  };
  auto load_half = [&](int stage, int kb, int h) {
    HalfRaw r;
    if constexpr (kPieces) {  // the 16-row block's piece: this lane's rows r | r + 8 in one 16-byte load
      const uint4 v = *reinterpret_cast<const uint4*>(w_smem + (stage * H + h) * C::kHalfWeightBytes +
                                                      (st.row_in_tile >> 4) * C::kPieceBytes + 16 * st.lane);
      r.q0 = make_uint2(v.x, v.y), r.q1 = make_uint2(v.z, v.w);
    } else {
      const std::uint8_t* wrow =
          w_smem + (stage * H + h) * C::kHalfWeightBytes + st.row_in_tile * (C::kBlockK / 2) + t * 8;
      r.q0 = *reinterpret_cast<const uint2*>(wrow);
      r.q1 = *reinterpret_cast<const uint2*>(wrow + 8 * (C::kBlockK / 2));
    }
    const std::uint8_t* srow = st.s_smem + (stage * H + h) * C::kScaleAtomBytes + s_off +
                               (F == Format::nvfp4 ? 0 : 2 * (kb & 1));
    r.c0 = srow[0];
    r.c1 = srow[128];
    return r;
  };
  // Dequantises a loaded half of k-block kb into `buf`.
  auto dequant_raw = [&](int kb, int h, const HalfRaw& r, std::uint32_t(&buf)[8][2]) {
    std::uint32_t s0, s1;
    if constexpr (F == Format::mxfp4 && kSmallMx != kMxTwo) {
      // One multiply (FusedParams::small_mx_scales, every code <= 128): 2^(code - 1) = 2^126 *
      // 2^(code - 127), the raw patterns' 2^126 folded in -- exponent field code + 126, normal for
      // every code 0..128 -- in both halves, one IMAD per code ((code + 126) << 7 = code * 0x80 +
      // 0x3F00). kMxOneChecked (the user's blocked scales, which may be rewritten after planning)
      // also checks the codes: the IMAD by 0x00810080 makes the multiplier's low half as before
      // and a high half code * 0x81 + 0x3F00 whose bit 15 is set iff code >= 129 (no carry
      // between the halves: both stay < 0x10000); the HMUL2s read the low half (.H0_H0) and one
      // LOP3 per half and k-block collects the high halves' bits (reported below). The mode is a
      // kernel template parameter, not a run-time branch: a branch on it inside the k-loop (tried
      // first) cost 5-16 % on both paths (H100). No past-K select: the plan scanned
      // every byte it reads, padding included, to be <= 128.
      if constexpr (kSmallMx == kMxOneChecked) {
        s0 = r.c0 * 0x00810080u + 0x3F003F00u;
        s1 = r.c1 * 0x00810080u + 0x3F003F00u;
        bad_code[h] |= s0 | s1;
      } else {
        s0 = r.c0 * 0x00800080u + 0x3F003F00u;
        s1 = r.c1 * 0x00800080u + 0x3F003F00u;
      }
    } else {
      const unsigned codes = r.c0 | (r.c1 << 8);
      weight_scale_pairs<F>(kb * kColsPerKb < col_end ? codes : 0u, s0, s1);
    }
    std::uint32_t d0[8], d1[8];
    dequant_row<F, kSmallMx, kPieces>(r.q0, s0, d0);
    dequant_row<F, kSmallMx, kPieces>(r.q1, s1, d1);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      buf[i][0] = d0[i];
      buf[i][1] = d1[i];
    }
  };
  // Loads half h of k-block kb from the current stage and dequantises it into `buf`.
  auto dequant_half = [&](int kb, int h, std::uint32_t(&buf)[8][2]) { dequant_raw(kb, h, load_half(st.stage, kb, h), buf); };
  // The stage's activation descriptor for k-step 0; k-step s adds 32 bytes (2 in the 16-byte
  // address field, which cannot carry: shared addresses are < 2^18).
  const std::uint32_t act_smem0 = ptx::smem_addr(act_smem);
  // Issues the 4 k-steps of halves [h0, h1) of k-block kb from `buf`, the activations at descriptor
  // desc0 (k-step 0 of a stage; no fence, no commit).
  // (adds: the k-block is not the piece's first -- known at the call for a pair's second k-block: as
  // kb > kb_begin ptxas tested it again, with a VOTEU before each such wgmma)
  auto issue_wgmmas_at = [&](int kb, std::uint64_t desc0, int h0, int h1, const std::uint32_t(&buf)[H][8][2],
                             bool adds = false) {
#pragma unroll
    for (int h = h0; h < h1; ++h) {
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        // Fragment: a0 (row r, slots 2t..), a1 (row r+8), a2 (row r, slots 2t+8..), a3.
        const std::uint32_t frag[4] = {buf[h][s][0], buf[h][s][1], buf[h][4 + s][0], buf[h][4 + s][1]};
        wgmma_rs<F, N8>(acc[h], frag, desc0 + 2 * s, (adds || kb > piece.kb_begin || s > 0) ? 1 : 0);
      }
    }
  };
  // The wgmma descriptor of stage `stage`'s activations (k-step 0). The stage's address goes through a warp
  // reduction (every lane holds the same value): REDUX writes a uniform register, so ptxas builds the k-steps'
  // descriptors with uniform operations. From the stage counter and base in regular registers it built each in a
  // regular register and moved it over before every HGMMA (6 R2UR per 4 HGMMAs, 20-22 instructions from the arrive
  // to the last HGMMA, in every class but the 16-token pairs; with the reduction 0 R2UR, 7-12 instructions).
  // Not in the pointer-array GLU kernels: there the reduction put 8 more bytes on the MXFP4 kernel's stack.
  auto stage_desc = [&](int stage) {
    std::uint32_t stage_smem = act_smem0 + stage * st.act_stage_bytes;
    if constexpr (kRouted || !kGlu) stage_smem = __reduce_max_sync(0xFFFFFFFFu, stage_smem);
    return ptx::smem_desc_sw128(stage_smem);
  };
  // The same from stage `stage`'s activations.
  auto issue_wgmmas = [&](int kb, int stage, int h0, int h1, const std::uint32_t(&buf)[H][8][2]) {
    issue_wgmmas_at(kb, stage_desc(stage), h0, h1, buf);
  };
  // Issues the 4 k-steps of halves [h0, h1) of k-block kb from `buf` as one commit group.
  auto issue = [&](int kb, int h0, int h1, const std::uint32_t(&buf)[H][8][2]) {
    fence_acc(acc);
    ptx::wgmma_fence();
    issue_wgmmas(kb, st.stage, h0, h1, buf);
    ptx::wgmma_commit();
  };
  const Trace::Stamp t_piece = st.trace.now();
  auto wait_stage = [&](int stage, std::uint32_t phase) {
    const Trace::Stamp t0 = st.trace.now();
    ptx::mbarrier_wait(&full[stage], phase);
    st.trace.add_since(kTraceBarrier, t0);
    st.trace.first_full();
  };
  auto wait_full = [&] { wait_stage(st.stage, st.phase); };
  auto next_stage = [&] {
    if (++st.stage == stages) {
      st.stage = 0;
      st.phase ^= 1;
    }
  };
  // Retires every commit group but the newest (wgmma_wait<1>), fencing the accumulators.
  auto retire_older_groups = [&] {
    fence_acc(acc);
    ptx::wgmma_wait<1>();
    fence_acc(acc);
  };

  // ---- stage pairs (kWide): the producer fills stages 2i and 2i + 1 together (fused_kernel.cuh, kbps): one
  // weight box of 64-byte rows over both stages' weight space, in TMA's 64-byte swizzle (16-byte chunk c of
  // smem row r at c ^ ((r >> 1) & 3)), k-block j of the pair in bytes 32 j..32 j + 31 of each row (pieces:
  // [16-row block][k-block j][piece]); scale atoms [half][2] over both stages' scale space (NVFP4: atom j;
  // MXFP4: one atom per two k-blocks, so a pair from an odd k-block spans two). Every piece's pairs start
  // at an even stage of an even ring, so a pair's second stage never wraps, and the odd last k-block of a
  // piece takes a whole pair. A pair has one `full` and one `empty` barrier, stage 2i's.
  // Scale bytes of k-block j of a pair past its half's first atom: NVFP4 atom j; MXFP4 the
  // columns 2 (kb % 2) of atom kb / 2 - kb0 / 2, which depend on j and the parity of the pair's
  // first k-block only -- the parity of the piece's first (pairs advance by two): per piece,
  // not per pair (per pair it cost 4.4 instructions per k-block, W4A16).
  const int mx_odd = piece.kb_begin & 1;
  const int scale_j[2] = {F == Format::nvfp4 ? 0 : 2 * mx_odd,
                          F == Format::nvfp4 ? C::kScaleAtomBytes : (mx_odd ? C::kScaleAtomBytes : 2)};
  // k-block kb0 + j of the pair at stage s0 (kb0 its first; the scale offsets above already
  // hold its parity), half h. (Each thread's rows r, r + 8 have the same swizzle, (r >> 1) & 3,
  // as row r + 128 of the other half.)
  auto load_wide = [&](int s0, int kb0, int j, int h) {
    HalfRaw r;
    const int row = st.row_in_tile;
    if constexpr (kPieces) {  // [16-row block][k-block j][piece]
      const uint4 v = *reinterpret_cast<const uint4*>(w_smem + (s0 * H + 2 * h) * C::kHalfWeightBytes +
                                                      (row >> 4) * (2 * C::kPieceBytes) + j * C::kPieceBytes + 16 * st.lane);
      r.q0 = make_uint2(v.x, v.y), r.q1 = make_uint2(v.z, v.w);
    } else {
      const std::uint8_t* wrow = w_smem + (s0 * H + 2 * h) * C::kHalfWeightBytes + row * 64 +
                                 ((2 * j + t / 2) ^ ((row >> 1) & 3)) * 16 + (t & 1) * 8;
      r.q0 = *reinterpret_cast<const uint2*>(wrow);
      r.q1 = *reinterpret_cast<const uint2*>(wrow + 8 * 64);
    }
    (void)kb0;
    const std::uint8_t* srow = st.s_smem + (s0 * H + 2 * h) * C::kScaleAtomBytes + s_off + scale_j[j];
    r.c0 = srow[0];
    r.c1 = srow[128];
    return r;
  };
  // kWide: a pair's second stage's descriptor is its first's plus one stage (the descriptor's address field
  // counts 16 bytes and cannot carry: shared addresses are < 2^18), in a uniform register for the piece.
  [[maybe_unused]] const std::uint32_t desc_step =
      kWide ? __reduce_max_sync(0xFFFFFFFFu, static_cast<std::uint32_t>(st.act_stage_bytes) >> 4) : 0u;
  [[maybe_unused]] bool release_two = false;  // the last commit group read two stages (kPairs, not kWide)
  // kWide: the first stage of the newest pair issued, whose one `empty` barrier releases the pair.
  [[maybe_unused]] int last_s0 = 0;
  if constexpr (kPairs) {
    // 16-token tiles: two k-blocks (two ring stages) per commit group, as triton_kernels' 128-k
    // stages. Both stages' waits come first (kWide: the pair's one wait), then the two k-blocks'
    // dequantisation as one block of straight-line code, 16 wgmmas, one retiring wait and the
    // previous pair's release (two arrives; kWide: one). ptxas then computes the
    // activation descriptors in uniform registers (no R2UR before each HGMMA, where a profile
    // found `wait` stalls): 222.5 -> 200.8 instructions per k-block (W4A16 small-scale MXFP4),
    // 208.5 -> 192.8 (NVFP4), against one k-block per group. Four A register sets:
    // [pair parity][k-block of the pair]. The odd last k-block of a piece runs alone after a full
    // drain. Holding the previous pair while both stages of this one fill needs a ring of >= 4
    // stages (KernelConfig::kMinPairStages).
    //
    // The MoE kernel (kWide) reads its pairs from stage pairs (above). (Every piece has >= 1 k-block:
    // the device schedule makes no empty piece, and the release at the piece's end relies on it.)
    auto load_pair = [&](int s0, int s1, int kb0, int j, int h) {
      if constexpr (kWide) return load_wide(s0, kb0, j, h);
      else return load_half(j == 0 ? s0 : s1, kb0 + j, h);
    };
    std::uint32_t b[2][2][H][8][2];
    const int npair = (piece.kb_end - piece.kb_begin) / 2;
    int kb = piece.kb_begin;
    auto release_pair_before = [&](int s0) {  // the pair before s0 (kWide: the pair at last_s0)
      if constexpr (kWide) {
        ptx::mbarrier_arrive(&empty[last_s0]);
      } else {
        ptx::mbarrier_arrive(&empty[s0 == 0 ? stages - 1 : s0 - 1]);
        ptx::mbarrier_arrive(&empty[s0 >= 2 ? s0 - 2 : s0 + stages - 2]);
      }
    };
    for (int p0 = 0; p0 < npair; p0 += 2) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (p0 + u < npair) {
          const int s0 = st.stage;
          // (kWide: every pair starts at an even stage of an even ring, so its second stage never wraps)
          const bool wrap = !kWide && s0 + 1 == stages;
          const int s1 = wrap ? 0 : s0 + 1;
          const std::uint32_t ph1 = wrap ? st.phase ^ 1 : st.phase;
          wait_stage(s0, st.phase);
          if constexpr (!kWide) wait_stage(s1, ph1);  // (kWide: the pair's one barrier)
#pragma unroll
          for (int h = 0; h < H; ++h) dequant_raw(kb, h, load_pair(s0, s1, kb, 0, h), b[u][0][h]);
#pragma unroll
          for (int h = 0; h < H; ++h) dequant_raw(kb + 1, h, load_pair(s0, s1, kb, 1, h), b[u][1][h]);
          fence_acc(acc);
          ptx::wgmma_fence();
          if constexpr (kWide) {
            const std::uint64_t d0 = stage_desc(s0);  // (kWide is routed: through the reduction)
            // (the step added to the low word alone: a 64-bit add's carry took the predicate register
            // the scale-d tests use, and ptxas re-made that predicate before each wgmma)
            const std::uint64_t d1 = (d0 & 0xFFFFFFFF00000000ull) | static_cast<std::uint32_t>(static_cast<std::uint32_t>(d0) + desc_step);
            issue_wgmmas_at(kb, d0, 0, H, b[u][0]);
            issue_wgmmas_at(kb + 1, d1, 0, H, b[u][1], /*adds=*/true);
          } else {
            issue_wgmmas(kb, s0, 0, H, b[u][0]);
            issue_wgmmas(kb + 1, s1, 0, H, b[u][1]);
          }
          ptx::wgmma_commit();
          retire_older_groups();  // the previous pair's group is done
          if (kb > piece.kb_begin) release_pair_before(s0);
          if constexpr (kWide) last_s0 = s0;
          const bool wrap1 = s1 + 1 == stages;
          st.stage = wrap1 ? 0 : s1 + 1;
          st.phase = wrap1 ? ph1 ^ 1 : ph1;
          kb += 2;
        }
      }
    }
    if constexpr (!kWide) release_two = npair > 0;  // (kWide releases through last_s0)
    if (kb < piece.kb_end) {  // an odd last k-block
      ptx::wgmma_wait<0>();
      fence_acc(acc);
      if (npair > 0) release_pair_before(st.stage);
      if constexpr (!kWide) release_two = false;
      wait_full();  // (kWide: its pair's one barrier, released below)
#pragma unroll
      for (int h = 0; h < H; ++h) dequant_raw(kb, h, load_pair(st.stage, st.stage, kb, 0, h), b[0][0][h]);
      fence_acc(acc);
      ptx::wgmma_fence();
      issue_wgmmas(kb, st.stage, 0, H, b[0][0]);
      ptx::wgmma_commit();
      if constexpr (kWide) last_s0 = st.stage;
      next_stage();
      if constexpr (kWide) next_stage();  // (the odd k-block takes its whole pair; released through last_s0)
    }
  } else if constexpr (kWide) {
    // The MoE kernel's wider classes with one commit group per k-block, on stage pairs: one wait per
    // pair, then per k-block of it: dequantise into the free register set, issue it as one group,
    // retire the group before (wait<1>; after the pair's first k-block that completes the previous
    // pair, whose one `empty` barrier is then released). The odd last k-block takes its whole pair.
    // The odd last k-block inside the loop, its pair's second half replaced by a full drain: every path back to the
    // loop's top then leaves only the second set's group running (or none). (Behind a test without the drain, ptxas
    // saw a path back with the first set's group still running and serialised every wgmma of the kernel, C7513; after
    // the loop, the GLU kernels' stacks grew to 40-64 B, past the host tier's budget of 32.)
    auto kblock = [&](int s0, int kbj, int j, std::uint64_t d, std::uint32_t(&buf)[H][8][2]) {
#pragma unroll
      for (int h = 0; h < H; ++h) dequant_raw(kbj, h, load_wide(s0, kbj - j, j, h), buf[h]);
      fence_acc(acc);
      ptx::wgmma_fence();
      issue_wgmmas_at(kbj, d, 0, H, buf, /*adds=*/j > 0);
      ptx::wgmma_commit();
    };
    for (int kb = piece.kb_begin; kb < piece.kb_end; kb += 2) {
      const int s0 = st.stage;
      wait_stage(s0, st.phase);
      const std::uint64_t d0 = stage_desc(s0);
      kblock(s0, kb, 0, d0, a[0]);
      retire_older_groups();  // the previous pair's last group is done: release the pair
      if (kb > piece.kb_begin) ptx::mbarrier_arrive(&empty[last_s0]);
      if (kb + 1 < piece.kb_end) {
        const std::uint64_t d1 =  // (as the paired loop's: the step added to the low word alone)
            (d0 & 0xFFFFFFFF00000000ull) | static_cast<std::uint32_t>(static_cast<std::uint32_t>(d0) + desc_step);
        kblock(s0, kb + 1, 1, d1, a[1]);
        retire_older_groups();  // the pair's first group
      } else {
        ptx::wgmma_wait<0>();  // (the piece's odd last k-block: nothing left running)
        fence_acc(acc);
      }
      last_s0 = s0;
      const bool wrap = s0 + 2 == stages;
      st.stage = wrap ? 0 : s0 + 2;
      if (wrap) st.phase ^= 1;
    }
  } else if constexpr (kKblockGroups) {
    // Per k-block: wait for the stage, dequantise every half into the free register set, issue
    // them as one commit group, then retire the previous k-block's group and release its stage.
    // (With one group per half and the retiring wait before each half's dequantisation, ptxas
    // spread the next half's dequantisation between the current half's wgmmas.)
    for (int kb0 = piece.kb_begin; kb0 < piece.kb_end; kb0 += 2) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {  // unrolled so the A register sets have fixed names
        const int kb = kb0 + u;
        if (kb < piece.kb_end) {
          wait_full();
#pragma unroll
          for (int h = 0; h < H; ++h) dequant_half(kb, h, a[u][h]);
          issue(kb, 0, H, a[u]);
          retire_older_groups();  // the previous k-block's group is done: release its stage
          if (kb > piece.kb_begin) release_previous_stage();
          next_stage();
        }
      }
    }
  } else {
    for (int kb = piece.kb_begin; kb < piece.kb_end; ++kb) {
      wait_full();
#pragma unroll
      for (int h = 0; h < H; ++h) {
        // Retire the group that last read half h's registers (the other half's group may still
        // run); for the last half this completes every group of the previous k-block.
        retire_older_groups();
        if (h == H - 1 && kb > piece.kb_begin) release_previous_stage();
        dequant_half(kb, h, a[0][h]);
        issue(kb, h, h + 1, a[0]);
      }
      next_stage();
    }
  }
  ptx::wgmma_wait<0>();
  fence_acc(acc);
  if constexpr (kWide) {  // every piece ends a pair (>= 1 k-block); its one barrier
    ptx::mbarrier_arrive(&empty[last_s0]);
  } else {
    release_previous_stage();
    if (release_two) ptx::mbarrier_arrive(&empty[st.stage >= 2 ? st.stage - 2 : st.stage + stages - 2]);
  }
  if constexpr (kSmallMx == kMxOneChecked) {
    // (A half wholly past N is not loaded -- make_producer_piece -- and holds stale bytes: not checked.)
    const std::uint32_t bad = bad_code[0] | (H == 2 && tile.row0 + 128 < g.n ? bad_code[H - 1] : 0u);
    if (bad >> 31) moe_report(p.moe.error, kMoeBadScaleCode, tile.group, -1);
  }
  Trace::Stamp t_mark = st.trace.now();
  st.trace.add_between(kTraceMainloop, t_piece, t_mark);
  st.trace.add(kTraceKblocks, piece.kb_end - piece.kb_begin);
  st.trace.add(kTracePieces, 1);
  st.trace.add(kTraceTokenKblocks, (piece.kb_end - piece.kb_begin) * 8 * N8 * H);

  const PieceUnits pu = piece_units<H, kGlu>(piece, tile);
  if (!splitk_handoff<N8, H, kRouted>(p, st, piece, tile, acc, pu, t_mark)) return;
  store_piece<F, N8, H, kRouted, kGlu>(p, st, tile, g, acc, pu, epi_smem, out_type, st.trace.now());
}

}  // namespace fp4gemm::detail::sm90
