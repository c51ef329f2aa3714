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

struct GluArgs {
  int kind, swap, width;  // width: I, the output columns
  float alpha, limit;     // swigluoai
  float mul_first, mul_second;  // alphas of the map's first / second 8 rows of each 16
};

// One warpgroup half of a GLU tile: the thread's accumulators of rows r (gate) and r + 8 (up) give
// output column n_wg / 2 + warp * 8 + lane / 4 for tokens 2t, 2t + 1 of each 8-token step j.
// 16-bit outputs: lanes q and q ^ 1 (lane / 4) swap one value so that each stores two adjacent
// columns of one token as one 4-byte word (I is a multiple of 8: a column group is all in or out).
template <typename T, int N8, int A>
__device__ __forceinline__ void store_tile_glu(const float (&acc)[A], const GroupParams& g, const TileDesc& tile,
                                               int n_wg, int lane, const GluArgs& a, int warp) {
  const int q = lane / 4, t = lane % 4;
  const int col = n_wg / 2 + warp * 8 + q;
  const bool col_ok = col < a.width;
  const int m_end = tile.tok0 + tile.ntok;
#pragma unroll
  for (int j = 0; j < N8; ++j) {
    float o[2];
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const float first = acc[4 * j + v] * a.mul_first, second = acc[4 * j + 2 + v] * a.mul_second;
      o[v] = glu_activate(a.kind, a.swap ? second : first, a.swap ? first : second, a.alpha, a.limit);
    }
    const int m0 = tile.tok0 + 8 * j + 2 * t;
    if constexpr (std::is_same_v<T, float>) {
#pragma unroll
      for (int v = 0; v < 2; ++v)
        if (col_ok && m0 + v < m_end) static_cast<float*>(g.c)[static_cast<std::int64_t>(m0 + v) * g.ldc + col] = o[v];
    } else {
      const bool even = (q & 1) == 0;
      const float recv = __shfl_xor_sync(0xFFFFFFFFu, even ? o[1] : o[0], 4);
      const int m = even ? m0 : m0 + 1;
      if (col_ok && m < m_end) {
        const std::uint32_t word = even ? pack2<T>(o[0], recv) : pack2<T>(recv, o[1]);
        *reinterpret_cast<std::uint32_t*>(static_cast<T*>(g.c) + static_cast<std::int64_t>(m) * g.ldc + (col & ~1)) = word;
      }
    }
  }
}

}  // namespace fp4gemm::detail::sm90
