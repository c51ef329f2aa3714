// The fused kernel's epilogue: alpha-scaled FP32 accumulators of a swap-AB tile, transposed back
// and stored to row-major C (the warps' own 16-byte stores, or TMA stores from shared memory).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "device/glu.hpp"
#include "device/group_params.hpp"
#include "device/kernel_config.cuh"
#include "device/ptx/ptx.cuh"
#include "device/quantize_rule.cuh"
#include "device/schedule.hpp"

namespace fp4gemm::detail::sm90 {

template <typename T>
__device__ __forceinline__ void store_out(void* c, std::int64_t idx, float v);
template <>
__device__ __forceinline__ void store_out<__half>(void* c, std::int64_t idx, float v) {
  static_cast<__half*>(c)[idx] = __float2half_rn(v);
}
template <>
__device__ __forceinline__ void store_out<__nv_bfloat16>(void* c, std::int64_t idx, float v) {
  static_cast<__nv_bfloat16*>(c)[idx] = __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ void store_out<float>(void* c, std::int64_t idx, float v) {
  static_cast<float*>(c)[idx] = v;
}

// Writes the warpgroup's 64 x (8*n8) accumulator tile, transposed, into row-major C[m][n].
template <typename T, int N8, int A>
__device__ __forceinline__ void store_tile(const float (&acc)[A], const GroupParams& g,
                                           const TileDesc& tile, int r0, int t, float mul) {
  const int m_end = tile.tok0 + tile.ntok;
#pragma unroll
  for (int j = 0; j < N8; ++j) {
#pragma unroll
    for (int v = 0; v < 4; ++v) {
      const int n = r0 + (v >= 2 ? 8 : 0);
      const int m = tile.tok0 + 8 * j + 2 * t + (v & 1);
      if (n < g.n && m < m_end) store_out<T>(g.c, static_cast<std::int64_t>(m) * g.ldc + n, acc[4 * j + v] * mul);
    }
  }
}

template <typename T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&h);
  }
}

