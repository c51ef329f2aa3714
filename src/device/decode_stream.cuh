// The decode path's parts (kernels/decode_layer.cu): a warp streams 16 FP4 weight rows of one
// expert through a ring in shared memory, dequantising exactly to bf16 (NVFP4 W4A4: f16) and
// multiplying with `mma.sync` m16n8k16 (FP32 accumulators) against up to 8 token columns; a CTA-level
// stream-K gives each CTA (one per SM) a balanced share of whole units and each of its warps the
// same number of 128-wide k chunks of that share, split units handed over in shared memory.
//
// Why warps and mma.sync rather than the fused kernel's TMA ring and wgmma: with 1-8 tokens per
// expert the GEMM is a matrix-vector product; what bounds it is how many weight bytes the SMs keep
// in flight and how few instructions each weight costs, not the tensor rate. A warp with its own
// loads (no producer, no barriers) starts streaming at once, and thousands of warps over all SMs
// keep HBM busy (Little's law: ~32 KB per SM in flight at 4 TB/s).
//
// Why a per-lane cp.async ring with one copy of the loop body: the stage index is a run-time value,
// so the loop is one consume, one issue and the unit changes, once (~900 instructions of SASS
// instead of ~2,400 for a register ring unrolled over its stages). The kernels are sensitive to
// their code size: on the H200, variants that executed fewer instructions from more code were
// slower (ncu's no_instruction stalls; docs/PERF.md). Each lane copies its own bytes into its own
// slots and reads them back itself, so the ring needs no barrier and no exchange -- except NVFP4 weights in pieces
// with blocked scales, whose lanes read the code words two lanes of their row copied (walk_share: __syncwarp).
//
// Register layout (the m16n8k16 fragments): lane (g, c) = (lane / 4, lane % 4) holds weight rows
// g and g + 8 and, of each 128-wide k chunk, elements 32c..32c+31 -- 16 bytes per row, one MXFP4
// scale block (two NVFP4 blocks). Word q of a row (elements 8q..8q+7) becomes 4 bf16 pairs
// (e2m1_quad_bf16_raw: nibbles (p, p + 4)); k-step (q, h) multiplies pairs 2h (k slots 2c, 2c+1)
// and 2h + 1 (slots 2c+8, 2c+9). The activations are stored in that pairing already (kernel 1
// stages the tokens so in shared memory, and writes the intermediate so for kernel 2: within each
// 8 elements, stored word p = elements (p, p + 4); `pair_position`), so a 16-byte load is the B
// registers of two k-steps. Exact: e2m1 * 2^e is exact in bf16, the products are exact in FP32.
// NVFP4 (only W4A4 takes the decode path with NVFP4 weights) runs in f16 as the general path does:
// e2m1_quad_f16_raw's pairing (pair_position_nv), one multiply per pair by scale * 2^7.
// Two accumulators (h = 0, 1) halve the mma dependency chain; they are added when a piece ends.
//
// Per chunk and lane: two 16-byte cp.async copies of the weight rows and two 16-byte shared loads
// back; the rows' scale codes (blocked scales: two 4-byte cp.async copies and shared loads; linear:
// two L1 loads into registers); four 16-byte activation loads (shared memory or L1); and constant
// cursor steps (the scale column moves a whole blocked atom, or 128 / vec bytes, per chunk).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "device/dequant.cuh"
#include "device/mainloop.cuh"
#include "device/ptx/ptx.cuh"
#include "formats/scale_layout.hpp"

// A trace build's phase stamps (kernels/decode_layer.cu defines it under FP4GEMM_TRACE).
#ifndef DECODE_STAMP
#define DECODE_STAMP(p)
#endif
namespace fp4gemm::detail::decode {

constexpr int kChunk = 128;  // k elements per chunk (a warp's 16 rows x 128 = 2048 weights)

// Where element i of an activation row is stored: within each 8 elements, stored word p (elements
// 2p, 2p + 1 of the row's storage) holds elements (p, p + 4) -- the B registers' pairing.
__host__ __device__ __forceinline__ int pair_position(int i) {
  const int e = i & 7;
  return (i & ~7) | (e < 4 ? 2 * e : 2 * (e - 4) + 1);
}
// NVFP4 (W4A4 only: weights and activations in f16, e2m1_quad_f16_raw's pairing): stored words
// (e0, e2), (e1, e3), (e4, e6), (e5, e7).
__host__ __device__ __forceinline__ int pair_position_nv(int i) {
  const int e = i & 7, r = e & 3;
  return (i & ~7) | ((e & 4) + (r & 1) * 2 + (r >> 1));
}
// Weights in pieces (WeightLayout::pieces: per 16 rows and 64-wide k-block 512 bytes, lane (g, c) holding bytes
// 8c..8c+7 of rows g and g + 8): lane c's 32 weights of a 128-wide chunk are elements 16c..16c+15 of the chunk's two
// k-blocks, so its activations are stored in that order -- lane c's 32 stored elements are k-block 2 ch's 16c..16c+7,
// 16c+8..+15, then 2 ch + 1's, each 8 in the format's pairing (an NVFP4 scale block stays 16 stored elements in a
// row, so the in-place quantisation of W4A4's intermediate sees the same blocks).
__host__ __device__ __forceinline__ int pieces_group(int i) {  // where element i's group of 8 is stored
  const int w = i & 127, kbl = w >> 6, c = (w >> 4) & 3, h = (w >> 3) & 1;
  return (i & ~127) | (32 * c + 8 * (2 * kbl + h));
}
__host__ __device__ __forceinline__ int pieces_position(int i) { return pieces_group(i) | pair_position(i & 7); }
template <Format F, bool P = false>
__host__ __device__ __forceinline__ int pair_position_of(int i) {
  if constexpr (P) return pieces_group(i) | (F == Format::nvfp4 ? pair_position_nv(i & 7) : pair_position(i & 7));
  return F == Format::nvfp4 ? pair_position_nv(i) : pair_position(i);
}

// Where a unit's activations live: global memory (kernel 2's intermediate rows; a lane past K
// reads the zero row) or the CTA's shared memory (kernel 1's staged tokens, padded with zeros to a
// whole chunk, so a lane past K reads zeros where it is). at(row, ch, c): lane c's first 16 bytes of
// chunk ch; load(a, q): its q-th 16 bytes (elements 8q..8q+7 of its 32).
// Global activations are loaded into registers a chunk ahead (kAhead: walk_share issues chunk i + 1's loads before
// multiplying chunk i), so their L2 latency overlaps a chunk's math instead of stalling it; shared ones at use.
struct XGlobal {
  using Addr = const __nv_bfloat16*;
  static constexpr bool kPadded = false;
  static constexpr bool kAhead = true;
  __device__ static Addr from(const void* p) { return static_cast<Addr>(p); }
  __device__ static Addr advance(Addr a, int elements) { return a + elements; }
  __device__ static Addr at(Addr row, int ch, int c) { return row + kChunk * ch + 32 * c; }
  __device__ static uint4 load(Addr a, int q) { return __ldg(reinterpret_cast<const uint4*>(a) + q); }
};
// Kernel 2's intermediate on pieces: rows padded with zeros to a whole chunk (never written past K; moe_layer.cpp), so
// a lane past K reads zeros where it is, as from shared memory.
struct XGlobalPadded : XGlobal {
  static constexpr bool kPadded = true;
};
// The fused decode kernel's intermediate: written in the same grid, so read with coherent loads (ld.global, after the
// grid barrier's acquire), not ld.global.nc.
struct XCoherent : XGlobal {
  __device__ static uint4 load(Addr a, int q) {
    uint4 v;
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(reinterpret_cast<const uint4*>(a) + q)
                 : "memory");
    return v;
  }
};
struct XCoherentPadded : XCoherent {
  static constexpr bool kPadded = true;
};
// Kernel 1's staged tokens, in shared memory, bank-conflict free: within a chunk (16 granules of 16 bytes) lane c's
// q-th granule is stored at granule 4q + c (staged_granule), so the four lanes of a row read 64 contiguous bytes per
// load; a row is kStagedRowPad bytes longer than its elements (an odd multiple of 64), so rows g and g + 1 fall in
// opposite halves of the banks and the 8 rows of a load take the 4 wavefronts 512 bytes need. (Stored as the rows
// are, lane c's 64 bytes at 64c, lanes c and c + 2 met in the same banks and every row in the same ones: 16
// wavefronts per load with 8 tokens, 2 with one; they were most of kernel 1's shared-memory traffic, and its
// bound at T 8.)
struct XShared {
  using Addr = std::uint32_t;
  static constexpr bool kPadded = true;
  static constexpr bool kAhead = false;
  __device__ static Addr from(const void* p) { return static_cast<Addr>(__cvta_generic_to_shared(p)); }
  __device__ static Addr advance(Addr a, int elements) { return a + 2 * elements; }
  __device__ static Addr at(Addr row, int ch, int c) { return row + 2 * kChunk * ch + 16 * c; }
  __device__ static uint4 load(Addr a, int q) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a + 64 * q));
    return v;
  }
};
constexpr int kStagedRowPad = 64;  // bytes after each staged token row (XShared)
// Where granule j (16 bytes: elements 8j..8j+7 of a row's storage) of a staged row is stored: the two 2-bit fields of
// its index within the chunk swapped (lane c's q-th granule 4c + q -> 4q + c).
__host__ __device__ __forceinline__ int staged_granule(int j) { return (j & ~15) | (j & 3) << 2 | (j >> 2 & 3); }

// One chunk's operands for one lane, as the multiply reads them: 16 bytes of each of the two
// weight rows, their scale codes (MXFP4: one per row; NVFP4: two per row, the first in the low
// byte) and where its activations are (token g's, or zeros past K / for an absent token).
template <class XS>
struct Stage {
  uint4 wg, wh;
  unsigned cg, ch;
  typename XS::Addr x;
  uint4 xv[4];  // XS::kAhead: the activations, already loaded
};