// 16-bit epilogue of one consumer warpgroup's half: 64 weight rows from n_wg x (8*N8) tokens, 128 tokens per
// pass, are transposed into shared memory with stmatrix ([token][64 n], 128-byte rows, 16-byte
// chunks XOR-swizzled by token % 8 so the 8 row addresses of a matrix hit distinct banks, which is
// TMA's 128-byte swizzle on the 1024-byte aligned buffer). With the group's C maps (`cmap`: boxes
// of 64 n x 64 tokens and 64 n x 8 tokens) one thread stores the pass with TMA and the warpgroup
// goes on: the stores drain while the next piece's mainloop runs, and TMA clips tokens past M_g and
// rows past N (in 16-byte steps, so a group gets maps only when its N is a multiple of 8). Tiles
// end on a multiple of 8 tokens unless they end the group, so 8-token boxes never reach into the
// next tile. Without maps (plans with < 4 pieces per CTA, or that group's N), the warpgroup writes
// 16-byte chunks of C rows itself (a chunk crossing N falls back to element stores).
template <typename T, int N8, int A>
__device__ __forceinline__ void store_tile_smem(const float (&acc)[A], const GroupParams& g, const TileDesc& tile,
                                                int n_wg, int cw, int wtid, float mul, std::uint8_t* epi,
                                                const CUtensorMap* cmap) {
  using C = KernelConfig;
  const int warp = wtid / 32, lane = wtid % 32;
  const std::uint32_t base = ptx::smem_addr(epi);
  constexpr int kPasses = (8 * N8 + C::kEpiTokens - 1) / C::kEpiTokens;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    constexpr int kJPerPass = C::kEpiTokens / 8;
    // The buffer is free once the previous pass (or tile) is read out: by the warpgroup, or by
    // the TMA stores thread 0 issued (a no-op without any).
    if (wtid == 0) ptx::bulk_wait_group_read_0();
    ptx::named_barrier_sync(kEpilogueBarrier0 + cw, 128);
    // Lane -> row address: matrix i = lane / 8 is (j + i / 2, half i % 2), token row lane % 8.
    // Token m = (jj + mi / 2) * 8 + mrow, so m % 8 = mrow and the swizzled chunk is the same for
    // every jj: one address register plus an immediate offset per jj (separate per-jj addresses
    // were hoisted out of the piece loop by the compiler and held 8 registers through the mainloop).
    const int mi = lane / 8, mrow = lane % 8;
    const int st_chunk = (warp * 2 + (mi & 1)) ^ mrow;  // 16-byte chunk (8 n values), swizzled
    const std::uint32_t addr0 = base + ((mi >> 1) * 8 + mrow) * 128 + st_chunk * 16;
#pragma unroll
    for (int jj = 0; jj < kJPerPass; jj += 2) {
      const int j = pass * kJPerPass + jj;
      if (j >= N8) break;
      const std::uint32_t addr = addr0 + jj * 8 * 128;
      const std::uint32_t lo0 = pack2<T>(acc[4 * j] * mul, acc[4 * j + 1] * mul);
      const std::uint32_t hi0 = pack2<T>(acc[4 * j + 2] * mul, acc[4 * j + 3] * mul);
      if (j + 1 < N8) {
        const std::uint32_t lo1 = pack2<T>(acc[4 * j + 4] * mul, acc[4 * j + 5] * mul);
        const std::uint32_t hi1 = pack2<T>(acc[4 * j + 6] * mul, acc[4 * j + 7] * mul);
        ptx::stmatrix_x4_trans(addr, lo0, hi0, lo1, hi1);
      } else {
        ptx::stmatrix_x2_trans(addr, lo0, hi0);  // lanes 0-15 give the addresses
      }
    }
    const int tokens = min(C::kEpiTokens, tile.ntok - pass * C::kEpiTokens);
    if (cmap != nullptr) {
      ptx::fence_proxy_async_shared();  // the stmatrix writes, visible to TMA
      ptx::named_barrier_sync(kEpilogueBarrier0 + cw, 128);
      if (wtid == 0) {
        const int m0 = tile.tok0 + pass * C::kEpiTokens;
        int r = 0;
        for (; r + 64 <= tokens; r += 64) ptx::tma_store_2d(cmap, epi + r * 128, n_wg, m0 + r);
        for (; r < tokens; r += 8) ptx::tma_store_2d(cmap + 1, epi + r * 128, n_wg, m0 + r);
        ptx::bulk_commit_group();
      }
      continue;
    }
    ptx::named_barrier_sync(kEpilogueBarrier0 + cw, 128);
    // Read back: 8 chunks per token row, 16 token rows per sweep of the warpgroup.
    const int chunk = wtid % 8;
    const int n0 = n_wg + chunk * 8;
    // m % 8 = (wtid / 8) % 8 for every m of this thread, so the swizzled chunk offset is fixed.
    const std::uint8_t* src = epi + (wtid / 8) * 128 + (chunk ^ ((wtid / 8) & 7)) * 16;
    for (int m = wtid / 8; m < tokens; m += 16, src += 16 * 128) {
      const uint4 v = *reinterpret_cast<const uint4*>(src);
      T* dst = static_cast<T*>(g.c) + static_cast<std::int64_t>(tile.tok0 + pass * C::kEpiTokens + m) * g.ldc + n0;
      if (n0 + 8 <= g.n) {
        *reinterpret_cast<uint4*>(dst) = v;
      } else {
        const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {  // compile-time indices: stays in registers
          if (n0 + i < g.n) {
            const std::uint16_t bits = static_cast<std::uint16_t>(w[i / 2] >> (16 * (i % 2)));
            reinterpret_cast<std::uint16_t*>(dst)[i] = bits;
          }
        }
      }
    }
  }
}

// ---- GLU epilogue (MoE GLU plans: params.cuh, MoeScheduleParams::glu) --------------------------

constexpr int kGluPassTokens = 64;  // tokens per pass of the GLU epilogue (store_tile_glu)

struct GluArgs {
  int kind, swap, width;  // width: I, the output columns
  float alpha, limit;     // swigluoai
  float mul_first, mul_second;  // alphas of the map's first / second 8 rows of each 16
  int q_format;                 // MoeScheduleParams::q_format: 0, quantised output (Format + 1), or kGluKOrder
  float q_gs;
  std::uint8_t* q_scales;
  const void* bias;  // this tile's expert's [2 width] gate / up bias (MoeScheduleParams::glu_bias), or null
  int bias_f32, bias_interleaved;
};

// Output column col's gate and up bias (-0 without one: x + -0 is x for every x, signed zeros
// included, so a layer without biases keeps its bits).
__device__ __forceinline__ float2 glu_bias_pair(const GluArgs& a, int col) {
  if (a.bias == nullptr || col >= a.width) return make_float2(-0.0f, -0.0f);
  const int g = a.bias_interleaved ? 2 * col : col, u = a.bias_interleaved ? 2 * col + 1 : a.width + col;
  if (a.bias_f32) {
    const float* b = static_cast<const float*>(a.bias);
    return make_float2(b[g], b[u]);
  }
  const __nv_bfloat16* b = static_cast<const __nv_bfloat16*>(a.bias);
  return make_float2(__bfloat162float(b[g]), __bfloat162float(b[u]));
}