// A scale code (T: one byte, or NVFP4's two adjacent ones), read-only through L1.
template <class T>
__device__ __forceinline__ unsigned load_code(const std::uint8_t* p) {
  unsigned v;
  if constexpr (sizeof(T) == 1) asm volatile("ld.global.nc.u8 %0, [%1];" : "=r"(v) : "l"(p));
  else asm volatile("ld.global.nc.u16 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
// An L2 cache policy for bytes read once: first out of L2 (createpolicy, kept in a register for the copies below).
__device__ __forceinline__ std::uint64_t l2_policy_evict_first() {
  std::uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
// 16 bytes global -> shared (a 32-bit shared address: the ring's slots are kept in registers as shared addresses, not
// re-derived from a generic pointer each chunk), zeros where not `valid` (then the source is not read). Streaming: not
// kept in L1; the L2 fetches the 128-byte line (a warp reads 64 bytes of each of 8 rows per copy). An L2::256B
// prefetch measured slower on the H200 (docs/PERF.md). (Advancing the cursors first and copying from behind them, to
// spare ptxas its moves of each cursor before the copies, gave the same SASS count: ptxas folds the offset back.)
// The weight codes go first out of L2 (`policy`: l2_policy_evict_first) so that the scale sectors stay there between
// the units that share them: a 16-row block's codes of a chunk are 4 bytes of each of 16 16-byte groups of its blocked
// atom, whose other 12 bytes are the rows 32, 64 and 96 on -- units a warp reaches 2, 4 and 6 units later. Without the
// policy the codes' stream evicted those sectors in between and each was read from HBM up to four times: ncu, gpt-oss
// T 64 wide kernel 1, 1.20 GB read for 1.00 GB of weights and scales (1.04 with it); the layer 6-9 % faster (docs/PERF.md).
__device__ __forceinline__ void cp_async_16_at(std::uint32_t dst, const void* src, bool valid, std::uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::128B [%0], [%1], 16, %2, %3;" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0), "l"(policy)
               : "memory");
}
#ifndef FP4GEMM_EXP_ROWS_POLICY
#define FP4GEMM_EXP_ROWS_POLICY 0
#endif
// Weights in rows: no policy. A warp's copy is 64 bytes of each of 8 rows -- half of each 128-byte line, the other
// half being its next chunk, which the L2::128B fetch brings in with it. Marked evict_first, those halves were evicted
// before the next chunk came for them whenever L2 was full of other (dirty) lines, as it is after the benchmarks'
// flush and in a model: gpt-oss-120b T 8 on rows with linear scales 183 -> 203 us (docs/PERF.md).
__device__ __forceinline__ void cp_async_16_at(std::uint32_t dst, const void* src, bool valid) {
#if FP4GEMM_EXP_ROWS_POLICY == 1
  asm volatile("{\n .reg .b64 p;\n createpolicy.fractional.L2::evict_first.b64 p, 1.0;\n"
               " cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, p;\n}" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
#else
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
#endif
}
__device__ __forceinline__ void cp_async_4_at(std::uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ __forceinline__ uint4 lds_128(std::uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}
__device__ __forceinline__ uint2 lds_64(std::uint32_t a) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
  return v;
}
__device__ __forceinline__ std::uint32_t lds_32(std::uint32_t a) {
  std::uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// D += A B, m16n8k16, FP32 accumulators; A and B bf16 (F16 = false) or f16 pairs.
template <bool F16 = false>
__device__ __forceinline__ void mma_16816(float (&d)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                          std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  if constexpr (F16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t f16x2_mul(std::uint32_t a, std::uint32_t b) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const std::uint32_t*>(&r);
}

// NVFP4 (W4A4: the activations are e2m1 x E4M3 values, exact in f16): the weights in f16 as the
// general path builds them -- raw e2m1 * 2^-14 (e2m1_quad_f16_raw) times scale * 2^7 as f16 (<= 57344;
// every product a multiple of 2^-24), one multiply per pair; the FP32 sums come out 2^-7 times the
// true ones (kNvfp4AccScale, applied where a piece ends).
__device__ __forceinline__ std::uint32_t nv_scale_f16x2_times_128(unsigned code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  const __half v = __hmul(__half(h), __float2half(kNvfp4AccScale));  // exact (NaN stays NaN)
  const std::uint16_t bits = *reinterpret_cast<const std::uint16_t*>(&v);
  return static_cast<std::uint32_t>(bits) | static_cast<std::uint32_t>(bits) << 16;
}

__device__ __forceinline__ std::uint32_t bf16x2_mul(std::uint32_t a, std::uint32_t b) {
  const __nv_bfloat162 r = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const std::uint32_t*>(&r);
}
// Bytes of x (0-3) or zeros (4-7) picked by the selector's nibbles, which must not set bit 3 (the sign-replication
// mode): prmt.b32 directly, since __byte_perm masks the selector with an instruction of its own.
__device__ __forceinline__ std::uint32_t pick_bytes(std::uint32_t x, std::uint32_t sel) {
  std::uint32_t r;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(x), "r"(sel));
  return r;
}
// The bf16 pair `m` with half `H` (0: bits 0-15) in both halves: a broadcast that HMUL2 takes as an operand selector
// (.H0_H0 / .H1_H1), no instruction of its own.
template <int H>
__device__ __forceinline__ std::uint32_t bf16_half_both(std::uint32_t m) {
  const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&m);
  const __nv_bfloat162 r = H == 0 ? __low2bfloat162(v) : __high2bfloat162(v);
  return *reinterpret_cast<const std::uint32_t*>(&r);
}

// The multipliers of one word (8 elements) of rows g and g + 8: pairs, both halves equal.
// kOne: MXFP4 codes <= 128 -- bf16 2^(code-1) (at most 2^127, still finite), the raw pattern's 2^-126
// folded in (one multiply per pair). kTwo: any MXFP4 code (2^126, then 2^(code-127); 0 -> 2^-127, 0xFF -> NaN). kNvF16: NVFP4 in
// f16 -- e2m1_quad_f16_raw's pairs times f16 scale * 2^7 (nv_scale_f16x2_times_128), one multiply
// per pair, an f16 mma.
enum class Scaling { kOne, kTwo, kNvF16 };

// acc[h] (rows g, g + 8 x token columns 2c, 2c + 1) += this chunk's 16 x 128 weights times token
// g's activations, word by word. sg[q], sh[q]: the multipliers of word q of each row.
template <Scaling S, class XS, bool P = false>
__device__ __forceinline__ void multiply(const Stage<XS>& st, const std::uint32_t (&sg)[4], const std::uint32_t (&sh)[4],
                                         float (&acc)[2][4]) {
  const std::uint32_t wg[4] = {st.wg.x, st.wg.y, st.wg.z, st.wg.w};
  const std::uint32_t wh[4] = {st.wh.x, st.wh.y, st.wh.z, st.wh.w};
  constexpr bool kF16 = S == Scaling::kNvF16;
  constexpr std::uint32_t kTwo126 = 0x7E807E80u;  // bf16x2 (2^126, 2^126)
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    // elements 8q..8q+7, stored as (0,4) (1,5) (2,6) (3,7); f16: (0,2) (1,3) (4,6) (5,7)
    uint4 xv;
    if constexpr (XS::kAhead) xv = st.xv[q];
    else xv = XS::load(st.x, q);
    std::uint32_t ag[4], ah[4];  // (P: weights in pieces, bits permuted at pack time; dequant.cuh)
    e2m1_quad<kF16, P>(wg[q], ag);
    e2m1_quad<kF16, P>(wh[q], ah);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      if constexpr (kF16) {
        ag[p] = f16x2_mul(ag[p], sg[q]), ah[p] = f16x2_mul(ah[p], sh[q]);
      } else {
        if constexpr (S == Scaling::kTwo) ag[p] = bf16x2_mul(ag[p], kTwo126), ah[p] = bf16x2_mul(ah[p], kTwo126);
        ag[p] = bf16x2_mul(ag[p], sg[q]);
        ah[p] = bf16x2_mul(ah[p], sh[q]);
      }
    }
    // k-step h: pairs 2h and 2h + 1 (bf16: (e_2h, e_2h+4), (e_2h+1, e_2h+5)), stored words 2h and 2h + 1
    mma_16816<kF16>(acc[0], ag[0], ah[0], ag[1], ah[1], xv.x, xv.y);
    mma_16816<kF16>(acc[1], ag[2], ah[2], ag[3], ah[3], xv.z, xv.w);
  }
}

// A chunk with an MXFP4 scale code >= 129 (a scale of 4 or more: rare in trained weights). P (pieces): each row's
// codes of k-blocks 2 ch and 2 ch + 1 in bits 0-7 and 16-23, for words 0-1 and 2-3.
template <class XS, bool P>
__device__ __forceinline__ void consume_full_range(const Stage<XS>& st, float (&acc)[2][4]) {
  if constexpr (P) {
    std::uint32_t a0, a1, b0, b1;
    sm90::weight_scale_pairs<Format::mxfp4>((st.cg & 0xFFu) | (st.ch & 0xFFu) << 8, a0, a1);
    sm90::weight_scale_pairs<Format::mxfp4>((st.cg >> 16 & 0xFFu) | (st.ch >> 16 & 0xFFu) << 8, b0, b1);
    const std::uint32_t sg[4] = {a0, a0, b0, b0}, sh[4] = {a1, a1, b1, b1};
    multiply<Scaling::kTwo, XS, P>(st, sg, sh, acc);
  } else {
    std::uint32_t s0, s1;
    sm90::weight_scale_pairs<Format::mxfp4>(st.cg | st.ch << 8, s0, s1);
    const std::uint32_t sg[4] = {s0, s0, s0, s0}, sh[4] = {s1, s1, s1, s1};
    multiply<Scaling::kTwo, XS, P>(st, sg, sh, acc);
  }
}

// MXFP4: scale codes <= 128 (real checkpoints, and GPU MODE's scales 1 and 2) take one multiply per
// weight pair, the multiplier 2^(code-1) built with one IMAD (the raw e2m1 pattern carries 2^-126);
// a code >= 129 anywhere in the warp sends the chunk to the full-range decode (warp-uniform:
// mma.sync needs every lane).
// NVFP4: one f16 multiply per pair (Scaling::kNvF16), words 0-1 under the lane's first block's
// scale, 2-3 its second.
template <Format F, class XS, bool P>
__device__ __forceinline__ void consume(const Stage<XS>& st, float (&acc)[2][4]) {
  if constexpr (F == Format::nvfp4) {
    const std::uint32_t g0 = nv_scale_f16x2_times_128(st.cg & 0xFFu), g1 = nv_scale_f16x2_times_128(st.cg >> 8);
    const std::uint32_t h0 = nv_scale_f16x2_times_128(st.ch & 0xFFu), h1 = nv_scale_f16x2_times_128(st.ch >> 8);
    const std::uint32_t sg[4] = {g0, g0, g1, g1}, sh[4] = {h0, h0, h1, h1};
    multiply<Scaling::kNvF16, XS, P>(st, sg, sh, acc);
  } else if constexpr (P) {  // (two codes per register, bits 0-7 and 16-23)
    if (__builtin_expect(!__any_sync(0xFFFFFFFFu, mx_packed_codes_above_128(st.cg, st.ch)), 1)) {
      // one IMAD per row makes both codes' multipliers, one per half (codes <= 128: no carry between the halves);
      // HMUL2 reads the half it needs
      const std::uint32_t mg = st.cg * 0x80u + 0x3F003F00u, mh = st.ch * 0x80u + 0x3F003F00u;
      const std::uint32_t ga = bf16_half_both<0>(mg), gb = bf16_half_both<1>(mg);
      const std::uint32_t ha = bf16_half_both<0>(mh), hb = bf16_half_both<1>(mh);
      const std::uint32_t sg[4] = {ga, ga, gb, gb}, sh[4] = {ha, ha, hb, hb};
      multiply<Scaling::kOne, XS, true>(st, sg, sh, acc);
    } else {
      consume_full_range<XS, true>(st, acc);
    }
  } else {
    if (__builtin_expect(!__any_sync(0xFFFFFFFFu, max(st.cg, st.ch) > 128u), 1)) {
      const std::uint32_t s0 = st.cg * 0x00800080u + 0x3F003F00u;
      const std::uint32_t s1 = st.ch * 0x00800080u + 0x3F003F00u;
      const std::uint32_t sg[4] = {s0, s0, s0, s0}, sh[4] = {s1, s1, s1, s1};
      multiply<Scaling::kOne>(st, sg, sh, acc);
    } else {
      consume_full_range<XS, false>(st, acc);
    }
  }
}

// One unit's operands for this lane: rows g and g + 8 of one expert's [N, K] packed weights and
// scales, and token g's activation row (the zero row where token g is not in the unit).
struct Unit {
  const std::uint8_t* wg;  // rows: row g at k = 0; pieces: this lane's slot of the unit's first chunk
  const std::uint8_t* wh;
  const std::uint8_t* scales;  // the expert's scale matrix [N, K / vec]
  const void* x;  // token g's stored activations (XGlobal / XShared)
  int row_g, row_h;
};

struct Operand {
  int k;           // K (a multiple of 32)
  int scale_cols;  // K / vec
  const __nv_bfloat16* zero;  // a zero row of >= 32 elements
};

// The load side's position: this lane's bytes of the next chunk to load, advanced by constant
// steps (the scale column moves 128 / vec columns per chunk: linear that many bytes, blocked one
// or two whole 4-column atoms).
template <class XS>
struct Cursor {
  const std::uint8_t *wg, *wh, *sg, *sh;
  typename XS::Addr x;
};

// Bytes from one chunk's weights to the next: rows kChunk / 2; pieces (P) two 512-byte pieces.
template <bool P>
inline constexpr int kWeightStep = P ? 1024 : kChunk / 2;

// (P, pieces: the lane's first scale code is k-block 2 ch's, column 4 ch + c / 2 of MXFP4's; the second is two
// columns on, copied in the same blocked word or loaded beside it)
template <Format F, ScaleLayout L, class XS, bool P>
__device__ __forceinline__ Cursor<XS> cursor(const Unit& u, const Operand& op, int ch, int c) {
  constexpr int vec = F == Format::nvfp4 ? 16 : 32;
  const int kk = kChunk * ch + 32 * c, col = (P ? kChunk * ch + 16 * c : kk) / vec;
  const int w = P ? kWeightStep<P> * ch : kk / 2;
  // (unsigned: the rows, columns and widths are never negative, and the offset's divisions by 32 and 128 then need no
  // sign fix-ups on each unit change)
  const unsigned ucol = static_cast<unsigned>(col), ucols = static_cast<unsigned>(op.scale_cols);
  return Cursor<XS>{u.wg + w, u.wh + w,
                    u.scales + formats::detail::scale_offset(L, static_cast<unsigned>(u.row_g), ucol, ucols),
                    u.scales + formats::detail::scale_offset(L, static_cast<unsigned>(u.row_h), ucol, ucols),
                    XS::at(XS::from(u.x), ch, c)};
}

// The ring: per warp kStages stages of [32 lanes][16 B] row g, [32][16 B] row g + 8, and [32][4 B]
// the words holding each row's scale codes. 3 deep (60 KB per CTA): 4 and 5 deep measured 1-3 %
// slower on the H200, 6 does not fit beside kernel 1's largest token staging. More bytes in flight have not helped
// anywhere: a 5-10 deep ring for the fused kernel's down part alone (primed while its CTA waits at the grid barrier)
// was 1-5 % slower, and each unit requested into L2 ahead of the ring (cp.async.bulk.prefetch) 5-17 % slower. The loop
// is bound by this stream more than by its math: without the dequantisation and mma it ran only 9-12 % faster
// (docs/PERF.md).
constexpr int kStages = 3;
constexpr int kStageBytes = 32 * (16 + 16 + 4 + 4);
constexpr int kRingBytes = kStages * kStageBytes;  // per warp

// Copies the cursor's chunk into this lane's slots of a stage and advances the cursor. A lane past
// K (not `live`) gets zeros, nothing read (K is a multiple of 32, so a lane's 32 elements are live
// or not, whole): zero weights under codes 0 (finite scales). Blocked scales: the codes are copied
// as the aligned 4-byte words that hold them (cp.async copies 4, 8 or 16 bytes; `code_shift` finds
// them there). The words stay inside the scale tensors: the decode path requires H, I % 32 == 0, so
// every scale matrix has whole 512-byte atoms. Linear scales: the caller loads the codes (see
// walk_share).
// NVFP4 weights in pieces: a row's two scale codes of a chunk are 4 columns apart (k-blocks 2 ch and 2 ch + 1).
template <Format F, bool P>
inline constexpr bool kNvPieces = P && F == Format::nvfp4;

// NVFP4 in pieces (blocked): a row's two codes of a chunk sit in the chunk's two atoms (512 bytes apart), in the same
// byte of each word, and the row's 4 lanes need the same two words: lane c even copies the first atom's word, c odd
// the second's (live1: the second k-block is live in lane 1), so lanes (g, 0) and (g, 1) hold them side by side.
// `w16`, `w4`: this lane's slots of the stage. Blocked scales: the cursor's code pointers are already the aligned
// words' (align_codes). Pieces: the second row's bytes are the first's + 512 (one cursor). R8 (rows g and g + 8 of one
// 16-row block, kernel 2): blocked, the second row's codes are the first's + 128 bytes (one cursor).
template <Format F, ScaleLayout L, bool P, class XS, bool R8 = false>
__device__ __forceinline__ void copy_chunk(std::uint32_t w16, std::uint32_t w4, Cursor<XS>& cur, bool live, bool live1,
                                           int lane, std::uint64_t codes_policy) {
  constexpr int step_linear = F == Format::nvfp4 ? 8 : 4, step_blocked = F == Format::nvfp4 ? 1024 : 512;
  constexpr int step = L == ScaleLayout::blocked ? step_blocked : step_linear;
  constexpr int ws = kWeightStep<P>;
  if constexpr (P) {
    cp_async_16_at(w16, cur.wg, live, codes_policy);
    cp_async_16_at(w16 + 512, cur.wg + 512, live, codes_policy);
  } else {
    cp_async_16_at(w16, cur.wg, live);
    cp_async_16_at(w16 + 512, cur.wh, live);
  }
  if constexpr (L == ScaleLayout::blocked) {
    const int second = kNvPieces<F, P> && (lane & 1) ? 512 : 0;
    const bool live_word = kNvPieces<F, P> && (lane & 1) ? live1 : live;
    cp_async_4_at(w4, cur.sg + second, live_word);
    cp_async_4_at(w4 + 128, (R8 ? cur.sg + 128 : cur.sh) + second, live_word);
  }
  cur.wg += ws, cur.sg += step, cur.x = XS::advance(cur.x, kChunk);
  if constexpr (!P) cur.wh += ws;
  if constexpr (!R8 || L != ScaleLayout::blocked) cur.sh += step;
}

// Blocked scales: the copy side's code pointers as the aligned 4-byte words that hold the codes, once per unit (the
// steps along a unit are whole words; `code_shift` of the unaligned pointer finds a code in its word).
template <ScaleLayout L, class XS>
__device__ __forceinline__ Cursor<XS> align_codes(Cursor<XS> k) {
  if constexpr (L == ScaleLayout::blocked) {
    constexpr std::uintptr_t kWord = ~std::uintptr_t{3};
    k.sg = reinterpret_cast<const std::uint8_t*>(reinterpret_cast<std::uintptr_t>(k.sg) & kWord);
    k.sh = reinterpret_cast<const std::uint8_t*>(reinterpret_cast<std::uintptr_t>(k.sh) & kWord);
  }
  return k;
}

// The bit offset of a scale code in the 4-byte word copy_chunk copied: constant along a unit (the
// code steps are multiples of 4 bytes).
__device__ __forceinline__ unsigned code_shift(const std::uint8_t* code) {
  return static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(code) & 3u) * 8u;
}

// Balanced shares of C items over W takers: taker v starts at v * base + min(v, extra) (no 64-bit
// division).
struct Shares {
  int base, extra;
  __device__ __forceinline__ Shares(int C, int W)  // (C >= 0, W >= 1: unsigned division, no sign fix-ups)
      : base(static_cast<int>(static_cast<unsigned>(C) / static_cast<unsigned>(W))), extra(C - base * W) {}
  __device__ __forceinline__ int start(int v) const { return v * base + min(v, extra); }
  __device__ __forceinline__ int owner(int x) const {  // the taker whose share holds item x
    const int big = extra * (base + 1);
    return x < big ? x / (base + 1) : extra + (x - big) / base;
  }
};

// One warp's share: chunks [c0, c1) of the flattened (unit, chunk) list (unit u = chunk / n),
// walked without draining its copies across unit boundaries, through the warp's ring (kRingBytes
// of shared memory). A unit the share covers whole goes to store(u, acc) at once; a piece of a
// split unit (the share's first or last unit) is written to rec_first / rec_last (128 floats:
// lane-major float4) and flagged in split_first / split_last.
template <Format F, ScaleLayout L, bool P, class XS, bool R8, class UnitOf, class Ready, class Store>
__device__ __forceinline__ void walk_share(int n, const Operand& op, UnitOf unit_of, Ready ready, Store store,
                                           float* rec_first, float* rec_last, int c0, int c1, bool& split_first,
                                           bool& split_last, std::uint8_t* ring) {
  const int lane = threadIdx.x % 32, c = lane % 4;
  const int total = c1 - c0;
  const int first = static_cast<int>(static_cast<unsigned>(c0) / static_cast<unsigned>(n));
  int lu = first, lleft = n - (c0 - first * n);  // copy side: unit, chunks left in it
  int cu = first, cleft = lleft;       // multiply side
  bool whole = lleft == n;  // the unit being multiplied started at its chunk 0
  Cursor<XS> cur = align_codes<L>(cursor<F, L, XS, P>(unit_of(lu), op, n - lleft, c));
  DECODE_STAMP(7);
  float acc[2][4] = {};
  // chunk n - left of a unit is live in this lane iff left > live_above (32c + 128 ch < K)
  const int live_above = n - (op.k - (P ? 16 : 32) * c + kChunk - 1) / kChunk;
  const int live_above1 = n - (op.k - 64 - 16 * c + kChunk - 1) / kChunk;  // (pieces: the second k-block's code)
  // One stage index for both sides: after the first kStages copies, a copy refills the stage just multiplied. `so`:
  // its byte offset; `w16`, `w4`: this lane's slots of stage 0 (weights, the codes' words), hoisted.
  int so = 0;
  // (through a shuffle: ptxas re-derived the address from the CTA's shared window in every chunk otherwise, 5
  // instructions, where the ring is dynamic shared memory after static)
  const std::uint32_t ring_s = __shfl_sync(0xFFFFFFFFu, ptx::smem_addr(ring), 0);
  const std::uint32_t w16 = ring_s + 16 * lane, w4 = ring_s + 1024 + 4 * lane;
  const std::uint64_t codes_policy = P ? l2_policy_evict_first() : 0;  // (rows: none, see cp_async_16_at)
  // Linear scales: the codes travel in registers, loaded (ld.global.nc) with their chunk's copy and
  // moved one stage on per chunk -- a row's codes for 8 chunks share a 32-byte sector, so most hit
  // L1; copied by cp.async, the 8 rows' codes (in up to 8 lines per instruction) cost as many
  // shared-memory write wavefronts, which measured up to 20 % slower. Blocked scales: one atom per
  // chunk (an L2 access each), copied into the ring with the weights, a whole ring ahead.
  unsigned k0g = 0, k0h = 0, k1g = 0, k1h = 0, k2g = 0, k2h = 0;  // the codes of the next three stages multiplied
  // NVFP4 in pieces: a row's two codes of a chunk are 4 columns apart (k-blocks 2 ch and 2 ch + 1): linear, two byte
  // loads (as close as rows' codes: 8 chunks share a sector); blocked, both words through the ring (copy_chunk). The
  // second code was first loaded with a byte load per chunk -- a new sector every chunk, never an L1 hit -- and measured
  // 8-25 % slower than rows at T 1. Packed as NVFP4 rows' codes are: the first in bits 0-7.
  auto shift_codes = [&] {
    if constexpr (L == ScaleLayout::linear) k0g = k1g, k0h = k1h, k1g = k2g, k1h = k2h;
  };
  using CodeT = std::conditional_t<F == Format::nvfp4, std::uint16_t, std::uint8_t>;
  auto copy_next = [&](int at, bool more) {  // (at: the stage's byte offset; !more: past the share, nothing read)
    if constexpr (kNvPieces<F, P> && L == ScaleLayout::linear) {
      const bool live = more && lleft > live_above, live1 = more && lleft > live_above1;
      k2g = (live1 ? load_code<std::uint8_t>(cur.sg + 4) : 0u) << 8 | (live ? load_code<std::uint8_t>(cur.sg) : 0u);
      k2h = (live1 ? load_code<std::uint8_t>(cur.sh + 4) : 0u) << 8 | (live ? load_code<std::uint8_t>(cur.sh) : 0u);
    } else if constexpr (L == ScaleLayout::linear) {
      const bool live = more && lleft > live_above;
      k2g = live ? load_code<CodeT>(cur.sg) : 0u;
      k2h = live ? load_code<CodeT>(cur.sh) : 0u;
      if constexpr (P) {
        const bool live1 = more && lleft > live_above1;
        k2g |= (live1 ? load_code<CodeT>(cur.sg + 2) : 0u) << 16;
        k2h |= (live1 ? load_code<CodeT>(cur.sh + 2) : 0u) << 16;
      }
    }
    copy_chunk<F, L, P, XS, R8>(w16 + at, w4 + at, cur, more && lleft > live_above,
                            more && lleft > (kNvPieces<F, P> ? live_above1 : live_above), lane, codes_policy);
    if (__builtin_expect(--lleft == 0, 0)) {
      lleft = n;
      if (++lu * n < c1) cur = align_codes<L>(cursor<F, L, XS, P>(unit_of(lu), op, 0, c));
    }
  };
  // The multiply side's position: token g's activations at this lane's k of the chunk, and the
  // codes' bit offsets in their words (per unit).
  typename XS::Addr x;
  // shift: the codes' bit offset in their words, the same for both rows (blocked: it is the column's, col % 4).
  // Blocked MXFP4 pieces: the byte_perm selectors that move the lane's two codes (bytes b and b + 2 of the word) to
  // bytes 0 and 2 and zero the rest; sel_last zeroes the second where its k-block is past K.
  unsigned shift, sel_full = 0, sel_last = 0;
  auto multiply_from = [&](const Cursor<XS>& m) {
    x = m.x, shift = code_shift(m.sg);
    if constexpr (L == ScaleLayout::blocked && P && F == Format::mxfp4) {
      const unsigned b = shift / 8;
      sel_full = b | 0x40u | (b + 2) << 8 | 0x4000u, sel_last = b | 0x4440u;
    }
  };
  auto multiply_at = [&](int ch) { multiply_from(cursor<F, L, XS, P>(unit_of(cu), op, ch, c)); };
  multiply_at(n - cleft);
  auto piece_end = [&](bool at_unit_end) {
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = acc[0][i] + acc[1][i], acc[0][i] = acc[1][i] = 0.0f;
    if constexpr (F == Format::nvfp4) {  // (the f16 weights carry 2^-7: exact)
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] *= kNvfp4AccScale;
    }
    if (whole && at_unit_end) {
      store(cu, v);
    } else {  // a piece: recorded now, handed over after the last chunk
      const bool is_first = cu == first;
      (is_first ? split_first : split_last) = true;
      *reinterpret_cast<float4*>((is_first ? rec_first : rec_last) + lane * 4) = make_float4(v[0], v[1], v[2], v[3]);
    }
    ++cu, cleft = n, whole = true;
  };
  // One cp.async group per stage, empty past the share's last chunk, so that waiting for all but
  // the newest kStages - 1 groups always means the stage about to be multiplied has landed.