// One warpgroup half of a GLU tile: the thread's accumulators of rows r (gate) and r + 8 (up) are
// the pair of output column n_wg / 2 + warp * 8 + lane / 4 for tokens 2t, 2t + 1 of each 8-token
// step j. The pairs (alpha-scaled, FP32) are staged in the warpgroup's epilogue buffer, 64 tokens
// at a time ([token][32 columns] float2 = 16 KB), and a rolled loop evaluates the activation and
// stores: 16 threads per token row, two adjacent columns each (I is a multiple of 8). Evaluating
// the activation in registers, unrolled per j, gives ~2000 straight-line instructions per width
// class that run once per tile, cold in the instruction cache -- the dual GEMM ran at half the
// plain GEMM's tensor rate that way (ncu: "no instruction" stalls 11 % -> 25 %).
// The drain's loop body is one basic block: both activations' kinds are one formula (glu.hpp,
// GluParams; glu_activate_pair) and the division is glu_div_fast, so the compiler can interleave the
// two independent chains, which the kind's branch and the IEEE division's slow-path branch would serialise.
// (Tried: a rolled pass loop with one drain copy of 4 activations per iteration -- every
// accumulator then stays live across the loop and ptxas spilled them. Also tried: glu_drain
// __noinline__, one copy per output type instead of ~200 inlined ones -- the MoE GLU units compile
// ~2.3x faster and the bytes are the same, but the layer's GLU-heavy cells ran 1-6 % slower.)
struct GluDrain {
  void* c;
  std::int64_t ldc;  // elements (quantised output: bytes of packed FP4)
  int m0, tokens, col0, width;
  GluParams act;
  int q_format;  // 0: 16/32-bit output; 1 nvfp4, 2 mxfp4: FP4 rows + linear scales (q_scales); kGluKOrder
  float q_gs;
  std::uint8_t* q_scales;
};

// Quantised output (MoeOptions::quantize_output): the two values of this thread, rounded to bf16,
// quantised with the block they belong to (16 / 32 consecutive columns of row r: 8 / 16 adjacent
// lanes, which share r and all return together past the width) by the quantiser's rule
// (device/quantize_rule.cuh; the block's amax by shuffles): one packed byte per thread, the scale
// byte from the block's first lane.
template <Format QF>
__device__ __forceinline__ void glu_store_quantized(const GluDrain& d, int r, int col, float o0, float o1, int lane) {
  constexpr int kVec = QF == Format::nvfp4 ? 16 : 32, kLanes = kVec / 2;
  const float x0 = __bfloat162float(__float2bfloat16_rn(o0)), x1 = __bfloat162float(__float2bfloat16_rn(o1));
  const unsigned mask = (kLanes == 8 ? 0xFFu : 0xFFFFu) << (lane & (32 - kLanes));
  float m = fmaxf(fabsf(x0), fabsf(x1));
#pragma unroll
  for (int off = 1; off < kLanes; off *= 2) m = fmaxf(m, __shfl_xor_sync(mask, m, off));
  const bool nan = __any_sync(mask, x0 != x0 || x1 != x1);
  const float amax = nan ? __uint_as_float(0x7FC00000u) : m;
  const std::uint32_t code =
      QF == Format::nvfp4 ? quant::nv_scale_code_exact(amax, d.q_gs) : quant::mx_scale_code(amax);
  const std::uint32_t byte = quant::element_nibble<QF>(x0, code, d.q_gs) | (quant::element_nibble<QF>(x1, code, d.q_gs) << 4);
  const std::int64_t row = d.m0 + r;
  static_cast<std::uint8_t*>(d.c)[row * d.ldc + col / 2] = static_cast<std::uint8_t>(byte);
  if ((lane & (kLanes - 1)) == 0) d.q_scales[row * (d.width / kVec) + col / kVec] = static_cast<std::uint8_t>(code);
}

template <typename T>
__device__ __forceinline__ void glu_store(const GluDrain& d, int r, int col, float o0, float o1) {
  T* row = static_cast<T*>(d.c) + static_cast<std::int64_t>(d.m0 + r) * d.ldc + col;
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float2*>(row) = make_float2(o0, o1);  // (col even, ldc a multiple of 8)
  } else {
    *reinterpret_cast<std::uint32_t*>(row) = pack2<T>(o0, o1);
  }
}