#pragma unroll 1
  for (int d = 0; d < kStages; ++d) {
    shift_codes();
    copy_next(d * kStageBytes, d < total);
    cp_async_commit();
  }
  DECODE_STAMP(8);
  ready();  // (the activations are read from here on: a kernel may wait for their producer here)
  constexpr unsigned kCodeMask = F == Format::nvfp4 ? 0xFFFFu : 0xFFu;
  int left = total;  // chunks not yet multiplied
  // XS::kAhead: the activations of the chunk about to be multiplied (xa), loaded one chunk ahead; `at_x`: where a
  // chunk's are, given its position (zeros past K: the zero row where the rows are not padded).
  uint4 xa[4];
  Cursor<XS> next{};  // (kAhead: the next unit's multiply-side position, found when its activations are loaded)
  auto at_x = [&](typename XS::Addr p, int chunks_left) {
    if constexpr (XS::kPadded) return p;
    else return chunks_left > live_above ? p : XS::from(op.zero);
  };
  auto load_x = [&](typename XS::Addr p) {
#pragma unroll
    for (int q = 0; q < 4; ++q) xa[q] = XS::load(p, q);
  };
  if constexpr (XS::kAhead) load_x(at_x(x, cleft));
#pragma unroll 1
  while (left > 0) {
    cp_async_wait<kStages - 1>();
    // NVFP4 pieces, blocked: a lane reads the code words lanes (g, 0) and (g, 1) copied, so the warp meets after its
    // waits (their copies visible) and again before the stage is refilled (every lane's reads done first).
    constexpr bool kSharedSlots = L == ScaleLayout::blocked && kNvPieces<F, P>;
    if constexpr (kSharedSlots) __syncwarp();
    Stage<XS> st;
    {
      const uint4 p0 = lds_128(w16 + so);
      const uint4 p1 = lds_128(w16 + so + 512);
      if constexpr (P) {  // (rows g | g + 8 of k-block 2 ch, then of 2 ch + 1)
        st.wg = make_uint4(p0.x, p0.y, p1.x, p1.y), st.wh = make_uint4(p0.z, p0.w, p1.z, p1.w);
      } else {
        st.wg = p0, st.wh = p1;
      }
    }
    if constexpr (L == ScaleLayout::blocked && kNvPieces<F, P>) {  // (the row's two words, copied by lanes (g, 0) and (g, 1))
      const uint2 wg = lds_64(ring_s + so + 1024 + 16 * (lane / 4));
      const uint2 wh = lds_64(ring_s + so + 1152 + 16 * (lane / 4));
      // (a lane's k-block past K: the word holds padding columns' codes, or was not copied)
      const unsigned m0 = cleft > live_above ? 0xFFu : 0u, m1 = cleft > live_above1 ? 0xFFu : 0u;
      st.cg = (wg.x >> shift & m0) | (wg.y >> shift & m1) << 8;
      st.ch = (wh.x >> shift & m0) | (wh.y >> shift & m1) << 8;
    } else if constexpr (L == ScaleLayout::blocked && P) {  // (MXFP4: the row's 4 codes of the chunk in one word)
      const unsigned sel = cleft > live_above1 ? sel_full : sel_last;  // (a k-block past K: its padding columns' codes)
      st.cg = pick_bytes(lds_32(w4 + so), sel);
      st.ch = pick_bytes(lds_32(w4 + so + 128), sel);
    } else if constexpr (L == ScaleLayout::blocked) {
      st.cg = lds_32(w4 + so) >> shift & kCodeMask;
      st.ch = lds_32(w4 + so + 128) >> shift & kCodeMask;
    } else {
      st.cg = k0g, st.ch = k0h;
    }
    if constexpr (XS::kAhead) {
      // this chunk's activations from registers, the next chunk's loads issued before its math: the next chunk of
      // this unit, or the first of the next unit (its activation row; the unit's other positions are taken where it
      // starts: multiply_from); none after the share's last chunk, except where the share ends inside a unit (then
      // the unit's next chunk, in bounds and unused)
#pragma unroll
      for (int q = 0; q < 4; ++q) st.xv[q] = xa[q];
      if (cleft > 1) load_x(at_x(XS::advance(x, kChunk), cleft - 1));
      else if (left > 1) next = cursor<F, L, XS, P>(unit_of(cu + 1), op, 0, c), load_x(at_x(next.x, n));
    } else {
      st.x = at_x(x, cleft);
    }
    consume<F, XS, P>(st, acc);
    if (left == total) DECODE_STAMP(9);
    // the stage just read is refilled (its values are in registers; the lane's own slots, but for kSharedSlots)
    if constexpr (kSharedSlots) __syncwarp();
    shift_codes();
    copy_next(so, left > kStages);  // (the chunks not yet copied: left - kStages; past them no bytes are read)
    cp_async_commit();
    so = so + kStageBytes == kRingBytes ? 0 : so + kStageBytes;
    x = XS::advance(x, kChunk);
    --left;
    if (--cleft == 0) {
      piece_end(true);
      if (left > 0) {
        if constexpr (XS::kAhead) multiply_from(next);
        else multiply_at(0);
      }
    }
  }
  if (cleft != n) piece_end(false);  // the share ends inside a unit
  DECODE_STAMP(10);
}