template <typename T>
__device__ __forceinline__ void glu_drain(const float2* buf, const GluDrain& d, int wtid) {
  const int cp = wtid % 16;
  // kGluKOrder (group_params.hpp; the width a multiple of 64): the pair staged at slots 2cp, 2cp + 1
  // (store_tile_glu) is columns j0, j0 + 4 of the warpgroup's 32 (half u of a 64-column k-block),
  // j0 = 8 (2 (cp % 2) + (cp / 2) % 2) + cp / 4, which sit side by side in the k order: chunk cp / 2,
  // slots 2 (2u + cp % 2) and + 1, i.e. column (col0 - 32u) + 8 (cp / 2) + 4u + 2 (cp % 2) = the plain
  // col0 + 2cp plus 4 (cp / 2) - 28u. (Past the width iff col0 is: whole 64-column blocks.) Written
  // as that offset times a 0 / 1 flag: a select between the two columns made ptxas spill in the MoE
  // GLU kernels (stack 24 -> 40-80 B; the accumulators of the tile's later passes are live here).
  const int korder = d.q_format == kGluKOrder ? 1 : 0;
  const int col = d.col0 + 2 * cp + korder * glu_k_order_shift(d.col0, cp);
  if (col >= d.width) return;
#pragma unroll 1
  for (int r = wtid / 16; r < d.tokens; r += 8) {  // (the 16 lanes of a row share r)
    const float4 x = *reinterpret_cast<const float4*>(buf + r * 32 + 2 * cp);
    const float2 o = glu_activate_pair(make_float2(x.x, x.y), make_float2(x.z, x.w), d.act);
    const float o0 = o.x, o1 = o.y;
    if (d.q_format == 0 || d.q_format == kGluKOrder) glu_store<T>(d, r, col, o0, o1);
    else if (d.q_format == 1) glu_store_quantized<Format::nvfp4>(d, r, col, o0, o1, wtid % 32);
    else glu_store_quantized<Format::mxfp4>(d, r, col, o0, o1, wtid % 32);
  }
}

// Passes [pass_begin, pass_end) of the tile's 64-token passes (a shared epilogue's share,
// mainloop.cuh; warpgroup-uniform, so the named barriers stay matched).
template <typename T, int N8, int A>
__device__ __forceinline__ void store_tile_glu(const float (&acc)[A], const GroupParams& g, const TileDesc& tile,
                                               int n_wg, int lane, const GluArgs& a, int warp, int cw, int wtid,
                                               std::uint8_t* epi, int pass_begin, int pass_end) {
  constexpr int kPassTokens = kGluPassTokens, kJPerPass = kPassTokens / 8;
  constexpr int kPasses = (8 * N8 + kPassTokens - 1) / kPassTokens;
  const int q = lane / 4, t = lane % 4;
  float2* buf = reinterpret_cast<float2*>(epi);
  const float mul_gate = a.swap ? a.mul_second : a.mul_first, mul_up = a.swap ? a.mul_first : a.mul_second;
  const float2 bias = glu_bias_pair(a, n_wg / 2 + warp * 8 + q);  // this thread's output column
  GluDrain d{g.c, g.ldc, 0, 0, n_wg / 2, a.width, glu_params(a.kind, a.alpha, a.limit), a.q_format, a.q_gs, a.q_scales};
  // This thread's column warp * 8 + q of the 32 is staged at slot warp * 8 + q, or (kGluKOrder) at the
  // slot glu_drain's thread cp = 4 (q % 4) + 2 (warp % 2) + warp / 2 reads: 2 cp + q / 4.
  const int slot = a.q_format == kGluKOrder ? glu_k_order_slot(warp, q) : warp * 8 + q;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    if (pass < pass_begin || pass >= pass_end) continue;
    ptx::named_barrier_sync(kEpilogueBarrier0 + cw, 128);  // the buffer is free (previous pass drained)
#pragma unroll
    for (int jj = 0; jj < kJPerPass; ++jj) {
      const int j = pass * kJPerPass + jj;
      if (j >= N8) break;
#pragma unroll
      for (int v = 0; v < 2; ++v) {
        const float first = acc[4 * j + v], second = acc[4 * j + 2 + v];
        buf[(8 * jj + 2 * t + v) * 32 + slot] =
            make_float2(fmaf(a.swap ? second : first, mul_gate, bias.x), fmaf(a.swap ? first : second, mul_up, bias.y));
      }
    }
    ptx::named_barrier_sync(kEpilogueBarrier0 + cw, 128);
    d.m0 = tile.tok0 + pass * kPassTokens;
    d.tokens = min(kPassTokens, tile.ntok - pass * kPassTokens);
    glu_drain<T>(buf, d, wtid);
  }
}

}  // namespace fp4gemm::detail::sm90