// The units [u0, u1) of this CTA: a balanced share (CTA-level stream-K); or, where every `group`
// consecutive units form a block that a later step needs whole (kernel 2's 16-row blocks: the
// combine) and there are no more blocks than CTAs, one whole block per CTA -- no block is then
// split between CTAs and none needs a hand-off through global memory (0: no groups).
struct CtaUnits {
  int u0, u1;
};
__device__ __forceinline__ CtaUnits cta_units(int units, int group) {
  if (group > 0 && units <= group * static_cast<int>(gridDim.x)) {  // (units: a multiple of group)
    const int u0 = min(units, static_cast<int>(blockIdx.x) * group);
    return {u0, min(units, u0 + group)};
  }
  const Shares su(units, gridDim.x);
  return {su.start(blockIdx.x), su.start(blockIdx.x + 1)};
}

// CTA-level stream-K: CTA b takes a balanced share of whole units (cta_units); its warps split the CTA's
// chunks evenly and hand split units over through shared memory (`records`: [warps][2][128]
// floats), one barrier, no global fences or atomics. The warp holding a split unit's last piece
// adds the pieces in warp order and calls store: deterministic for a given (units, grid). `ring`:
// the warps' rings, kRingBytes each (16-byte aligned shared memory). R8: every unit's rows are g and g + 8 of one
// 16-row block (copy_chunk). Every thread of the CTA must call it.
template <Format F, ScaleLayout L, bool P, class XS, bool R8, class UnitOf, class Ready, class Store>
__device__ __forceinline__ void stream_units_cta(int units, int group, int n, const Operand& op, UnitOf unit_of,
                                                 Ready ready, Store store, float* __restrict__ records,
                                                 std::uint8_t* ring) {
  const CtaUnits cu = cta_units(units, group);
  const int u0 = cu.u0, u1 = cu.u1;
  const int C = (u1 - u0) * n, w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int W = min(static_cast<int>(blockDim.x / 32), C);
  if (W <= 0) return;  // (the whole CTA: no units)
  const Shares sw(C, W);
  DECODE_STAMP(6);
  auto rec = [&](int q, int slot) { return records + (q * 2 + slot) * 128; };
  bool split_first = false, split_last = false;
  int first = 0, last = -1;
  if (w < W) {
    const int c0 = u0 * n + sw.start(w), c1 = u0 * n + sw.start(w + 1);
    first = c0 / n, last = (c1 - 1) / n;
    walk_share<F, L, P, XS, R8>(n, op, unit_of, [&] { ready(W); }, store, rec(w, 0), rec(w, 1), c0, c1, split_first, split_last,
                      ring + w * kRingBytes);
  }
  __syncthreads();
  // the split units whose last piece is this warp's: its first unit (if it is also another warp's)
  // and its last unit (if split)
#pragma unroll
  for (int which = 0; which < 2; ++which) {
    const bool split = which == 0 ? split_first : split_last && last != first;
    if (!split) continue;
    const int u = which == 0 ? first : last;
    const int wf = sw.owner(u * n - u0 * n), wl = sw.owner(u * n + n - 1 - u0 * n);
    if (wl != w) continue;
    float v[4];
    for (int q = wf; q <= wl; ++q) {
      const int qfirst = (u0 * n + sw.start(q)) / n;
      const float4 p = reinterpret_cast<const float4*>(rec(q, u == qfirst ? 0 : 1))[lane];
      if (q == wf) v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w;
      else v[0] += p.x, v[1] += p.y, v[2] += p.z, v[3] += p.w;
    }
    store(u, v);
  }
}

}  // namespace fp4gemm::detail::decode
