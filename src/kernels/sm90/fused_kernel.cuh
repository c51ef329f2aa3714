// The fused sm_90a grouped GEMM kernels: FP4 weights dequantised in registers feed wgmma (swap-AB).
//
// Two launches per run:
//  1. `dequant_activations`: every group's A (tokens) -> exact f16 (NVFP4) / bf16 (MXFP4) rows in a
//     stacked workspace, K permuted per 64-block (detail::wgmma_k_source_*). A is small (tokens x K);
//     writing it once beats re-dequantising it in each of the N/128 (or N/256) CTAs that read it.
//  2. `fused_grouped_gemm`: persistent, one CTA per SM; 2 consumer warpgroups + 1 producer warpgroup.
//     Per k-block, producer warp 0 loads the tile's 128 or 256 weight rows of packed FP4 and its
//     activation rows (up to 256 x 64, 128-byte swizzle) with TMA, producer warp 1 the weight
//     scales, into a ring of stages. Each consumer warpgroup owns 64 weight rows of each 128-row
//     half: it reads their FP4 bytes from shared memory, dequantises them straight into wgmma
//     A-operand registers and issues one m64nNk16 per half and k-step with the activations as B
//     (N = tile tokens rounded up to 16, so small groups are not padded to 128). Tiles of <= 128
//     tokens have two halves when the plan has enough of them (device/schedule.hpp: tile_rows).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cudaTypedefs.h>

#pragma once

#include <cstring>
#include <type_traits>

#include "device/dequant.cuh"
#include "device/ptx/ptx.cuh"
#include "device/ptx/wgmma_rs.cuh"
#include "device/schedule.hpp"
#include "formats/scale_layout.hpp"
#include "device/group_params.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail::sm90 {

// Everything that sizes registers or shared memory, in one place.
struct KernelConfig {
  static constexpr int kMaxTokens = SchedulePolicy::kMaxTokens;      // wgmma N side (tokens)
  static constexpr int kBlockK = SchedulePolicy::kBlockK;            // K elements per stage
  // Activations: one TMA box per stage of exactly the CTA class's width (16 * n16 rows of 128
  // bytes, one map per class), so the producer issues one load for them per k-block.
  static constexpr int kActClassRows = 16;                           // activation rows per width class step
  static constexpr int kActClassBytes = kActClassRows * kBlockK * 2;  // 2 KB
  static constexpr int kWeightBoxRows = 128;                         // weight TMA box rows (one half)
  static constexpr int kConsumerWarpgroups = 2;
  // A tile is 1 or 2 halves of 128 weight rows (tile_rows): each consumer warpgroup owns 64 rows
  // of each half (one blocked scale atom per half) and issues one m64 wgmma per half and k-step.
  static constexpr int kMaxHalves = 2;
  // Warpgroups 0-1: consumers; warpgroup 2: the producers (two warps issue the loads). The
  // register file is split per SM sub-partition, so 9 warps would cap every thread at 168; with
  // 3 warpgroups, setmaxnreg moves registers from the producers (40) to the consumers (232).
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kThreads = kConsumerThreads + 128;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  // setmaxnreg only moves registers within the CTA's launch allocation (168 per thread, the
  // __launch_bounds__ cap for 384 threads): asking for more makes setmaxnreg.inc wait forever
  // (48 + 232 hung, measured).
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumerThreads <= kLaunchRegs * kThreads,
                "setmaxnreg beyond the launch allocation deadlocks");
  static constexpr int kHalfWeightBytes = kWeightBoxRows * kBlockK / 2;  // 4 KB of FP4 per half
  // Weight scales of a stage: one 512-byte blocked atom (128 rows x 4 scale columns) per half.
  static constexpr int kScaleAtomBytes = 512;
  // Largest stage: 256 tokens x 64 k of 16-bit activations + one half (the 2-half stages have
  // <= 128 tokens: 16 KB + 8 KB + 1 KB).
  static constexpr int kStageBytes = kMaxTokens * kBlockK * 2 + kHalfWeightBytes + kScaleAtomBytes;
  static constexpr int kMaxStages = 16;  // ring depth: as many stages of the CTA's width as fit
  static constexpr int kAccRegs = 128;   // FP32 accumulators per consumer thread: halves x N / 2
  static constexpr int kPartialFloats = kConsumerThreads * kAccRegs;  // one writer's FP32 tile
  // 16-bit epilogue: each consumer warpgroup transposes its 64 weight rows x 128 tokens at a time
  // through shared memory (stmatrix), then writes 16-byte chunks of C rows.
  static constexpr int kEpiTokens = 128;
  static constexpr int kEpiBytes = kConsumerWarpgroups * kEpiTokens * 64 * 2;
  static_assert(kActClassBytes % 1024 == 0, "128-byte swizzle atoms need 1024-byte aligned stages");
  static_assert(tile_rows(SchedulePolicy::kNarrowTokens, 256) == 128 * kMaxHalves &&
                    tile_rows(kMaxTokens, 256) == 128,
                "the mainloop is written for 1 or 2 halves");
  static_assert(kMaxHalves * SchedulePolicy::kNarrowTokens / 2 <= kAccRegs && kMaxTokens / 2 <= kAccRegs,
                "accumulators beyond the register budget");
  static_assert(SchedulePolicy::kWidthClasses == 16, "the class dispatch below has 16 cases");
};

// Halves of a tile of token-width class n16 (every tile of a class has the same row count).
__host__ __device__ constexpr int halves_of_class(int n16, int narrow_rows) {
  return tile_rows(16 * n16, narrow_rows) / 128;
}

enum NamedBarrier : int { kConsumersBarrier = 1, kEpilogueBarrier0 = 2 /* + consumer warpgroup */ };

// ---- diagnostic build only (cmake -DFP4GEMM_TRACE=ON; docs/PERF.md): cycle counters of the last
// launch per CTA and role (consumer warpgroup 0, 1, weight producer), read by `fp4gemm grouped`.
enum TraceCounter : int {
  kTraceTotal,      // kernel body, from barrier set-up to exit
  kTraceMainloop,   // consumers: the k-block loops (to the last wgmma retired); producer: its loop
  kTraceBarrier,    // consumers: waiting on `full`; producer: waiting on `empty`
  kTraceHandoff,    // split-K: writing partials, or waiting for and adding them
  kTraceEpilogue,   // scaling, transposing and storing C
  kTraceKblocks,    // k-blocks processed
  kTracePieces,     // work pieces processed
  kTraceTokenKblocks,  // sum over pieces of k-blocks x wgmma N x halves (weights the shape mix)
  kTraceIssue,      // producer: from its `empty` wait to the last load issued
  kTraceEntryNs,    // %globaltimer (ns) at kernel entry
  kTraceFirstNs,    // consumers: when the first `full` wait returned; producer: when the pre-pass wait returned
  kTraceExitNs,     // at exit
  kTraceCounters
};
inline constexpr int kTraceCtas = 256, kTraceRoles = 3;
// Dynamic shared memory the plan gives up in a trace build: the static counters plus their
// alignment (the 192 bytes alone were not enough for the launch).
inline constexpr int kTraceSmemBytes = 4096;
#ifdef FP4GEMM_TRACE
namespace {
__device__ unsigned long long g_trace[kTraceCtas][kTraceRoles][kTraceCounters];
__device__ unsigned long long g_prepass_ns[2];  // the pre-pass's first block start, last warp end (reset per run)
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
}
#define FP4GEMM_TRACE_DO(...) __VA_ARGS__
// The counters live in shared memory (registers would spill), one recording thread per role.
#define FP4GEMM_TRACE_ADD(row, c, v) \
  do {                               \
    if (row) (row)[c] += (v);        \
  } while (0)
#else
#define FP4GEMM_TRACE_DO(...)
#endif

// The producer warps' view of one work piece. The plan writes one for each CTA's first piece
// (v13): one 64-byte load instead of the chain piece -> tile -> group -> scale pointers / weight
// map, whose dependent misses set the time of the ring's first fill (docs/PERF.md v13). Later
// pieces are read through the chain (records for every piece cost dense1 2.6 %).
struct ProducerPiece {
  const CUtensorMap* wmap;   // the tile's weight map (box of its `loaded` halves)
  const std::uint8_t* sblk;  // the group's blocked weight scales, or null
  const std::uint8_t* slin;  // the group's linear weight scales when the producer gathers them, or null
  int row0, act_row0;        // the tile's first weight row and first activation-workspace row
  int kb_begin, kb_end;      // the piece's k-blocks
  int rows, cols;            // the group's N and weight-scale columns (K / 16 or K / 32)
  int loaded;                // halves loaded: the class's, or 1 where the second half lies past N
  int pad_[3];
};
static_assert(sizeof(ProducerPiece) == 64, "one 64-byte record per piece");

// One piece's record, built alike by the plan (each CTA's first piece) and by the producers (the
// later ones). `group_maps` are the group's two weight maps (box 128 / 256 rows); halves of a tile
// wholly past N are not loaded (their accumulators are never stored; a user's blocked scales have
// only ceil(N/128) atom rows), and the map's box is the `loaded` halves.
__host__ __device__ __forceinline__ ProducerPiece make_producer_piece(const WorkPiece& piece, const TileDesc& tile,
                                                                      int n, int cols, int halves,
                                                                      const CUtensorMap* group_maps,
                                                                      const std::uint8_t* sblk,
                                                                      const std::uint8_t* slin) {
  const int loaded = tile.row0 + 128 < n ? halves : 1;
  return ProducerPiece{group_maps + (loaded - 1), sblk, slin, tile.row0, tile.act_row0, piece.kb_begin, piece.kb_end,
                       n, cols, loaded, {0, 0, 0}};
}

struct FusedParams {
  const GroupParams* groups;
  const TileDesc* tiles;
  const WorkPiece* pieces;
  const ProducerPiece* first_pieces;  // per CTA: its first piece (CTAs without pieces: unused)
  const int* cta_begin;
  const int* cta_class;            // per CTA: its width class (Schedule::cta_class)
  const CUtensorMap* weight_maps;  // two per group (box 128 / 256 rows), 64-byte aligned, in global memory
  const CUtensorMap* act_maps;     // per width class n16: the activation workspace, box 16 * n16 rows x 64 k
  // Two per group over C (box 64 n x 64 tokens, 64 n x 8 tokens; 128-byte swizzle) for the
  // TMA-store epilogue of 16-bit outputs, or null (f32 output, or the plan keeps the warps'
  // stores); c_tma[group] = 1 where the group's maps are valid (N a multiple of 8).
  const CUtensorMap* c_maps;
  const std::uint8_t* c_tma;
  const std::uint8_t* const* scale_blocked;  // per group: the weight scales in blocked layout
  // Per group: the user's linear weight scales when the producer gathers them itself (rows of a
  // multiple of 4 bytes), else null (then scale_blocked holds a per-run blocked copy).
  const std::uint8_t* const* scale_linear;
  float* partials;
  int* flags;                      // one hand-off counter per tile, 0 between runs
  int ring_bytes;  // dynamic shared memory for the ring (the CTA sizes its stages to its width class)
  int narrow_rows;  // weight rows of the <= 128-token tiles (Schedule::narrow_rows: 256 or 128)
  int early_kblocks;  // k-blocks of weights (at most the ring) issued before waiting for the pre-pass
  ScaleLayout layout;
};

// ---------------------------------------------------------------------------------------------
// Scales
// ---------------------------------------------------------------------------------------------


// The scale multipliers of rows r and r + 8 as half2 pairs (both halves equal) of the weights'
// operand type, from their codes packed as code0 | code1 << 8. NVFP4: both E4M3 codes in one
// conversion, times 2^7 in f16 (exact: <= 57344). MXFP4: UE8M0 2^(code-127) as bf16, exponent
// field = code; 0 -> 2^-127 (subnormal); 0xFF -> NaN.
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

// ---------------------------------------------------------------------------------------------
// Kernel 1: activations -> exact 16-bit values in wgmma K order
// ---------------------------------------------------------------------------------------------

// The pre-pass's arguments, passed by value: the first kInline groups' fields live in the
// kernel's parameter space, so a block's first global load is its own FP4 data (after the L2
// flush a group-table load first cost a dependent DRAM round trip, ~0.7 us, on every run).
struct PrepassGroup {
  const std::uint8_t* a;
  const std::uint8_t* sfa;
  std::int64_t lda;  // bytes
  int m, k;
  int act_row0;  // first row of the group in the activation workspace
  int pad_;
};
// The pre-pass sees only the groups with work (M > 0): an empty group, whatever its other fields
// hold, gets no block. Blocks loop over groups in steps of gridDim.y (<= 65535), so any number of
// groups fits the grid.
struct PrepassArgs {
  static constexpr int kInline = 32;
  static constexpr int kMaxGridY = 65535;
  PrepassGroup inline_groups[kInline];
  int inline_count;             // groups [0, inline_count) are in inline_groups (<= kInline)
  int num_groups;               // groups with M > 0
  const PrepassGroup* groups;   // all of them (the pre-pass reads those past inline_count)
  void* out;
  int out_cols;
  ScaleLayout layout;
  // The plan's metadata (schedule, tensor maps, group table: one allocation), prefetched into
  // L2 by the pre-pass so that the GEMM producer's chain of dependent loads to its first TMA
  // (CTA range -> piece -> tile -> group -> tensor map) hits L2 instead of DRAM.
  const std::uint8_t* meta;
  int meta_lines;  // 128-byte lines
  // Routed (MoE) activations, device data read at run time (kRouted modes only): only rows
  // [*first_row, *end_row) are read (null: from 0 / to the group's rows; clamped to them); with
  // `gather`, row m reads source row gather[m], which must lie in [0, gather_rows) (else error bit
  // kMoeBadGather and the row is skipped).
  const int* first_row;
  const int* end_row;
  const int* slot_counts;  // masked layout: row m is used iff m % slot_rows < slot_counts[m / slot_rows]
  int slot_rows;
  const int* gather;
  int gather_rows;
  int* error;  // MoeErrorWord
};
static_assert(sizeof(PrepassArgs) <= 4096, "kernel parameters beyond 4 KB");

// What the pre-pass reads: the pointer-array plan's FP4 groups, or one routed (MoE) stack of FP4
// rows or of bf16 rows (W4A16: the pre-pass only reorders them into wgmma K order).
enum class PrepassSource { grouped_fp4, routed_fp4, routed_bf16 };

// The device error word of an MoE plan: the bits of everything that was wrong, and the place of
// the first report (its kind, the offset / count index or the row, the bad value).
struct MoeErrorWord {
  int bits;
  int kind;   // the bit of the first report, 0 while there is none
  int index;  // expert_offsets / expert_counts index, or gather_index row
  int value;  // the bad value (offset, count or gather index)
};
constexpr int kMoeBadOffsets = 1, kMoeOverCapacity = 2, kMoeBadCount = 4, kMoeBadGather = 8;

__device__ __forceinline__ void moe_report(int* error, int bit, int index, int value) {
  MoeErrorWord* e = reinterpret_cast<MoeErrorWord*>(error);
  atomicOr(&e->bits, bit);
  if (atomicCAS(&e->kind, 0, bit) == 0) {  // the first report names its place (read after the grid ends)
    e->index = index;
    e->value = value;
  }
}

template <Format F>
__device__ __forceinline__ float scale_value(unsigned code) {
  if constexpr (F == Format::nvfp4) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
    return __half2float(__half(h));
  } else {
    if (code == 0xFFu) return __int_as_float(0x7FC00000);
    return code == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(code) << 23);
  }
}

// One (token row, k-block) unit per thread of a warp-uniform call: rows m < row_limit of group g
// are dequantised (or, bf16, reordered) into workspace row g.act_row0 + m.
template <Format F, PrepassSource S>
__device__ __forceinline__ void prepass_unit(const PrepassArgs& args, const PrepassGroup& g, int u, int row_limit,
                                             uint4* buf, int lane) {
  constexpr int kVec = F == Format::nvfp4 ? 16 : 32;
  void* const out = args.out;
  const int out_cols = args.out_cols;
  const ScaleLayout layout = args.layout;
  const int kblocks = (g.k + 63) / 64;  // >= 1: the plan passes only groups with M, K > 0
  const int m = u / kblocks, kb = u - m * kblocks;
  bool valid = m < row_limit;
  int src_m = m;  // the row of g.a (and its scales) that becomes workspace row m
  if constexpr (S != PrepassSource::grouped_fp4) {
    if (valid && args.slot_counts != nullptr) valid = m % args.slot_rows < __ldg(args.slot_counts + m / args.slot_rows);
    if (valid && args.gather != nullptr) {
      src_m = __ldg(args.gather + m);
      if (src_m < 0 || src_m >= args.gather_rows) {
        if (kb == 0) moe_report(args.error, kMoeBadGather, m, src_m);
        valid = false;
      }
    }
  }
  const int cols = g.k / kVec;
  using Elem = std::conditional_t<F == Format::nvfp4, __half, __nv_bfloat16>;
  uint4* dst = valid ? reinterpret_cast<uint4*>(static_cast<Elem*>(out) +
                                                static_cast<std::int64_t>(g.act_row0 + m) * out_cols + kb * 64)
                     : nullptr;

  if constexpr (S == PrepassSource::routed_bf16) {
    if (valid) {
      // W4A16: 64 bf16 values (128 bytes; past K read as zero), element e of the block at
      // 16-bit slot e; chunk c, pair i takes elements 8 (2i + c % 2) + c / 2 and that + 4, as
      // the MXFP4 path below orders its nibbles.
      std::uint32_t v[32];
      const std::uint8_t* src = g.a + static_cast<std::int64_t>(src_m) * g.lda + kb * 128;
      const int valid_elems = min(64, g.k - kb * 64);
      if (valid_elems == 64) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint4 q = __ldg(reinterpret_cast<const uint4*>(src) + i);
          v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
        }
      } else {
        const auto* s16 = reinterpret_cast<const std::uint16_t*>(src);
#pragma unroll
        for (int i = 0; i < 32; ++i)
          v[i] = (2 * i < valid_elems ? s16[2 * i] : 0u) | ((2 * i + 1 < valid_elems ? s16[2 * i + 1] : 0u) << 16);
      }
      auto elem = [&](int e) { return (v[e / 2] >> (16 * (e % 2))) & 0xFFFFu; };  // e compile-time
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        std::uint32_t packed[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int e0 = 8 * (2 * i + (c & 1)) + (c >> 1);
          packed[i] = elem(e0) | (elem(e0 + 4) << 16);
        }
        buf[lane * 8 + (c ^ (lane & 7))] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
      }
    }
  } else if (valid) {
    // The block's 64 nibbles as 8 words (element e in word e / 8); bytes past K read as zero.
    std::uint32_t w[8];
    const std::uint8_t* src = g.a + static_cast<std::int64_t>(src_m) * g.lda + kb * 32;
    const int valid_bytes = min(32, g.k / 2 - kb * 32);
    if (valid_bytes == 32) {
      const uint4 lo = __ldg(reinterpret_cast<const uint4*>(src)), hi = __ldg(reinterpret_cast<const uint4*>(src + 16));
      w[0] = lo.x, w[1] = lo.y, w[2] = lo.z, w[3] = lo.w, w[4] = hi.x, w[5] = hi.y, w[6] = hi.z, w[7] = hi.w;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i] = 0;
#pragma unroll
      for (int i = 0; i < 32; ++i)
        if (i < valid_bytes) w[i / 4] |= static_cast<std::uint32_t>(src[i]) << (8 * (i % 4));
    }
    unsigned code[64 / kVec];
#pragma unroll
    for (int j = 0; j < 64 / kVec; ++j) {
      const int col = kb * (64 / kVec) + j;
      code[j] = col < cols ? __ldg(g.sfa + formats::detail::scale_offset(layout, src_m, col, cols)) : 0u;
    }
    auto put = [&](int c, std::uint32_t p0, std::uint32_t p1, std::uint32_t p2, std::uint32_t p3) {
      buf[lane * 8 + (c ^ (lane & 7))] = make_uint4(p0, p1, p2, p3);
    };
    if constexpr (F == Format::nvfp4) {
      // raw * 2^14 is the e2m1 value (exact); times the E4M3 scale it stays exact in f16
      // (|value| <= 6 * 448, every product a multiple of 2^-10 with <= 6 significant bits).
      // Columns past K have code 0 = scale 0 (their weights are zero too).
      const __half2 two14 = __half2half2(__ushort_as_half(0x7400));
      __half2 s[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        s[j] = __half2half2(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code[j]), __NV_E4M3)));
      auto cvt = [&](std::uint32_t raw, int i) {
        const __half2 r = __hmul2(__hmul2(*reinterpret_cast<const __half2*>(&raw), two14), s[i]);
        return *reinterpret_cast<const std::uint32_t*>(&r);
      };
      // Chunk c (k-step c / 2, upper slots iff c odd), pair i (thread i of the quad) = register
      // c / 2 of e2m1_quad_f16_raw(word 2i + c % 2) (wgmma_k_source_nvfp4).
      std::uint32_t quad[8][4];
#pragma unroll
      for (int i = 0; i < 8; ++i) e2m1_quad_f16_raw(w[i], quad[i]);
#pragma unroll
      for (int c = 0; c < 8; ++c)
        put(c, cvt(quad[0 + c % 2][c / 2], 0), cvt(quad[2 + c % 2][c / 2], 1), cvt(quad[4 + c % 2][c / 2], 2),
            cvt(quad[6 + c % 2][c / 2], 3));
    } else {
      // MXFP4 -> bf16 through FP32 (scales 2^-127..2^127 reach bf16's subnormals; FP32 -> bf16
      // rounding of an exactly representable product is exact).
      float scale[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) scale[j] = kb * 2 + j < cols ? scale_value<F>(code[j]) : 0.f;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int odd = c & 1, half_c = c >> 1;
        std::uint32_t packed[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const std::uint32_t word = w[2 * i + odd];
          float dq[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const unsigned nib = (word >> (4 * (half_c + 4 * h))) & 0xFu;
            const unsigned cm = nib & 7u;  // e2m1 magnitude without a table (no local memory)
            const float mag = cm >= 2 ? __int_as_float(static_cast<int>(((126u + (cm >> 1)) << 23) | ((cm & 1u) << 22)))
                                      : 0.5f * static_cast<float>(cm);
            dq[h] = ((nib & 8u) ? -mag : mag) * scale[i / 2];  // exact in FP32 and in bf16
          }
          const __nv_bfloat162 b2 = __floats2bfloat162_rn(dq[0], dq[1]);
          packed[i] = *reinterpret_cast<const std::uint32_t*>(&b2);
        }
        put(c, packed[0], packed[1], packed[2], packed[3]);
      }
    }
  }
  __syncwarp();
  // Store: round j, lanes 8q..8q+7 write the 8 chunks of unit 4j + q (one 128-byte row segment).
  const int cc = lane % 8;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int unit = 4 * j + lane / 8;
    uint4* d = reinterpret_cast<uint4*>(__shfl_sync(0xFFFFFFFFu, reinterpret_cast<std::uintptr_t>(dst), unit));
    if (d != nullptr) d[cc] = buf[unit * 8 + (cc ^ (unit & 7))];
  }
  __syncwarp();  // the next unit's puts reuse buf
}

// One thread per (token row, 64-wide k-block): it reads the block's 32 bytes of FP4 and its scales
// once, so every thread has a unique 32-byte load in flight. Output chunk c (wgmma k positions
// 8c..8c+7) holds pairs (8c + 2i, 8c + 2i + 1): thread i's registers for k-step c/2, lower
// (c even) or upper slots, i.e. two source elements of word 2i + c%2 chosen by
// detail::wgmma_k_source_<format> (MXFP4: nibbles c/2 and c/2 + 4). The 128-byte result goes through a per-warp shared-memory buffer so
// that the global stores are coalesced (8 lanes per 128-byte row segment): a thread storing its own
// eight 16-byte chunks touched 32 rows per instruction and the kernel ran at ~0.3 TB/s.
template <Format F, PrepassSource S = PrepassSource::grouped_fp4>
__global__ void __launch_bounds__(256) dequant_activations(const __grid_constant__ PrepassArgs args) {
  constexpr bool kRouted = S != PrepassSource::grouped_fp4;
  ptx::launch_dependents();  // the GEMM's CTAs may start their prologue as SMs free up
  FP4GEMM_TRACE_DO(if (threadIdx.x == 0) atomicMin(&g_prepass_ns[0], globaltimer());)
  __shared__ uint4 staging[8][32 * 8];  // per warp: [unit = lane][chunk, XOR-swizzled by lane % 8]
  const int lane = threadIdx.x % 32;
  if (threadIdx.x < 32) {  // the GEMM's metadata into L2, one line per lane of the first blocks
    const int line = (blockIdx.y * gridDim.x + blockIdx.x) * 32 + lane;
    if (line < args.meta_lines) ptx::prefetch_l2(args.meta + static_cast<std::int64_t>(line) * 128);
  }
  uint4* buf = staging[threadIdx.x / 32];
  if constexpr (!kRouted) {
    for (int gi = blockIdx.y; gi < args.num_groups; gi += gridDim.y) {  // block-uniform
      const PrepassGroup g = gi < args.inline_count ? args.inline_groups[gi] : args.groups[gi];
      prepass_unit<F, S>(args, g, blockIdx.x * blockDim.x + threadIdx.x, g.m, buf, lane);
    }
  } else {
    // One routed stack, rows [*first_row, *end_row) (device data) in a grid-stride loop: a plan
    // sized for a large capacity costs little on a decode step.
    const PrepassGroup& g = args.inline_groups[0];
    const int end = args.end_row != nullptr ? max(0, min(g.m, __ldg(args.end_row))) : g.m;
    const int first = args.first_row != nullptr ? max(0, min(end, __ldg(args.first_row))) : 0;
    const int kblocks = (g.k + 63) / 64;
    const int units = (end - first) * kblocks;  // < 2^31 (checked by the MoE plan)
    for (int base = blockIdx.x * blockDim.x; base < units; base += gridDim.x * blockDim.x)  // block-uniform
      prepass_unit<F, S>(args, g, first * kblocks + base + threadIdx.x, end, buf, lane);
  }
  FP4GEMM_TRACE_DO(__syncwarp(); if (lane == 0) atomicMax(&g_prepass_ns[1], globaltimer());)
}

// Linear weight scales whose rows are not 16-byte multiples (K not a multiple of 16 scale
// blocks) cannot be a TMA source; the plan then converts them to the blocked layout each run.
struct ScaleConversion {
  const std::uint8_t* src;  // linear [rows][cols]
  std::uint8_t* dst;        // blocked, rows padded to 128, cols to 4
  int rows, cols;
};

// One thread per (row, 8 column blocks): it reads 32 bytes of a row (a full sector) and writes one
// 4-byte word into each of 8 atoms; the 128 threads of a row block write consecutive words.
__device__ __forceinline__ void convert_scale_unit(const ScaleConversion& j, std::int64_t u) {
  const int col_blocks = (j.cols + 3) / 4;
  const int groups8 = (col_blocks + 7) / 8;
  if (u >= static_cast<std::int64_t>((j.rows + 127) / 128) * groups8 * 128) return;
  const int w = static_cast<int>(u % 128);                 // word within an atom
  const std::int64_t unit = u / 128;
  const int rb = static_cast<int>(unit / groups8), cb0 = static_cast<int>(unit % groups8) * 8;
  const int r = rb * 128 + (w % 4) * 32 + w / 4;
  std::uint32_t word[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (r < j.rows) {
    const std::uint8_t* src = j.src + static_cast<std::int64_t>(r) * j.cols + cb0 * 4;
    const int avail = j.cols - cb0 * 4;  // bytes of this row from column cb0 * 4 on
    if (avail >= 32 && (reinterpret_cast<std::uintptr_t>(src) & 15) == 0) {
      const uint4 lo = __ldg(reinterpret_cast<const uint4*>(src)), hi = __ldg(reinterpret_cast<const uint4*>(src + 16));
      word[0] = lo.x, word[1] = lo.y, word[2] = lo.z, word[3] = lo.w, word[4] = hi.x, word[5] = hi.y, word[6] = hi.z,
      word[7] = hi.w;
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i)
        if (i < avail) word[i / 4] |= static_cast<std::uint32_t>(__ldg(src + i)) << (8 * (i % 4));
    }
  }
  std::uint32_t* dst = reinterpret_cast<std::uint32_t*>(j.dst) + (static_cast<std::int64_t>(rb) * col_blocks + cb0) * 128 + w;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (cb0 + i < col_blocks) dst[i * 128] = word[i];
}

// Job i is converted by the blocks with blockIdx.y = i mod gridDim.y (<= 65535).
template <Format F>  // (per-format instantiation keeps the kernel in the format's translation unit)
__global__ void __launch_bounds__(256) scales_to_blocked(const ScaleConversion* jobs, int num_jobs) {
  const std::int64_t u = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int i = blockIdx.y; i < num_jobs; i += gridDim.y) convert_scale_unit(jobs[i], u);
}

// ---------------------------------------------------------------------------------------------
// Kernel 2: the persistent fused GEMM
// ---------------------------------------------------------------------------------------------

// Dequantises this thread's 16 weights of one row (8 bytes) into 8 A-operand registers:
// out[s] feeds k-step s slots {2t, 2t+1}, out[4 + s] slots {2t+8, 2t+9}.
template <Format F>
__device__ __forceinline__ void dequant_row(uint2 q, std::uint32_t scale2, std::uint32_t (&out)[8]) {
  if constexpr (F == Format::nvfp4) {
    const __half2 s = *reinterpret_cast<const __half2*>(&scale2);
    auto cvt = [&](std::uint32_t raw) {
      const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&raw), s);
      return *reinterpret_cast<const std::uint32_t*>(&r);
    };
    std::uint32_t lo[4], hi[4];  // wgmma_k_source_nvfp4: lower slots from q.x, upper from q.y
    e2m1_quad_f16_raw(q.x, lo);
    e2m1_quad_f16_raw(q.y, hi);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[i] = cvt(lo[i]);
      out[4 + i] = cvt(hi[i]);
    }
  } else {
    const __nv_bfloat162 s = *reinterpret_cast<const __nv_bfloat162*>(&scale2);
    const __nv_bfloat162 two126 = __floats2bfloat162_rn(0x1p126f, 0x1p126f);
    auto cvt = [&](std::uint32_t raw) {
      const __nv_bfloat162 r = __hmul2(__hmul2(*reinterpret_cast<const __nv_bfloat162*>(&raw), two126), s);
      return *reinterpret_cast<const std::uint32_t*>(&r);
    };
    out[0] = cvt(e2m1_pair_bf16_raw<0>(q.x));
    out[1] = cvt(e2m1_pair_bf16_raw<1>(q.x));
    out[2] = cvt(e2m1_pair_bf16_raw<2>(q.x));
    out[3] = cvt(e2m1_pair_bf16_raw<3>(q.x));
    out[4] = cvt(e2m1_pair_bf16_raw<0>(q.y));
    out[5] = cvt(e2m1_pair_bf16_raw<1>(q.y));
    out[6] = cvt(e2m1_pair_bf16_raw<2>(q.y));
    out[7] = cvt(e2m1_pair_bf16_raw<3>(q.y));
  }
}

template <Format F, int N8, int A>
__device__ __forceinline__ void wgmma_rs(float (&d)[A], const std::uint32_t (&a)[4],
                                         std::uint64_t desc, int scale_d) {
  if constexpr (F == Format::nvfp4) ptx::wgmma_rs_f16<N8, A>(d, a, desc, scale_d);
  else ptx::wgmma_rs_bf16<N8, A>(d, a, desc, scale_d);
}

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

// Per-thread state of a consumer that survives from piece to piece (the ring position).
struct ConsumerState {
  int cw, ctid, lane, t, row_in_tile;
  std::uint8_t* s_smem;  // the ring's weight-scale stages
  int stages, act_stage_bytes;  // the CTA's ring geometry
  int stage = 0;
  std::uint32_t phase = 0;
  FP4GEMM_TRACE_DO(unsigned long long* trace = nullptr;)  // shared-memory row of the recording thread, else null
};

// Keeps the compiler from moving accumulator reads/writes across wgmma fences, for every half.
template <int H, int A>
__device__ __forceinline__ void fence_acc(float (&acc)[H][A]) {
#pragma unroll
  for (int h = 0; h < H; ++h) ptx::fence_registers(acc[h]);
}

// One work piece (a k-block range of one tile) for a consumer warpgroup: mainloop, split-K
// hand-off and epilogue. N8 = tile tokens / 8, rounded up; the tile has H = 1 or 2 halves of 128
// weight rows, and the warpgroup owns rows h * 128 + cw * 64 + [0, 64) of half h (whose scales
// are the stage's atom h).
template <Format F, int N8, int H>
__device__ __forceinline__ void consume_piece(const FusedParams& p, ConsumerState& st, const WorkPiece& piece,
                                              const TileDesc& tile, std::uint8_t* act_smem,
                                              std::uint8_t* w_smem, std::uint64_t* full,
                                              std::uint64_t* empty, std::uint8_t* epi_smem, OutType out_type) {
  using C = KernelConfig;
  constexpr int kVec = F == Format::nvfp4 ? 16 : 32;
  constexpr int kAcc = 4 * N8;
  static_assert(H * kAcc <= C::kAccRegs, "accumulators beyond the register budget");
  const int stages = st.stages;
  const GroupParams g = p.groups[tile.group];
  const int t = st.t;
  const int cols = g.k / kVec;
  constexpr int kColsPerKb = 64 / kVec;

  float acc[H][kAcc];
  // Per k-block one commit group of every half (kKblockGroups): two sets of A-operand registers
  // [k-block parity][half][register: 4 k-steps x {lo, hi} slots][row r / r+8]; k-block kb is
  // dequantised into set kb % 2 while the group of k-block kb - 1 still runs, and a set is
  // rewritten only after wgmma_wait<1> has retired the group that read it. Two halves of 112 or
  // 128 tokens have no registers for two sets of both halves: there each half is its own group
  // and has its own set (v6 order: retire, dequantise, issue, half by half).
  constexpr bool kKblockGroups = H == 1 || H * kAcc <= 96;
  constexpr int kSets = kKblockGroups ? 2 : 1;
  std::uint32_t a[kSets][H][8][2];

  // Weight scales come with the stage (the producer loads them). Blocked atom (SPEC 2): row r's
  // byte for column c is at (r % 32) * 16 + (r / 32) * 4 + c % 4; row r + 8 is 128 bytes further
  // (r % 32 is < 24 for every consumer row r). NVFP4: this thread's column is 4 kb + t, so c % 4 =
  // t; MXFP4 (one atom spans two k-blocks): 2 kb + t / 2, so c % 4 = 2 (kb % 2) + t / 2.
  const int tcol = F == Format::nvfp4 ? t : t / 2;  // scale column of this thread within the k-block
  const int s_off = (st.row_in_tile % 32) * 16 + (st.row_in_tile / 32) * 4 + tcol;
  // Columns past K read as scale 0 (the padding of a user's blocked buffer may hold anything,
  // NaN codes included): k-block kb has this thread's column iff kb * kColsPerKb < col_end.
  const int col_end = cols - tcol;
  // Arrives on the `empty` barrier of the stage before the current one (its groups are done).
  // Every consumer thread arrives, after its own retiring wait, so each thread's LDS of the stage
  // is ordered before the producer's refill by its own arrive (as CUTLASS's consumer release
  // does). v9-v11 arrived once per warpgroup, relying on the wgmma being a warpgroup operation;
  // racecheck flagged the stage refills that this leaves unordered for the other threads once a
  // test CTA reused its ring's stages (docs/PERF.md v12).
  auto release_previous_stage = [&] { ptx::mbarrier_arrive(&empty[st.stage == 0 ? stages - 1 : st.stage - 1]); };
  // Loads half h of k-block kb from the current stage and dequantises it into `buf`.
  auto dequant_half = [&](int kb, int h, std::uint32_t(&buf)[8][2]) {
    const std::uint8_t* wrow =
        w_smem + (st.stage * H + h) * C::kHalfWeightBytes + st.row_in_tile * (C::kBlockK / 2) + t * 8;
    const uint2 q0 = *reinterpret_cast<const uint2*>(wrow);
    const uint2 q1 = *reinterpret_cast<const uint2*>(wrow + 8 * (C::kBlockK / 2));
    const std::uint8_t* srow = st.s_smem + (st.stage * H + h) * C::kScaleAtomBytes + s_off +
                               (F == Format::nvfp4 ? 0 : 2 * (kb & 1));
    const unsigned codes = srow[0] | (static_cast<unsigned>(srow[128]) << 8);
    std::uint32_t s0, s1;
    weight_scale_pairs<F>(kb * kColsPerKb < col_end ? codes : 0u, s0, s1);
    std::uint32_t d0[8], d1[8];
    dequant_row<F>(q0, s0, d0);
    dequant_row<F>(q1, s1, d1);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      buf[i][0] = d0[i];
      buf[i][1] = d1[i];
    }
  };
  // The stage's activation descriptor for k-step 0; k-step s adds 32 bytes (2 in the 16-byte
  // address field, which cannot carry: shared addresses are < 2^18).
  const std::uint32_t act_smem0 = ptx::smem_addr(act_smem);
  // Issues the 4 k-steps of halves [h0, h1) of k-block kb from `buf` as one commit group.
  auto issue = [&](int kb, int h0, int h1, const std::uint32_t(&buf)[H][8][2]) {
    const std::uint64_t desc0 = ptx::smem_desc_sw128(act_smem0 + st.stage * st.act_stage_bytes);
    fence_acc(acc);
    ptx::wgmma_fence();
#pragma unroll
    for (int h = h0; h < h1; ++h) {
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        // Fragment: a0 (row r, slots 2t..), a1 (row r+8), a2 (row r, slots 2t+8..), a3.
        const std::uint32_t frag[4] = {buf[h][s][0], buf[h][s][1], buf[h][4 + s][0], buf[h][4 + s][1]};
        wgmma_rs<F, N8>(acc[h], frag, desc0 + 2 * s, (kb > piece.kb_begin || s > 0) ? 1 : 0);
      }
    }
    ptx::wgmma_commit();
  };
  FP4GEMM_TRACE_DO(const long long t_piece = clock64();)
  auto wait_full = [&] {
    FP4GEMM_TRACE_DO(const long long t0 = clock64();)
    ptx::mbarrier_wait(&full[st.stage], st.phase);
    FP4GEMM_TRACE_DO(FP4GEMM_TRACE_ADD(st.trace, kTraceBarrier, clock64() - t0);
                     if (st.trace && st.trace[kTraceFirstNs] == 0) st.trace[kTraceFirstNs] = globaltimer();)
  };
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

  if constexpr (kKblockGroups) {
    // Per k-block: wait for the stage, dequantise every half into the free register set, issue
    // them as one commit group, then retire the previous k-block's group and release its stage.
    // (With one group per half and the retiring wait before each half's dequantisation, ptxas
    // spread the next half's dequantisation between the current half's wgmmas: PERF.md v8.)
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
  release_previous_stage();
  FP4GEMM_TRACE_DO(long long t_mark = clock64(); FP4GEMM_TRACE_ADD(st.trace, kTraceMainloop, t_mark - t_piece);
                   FP4GEMM_TRACE_ADD(st.trace, kTraceKblocks, piece.kb_end - piece.kb_begin);
                   FP4GEMM_TRACE_ADD(st.trace, kTracePieces, 1);
                   FP4GEMM_TRACE_ADD(st.trace, kTraceTokenKblocks, (piece.kb_end - piece.kb_begin) * 8 * N8 * H);)

  // ---- split-K hand-off (see device/schedule.hpp) ----
  // Partials: accumulators 4i..4i+3 of half h as one float4 at [(h * kAcc / 4 + i)][thread], so a
  // warp stores or loads 512 contiguous bytes per instruction (v4-v11: one float per thread and
  // instruction, 4x the instructions).
  static_assert(kAcc % 4 == 0, "float4 partials");
  if (piece.slot >= 0) {
    float4* part = reinterpret_cast<float4*>(p.partials + static_cast<std::int64_t>(piece.slot) * C::kPartialFloats);
#pragma unroll
    for (int h = 0; h < H; ++h)
#pragma unroll
      for (int i = 0; i < kAcc; i += 4)
        __stcg(part + (h * kAcc + i) / 4 * C::kConsumerThreads + st.ctid,
               make_float4(acc[h][i], acc[h][i + 1], acc[h][i + 2], acc[h][i + 3]));
    ptx::named_barrier_sync(kConsumersBarrier, C::kConsumerThreads);
    if (st.ctid == 0) {
      __threadfence();
      ptx::red_release_gpu_add(p.flags + piece.tile, 1);
    }
    FP4GEMM_TRACE_DO(FP4GEMM_TRACE_ADD(st.trace, kTraceHandoff, clock64() - t_mark);)
    return;
  }
  if (tile.writers > 0) {
    if (st.ctid == 0) {
      while (ptx::ld_acquire_gpu(p.flags + piece.tile) < tile.writers) __nanosleep(64);
    }
    ptx::named_barrier_sync(kConsumersBarrier, C::kConsumerThreads);
    for (int w = 0; w < tile.writers; ++w) {  // fixed order: deterministic sums
      const float4* part =
          reinterpret_cast<const float4*>(p.partials + static_cast<std::int64_t>(tile.first_slot + w) * C::kPartialFloats);
#pragma unroll
      for (int h = 0; h < H; ++h)
#pragma unroll
        for (int i = 0; i < kAcc; i += 4) {
          const float4 v = __ldcg(part + (h * kAcc + i) / 4 * C::kConsumerThreads + st.ctid);
          acc[h][i] += v.x, acc[h][i + 1] += v.y, acc[h][i + 2] += v.z, acc[h][i + 3] += v.w;
        }
    }
    ptx::named_barrier_sync(kConsumersBarrier, C::kConsumerThreads);
    if (st.ctid == 0) p.flags[piece.tile] = 0;  // ready for the next run
  }
  FP4GEMM_TRACE_DO(FP4GEMM_TRACE_ADD(st.trace, kTraceHandoff, clock64() - t_mark); t_mark = clock64();)

  // ---- epilogue: C[m][n] = alpha * acc (transposed back from the swap-AB tile) ----
  float mul = g.alpha_device ? *g.alpha_device : g.alpha;
  if constexpr (F == Format::nvfp4) mul *= kNvfp4AccScale;
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
  FP4GEMM_TRACE_DO(FP4GEMM_TRACE_ADD(st.trace, kTraceEpilogue, clock64() - t_mark);)
}

template <Format F>
__global__ void __launch_bounds__(KernelConfig::kThreads, 1)
    fused_grouped_gemm(const __grid_constant__ FusedParams p, OutType out_type) {
  using C = KernelConfig;
  extern __shared__ __align__(1024) std::uint8_t smem_raw[];
  // The 128-byte swizzle needs 1024-byte aligned stages; the launch reserves 1 KB of slack.
  std::uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  // The producers' first record is loaded beside the CTA's range (both depend on blockIdx only),
  // not behind it, so the ring's first loads wait on one metadata load.
  // (Only the fields the early loads need are kept: the record's 16 registers live across the
  // CTA's set-up made ptxas spill the CTA range in the consumers' path.)
  const bool producer = threadIdx.x >= C::kConsumerThreads;
  const CUtensorMap* first_wmap = nullptr;
  int first_kb0 = 0, first_kbs = 0, first_row0 = 0, first_loaded = 0;
  if (threadIdx.x == C::kConsumerThreads) {
    const ProducerPiece& r = p.first_pieces[blockIdx.x];
    first_wmap = r.wmap, first_kb0 = r.kb_begin, first_kbs = r.kb_end - r.kb_begin, first_row0 = r.row0,
    first_loaded = r.loaded;
  }
  const int begin = p.cta_begin[blockIdx.x], end = p.cta_begin[blockIdx.x + 1];
  const int n16 = p.cta_class[blockIdx.x];  // (loaded beside the range: the ring's geometry needs it)
  if (begin == end) {
    FP4GEMM_TRACE_DO(if (threadIdx.x < kTraceRoles * kTraceCounters && blockIdx.x < kTraceCtas)
                       g_trace[blockIdx.x][threadIdx.x / kTraceCounters][threadIdx.x % kTraceCounters] = 0;)
    return;
  }
  // Every piece of this CTA has one token-width class (device/schedule.hpp), so the ring's
  // activation stages are sized to it: narrow tiles get a deeper ring to cover load latency.
  const int act_stage_bytes = n16 * C::kActClassBytes;
  const CUtensorMap* act_map = p.act_maps + (n16 - 1);
  const int halves = halves_of_class(n16, p.narrow_rows);
  const int stages = min(C::kMaxStages,
                         p.ring_bytes / (act_stage_bytes + halves * (C::kHalfWeightBytes + C::kScaleAtomBytes)));
  std::uint8_t* act_smem = smem;                                                // [stages][act_stage_bytes]
  std::uint8_t* w_smem = smem + stages * act_stage_bytes;                       // [stages][halves][4 KB]
  std::uint8_t* s_smem = w_smem + stages * halves * C::kHalfWeightBytes;       // [stages][halves][512 B]
  // [2][128 tokens][128 B] after the ring, 1024-byte aligned (TMA's 128-byte swizzle atoms; the
  // plan keeps 1 KB spare)
  const int ring_used = static_cast<int>(s_smem + stages * halves * C::kScaleAtomBytes - smem);
  std::uint8_t* epi_smem = smem + (ring_used + 1023) / 1024 * 1024;
  auto* full = reinterpret_cast<std::uint64_t*>(epi_smem + C::kEpiBytes);
  std::uint64_t* empty = full + stages;

  FP4GEMM_TRACE_DO(const long long t_start = clock64(); const unsigned long long ns_entry = globaltimer(); __shared__ unsigned long long s_trace[kTraceRoles][kTraceCounters];
                   if (threadIdx.x < kTraceRoles * kTraceCounters) s_trace[threadIdx.x / kTraceCounters][threadIdx.x % kTraceCounters] = 0;)
  // The main producer thread initialises the barriers and issues the weights of the ring's first
  // fill before the CTA's barrier: they depend on nothing the other threads do.
  int pre_issued = 0;  // k-blocks whose weights are already in flight (producer warp 0, lane 0)
  if (threadIdx.x == C::kConsumerThreads) {
    for (int s = 0; s < stages; ++s) {
      // full: producer warp 0's lane 0 (expect_tx), producer warp 1's lane 0 (expect_tx or plain)
      // and warp 1's 32 cp.async arrivals
      ptx::mbarrier_init(&full[s], 1 + 1 + 32);
      ptx::mbarrier_init(&empty[s], C::kConsumerThreads);  // one arrive per consumer thread
    }
    ptx::fence_barrier_init();
    ptx::prefetch_tensormap(act_map);
    // Weights of the first piece only (later pieces' records come through the chain).
    const int early = min(min(stages, p.early_kblocks), first_kbs);
    for (int kb = first_kb0; pre_issued < early; ++kb) {
      ptx::mbarrier_expect_tx(&full[pre_issued], first_loaded * C::kHalfWeightBytes);
      ptx::tma_load_2d(w_smem + pre_issued * halves * C::kHalfWeightBytes, first_wmap, &full[pre_issued],
                       kb * (C::kBlockK / 2), first_row0);
      ++pre_issued;
    }
  }
  __syncthreads();

  if (producer) {
    // ---------------- producers (warpgroup 2: warp 0 loads weights and activations, warp 1 the
    // weight scales; the other two idle) ----------------
    // (One warp issued everything until v6; splitting the work gained 1-2 %, docs/PERF.md.)
    ptx::setmaxnreg_dec<C::kProducerRegs>();
    const int pwarp = threadIdx.x / 32 - C::kConsumerThreads / 32;
    constexpr int kProducerWarps = 2;  // 1 gives the pre-v6 single producer warp (measured: PERF.md v6)
    if (pwarp < kProducerWarps) {
      const int lane = threadIdx.x % 32;
      const bool loads_main = pwarp == 0, loads_scales = pwarp == kProducerWarps - 1;
      // Launched as a programmatic dependent of the activation pre-pass, this CTA may start
      // while the pre-pass still runs. Only the activations come from it: the weights, their
      // scales (the user's, or the scale conversion's, which finished before the pre-pass began)
      // and the schedule can be read now. So warp 0 issues the weights of the ring's first fill
      // before it waits (expect_tx without arriving: a stage cannot complete before its
      // activation load is added below), and the scale warp never waits.
      constexpr int kVec = F == Format::nvfp4 ? 16 : 32;
      auto piece_info = [&](int pi) {  // pieces after the first: through the chain
        const WorkPiece piece = p.pieces[pi];
        const TileDesc tile = p.tiles[piece.tile];
        const GroupParams& g = p.groups[tile.group];
        return make_producer_piece(piece, tile, g.n, g.k / kVec, halves, p.weight_maps + 2 * tile.group,
                                   p.scale_blocked[tile.group], p.scale_linear[tile.group]);
      };
      ProducerPiece pp = p.first_pieces[blockIdx.x];  // the first piece's whole record (an L1 hit
                                                      // for warp 0), then the chain
      if (loads_main && lane == 0) {
        ptx::wait_prerequisites();
        FP4GEMM_TRACE_DO(s_trace[2][kTraceFirstNs] = globaltimer();)
      }
      int issued = 0;  // k-blocks issued so far (the first pre_issued have their weights in flight)
      int stage = 0;
      std::uint32_t phase = 0;
      FP4GEMM_TRACE_DO(unsigned long long* trace = pwarp == 0 && lane == 0 ? s_trace[2] : nullptr; const long long t_loop = clock64();)
      for (int pi = begin; pi < end; ++pi) {
        if (pi > begin) pp = piece_info(pi);
        const int rows = pp.rows;
        const int loaded = pp.loaded;
        const CUtensorMap* wmap = pp.wmap;
        const std::uint32_t bytes = loaded * C::kHalfWeightBytes + act_stage_bytes;  // class N >= tile tokens
        const std::uint8_t* sblk = pp.sblk;
        const std::uint8_t* slin = pp.slin;
        constexpr int kColsPerKb = F == Format::nvfp4 ? 4 : 2;
        const int cols = pp.cols;
        const int col_blocks = (cols + 3) / 4;
        // Linear scales, gathered into the blocked atoms: row r's 4 columns go to byte
        // (r % 32) * 16 + (r / 32) * 4 of its half's atom, so lane l fills bytes 16l..16l+15
        // (rows l + 32q) of each. Rows past N are zero-filled (their weights are TMA's zero fill).
        const std::uint8_t* lane_src = slin + static_cast<std::int64_t>(pp.row0 + lane) * cols;
        const std::int64_t row32 = static_cast<std::int64_t>(32) * cols;
        // Bit 4h + q: row row0 + 128h + 32q + lane exists.
        unsigned valid_rows = 0;
#pragma unroll
        for (int i = 0; i < 4 * C::kMaxHalves; ++i) valid_rows |= (pp.row0 + 32 * i + lane < rows ? 1u : 0u) << i;
        for (int kb = pp.kb_begin; kb < pp.kb_end; ++kb) {
          FP4GEMM_TRACE_DO(const long long t0 = clock64();)
          ptx::mbarrier_wait(&empty[stage], phase ^ 1);
          FP4GEMM_TRACE_DO(const long long t1 = clock64(); FP4GEMM_TRACE_ADD(trace, kTraceBarrier, t1 - t0);
                           FP4GEMM_TRACE_ADD(trace, kTraceKblocks, 1);)
          if (loads_main && lane == 0) {
            const bool weights_issued = issued < pre_issued;
            ptx::mbarrier_arrive_expect_tx(&full[stage], weights_issued ? static_cast<std::uint32_t>(act_stage_bytes) : bytes);
            if (!weights_issued)
            ptx::tma_load_2d(w_smem + stage * halves * C::kHalfWeightBytes, wmap, &full[stage], kb * (C::kBlockK / 2),
                             pp.row0);
            ptx::tma_load_2d(act_smem + stage * act_stage_bytes, act_map, &full[stage], kb * C::kBlockK,
                             pp.act_row0);
          }
          FP4GEMM_TRACE_DO(FP4GEMM_TRACE_ADD(trace, kTraceIssue, clock64() - t1);)
          if (loads_scales) {
            std::uint8_t* s_stage = s_smem + stage * halves * C::kScaleAtomBytes;
            if (slin == nullptr) {
              if (lane == 0) {
                ptx::mbarrier_arrive_expect_tx(&full[stage], loaded * C::kScaleAtomBytes);
                for (int h = 0; h < loaded; ++h)
                  ptx::bulk_load(s_stage + h * C::kScaleAtomBytes,
                                 sblk + (static_cast<std::int64_t>(pp.row0 / 128 + h) * col_blocks + kb * kColsPerKb / 4) *
                                            C::kScaleAtomBytes,
                                 C::kScaleAtomBytes, &full[stage]);
              }
            } else {
              if (lane == 0) ptx::mbarrier_arrive(&full[stage]);
              const std::uint8_t* src = lane_src + kb * kColsPerKb / 4 * 4;
              std::uint8_t* dst = s_stage + lane * 16;
#pragma unroll 1
              for (int h = 0; h < halves; ++h) {
#pragma unroll
                for (int q = 0; q < 4; ++q, src += row32) {  // rows 128h + 32q + lane of atom h
                  const bool valid = (valid_rows >> (4 * h + q)) & 1u;
                  ptx::cp_async_4(dst + h * C::kScaleAtomBytes + 4 * q, valid ? src : slin, valid);
                }
              }
            }
            ptx::cp_async_mbarrier_arrive_noinc(&full[stage]);
          }
          ++issued;
          if (++stage == stages) { stage = 0; phase ^= 1; }
        }
      }
      FP4GEMM_TRACE_DO(if (trace && blockIdx.x < kTraceCtas) {
        trace[kTraceMainloop] = clock64() - t_loop;
        trace[kTraceTotal] = clock64() - t_start;
        trace[kTraceEntryNs] = ns_entry;
        trace[kTraceExitNs] = globaltimer();
        for (int i = 0; i < kTraceCounters; ++i) g_trace[blockIdx.x][2][i] = trace[i];
      })
    }
    return;
  }

  // ---------------- consumers ----------------
  ptx::setmaxnreg_inc<C::kConsumerRegs>();
  ConsumerState st;
  st.cw = threadIdx.x / 128;
  st.s_smem = s_smem;
  st.stages = stages;
  st.act_stage_bytes = act_stage_bytes;
  st.ctid = threadIdx.x;
  FP4GEMM_TRACE_DO(st.trace = threadIdx.x % 128 == 0 ? s_trace[st.cw] : nullptr;)
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  st.lane = lane;
  st.t = lane % 4;
  st.row_in_tile = st.cw * 64 + warp * 16 + lane / 4;
  // One mainloop per token-width class (wgmma's N is part of the instruction) and tile height,
  // in steps of 16 tokens: 24 instantiations keep compile time sane and waste at most 15 token
  // columns per tile.
  // The host gives every CTA pieces of a single class (device/schedule.hpp; checked by the host
  // tier's schedule tests -- a check here costs the same serialisation), and the piece loop
  // sits inside each instantiation: with the loop outside the dispatch, ptxas serialises every
  // wgmma of the kernel (C7512, "insufficient register resources").
  // Key: the class for tiles of their natural height (1-8: two halves, 9-16: one), 17-24: the
  // narrow classes at one half (small problems, Schedule::narrow_rows = 128).
  switch (n16 + (halves == 1 && n16 <= 8 ? 16 : 0)) {
#define FP4GEMM_CASE(key, n16, h)                                                                 \
  case key:                                                                                       \
    for (int pi = begin; pi < end; ++pi) {                                                        \
      const WorkPiece piece = p.pieces[pi];                                                       \
      const TileDesc tile = p.tiles[piece.tile];                                                  \
      consume_piece<F, 2 * n16, h>(p, st, piece, tile, act_smem, w_smem, full, empty, epi_smem, out_type); \
    }                                                                                             \
    break;
    FP4GEMM_CASE(1, 1, 2) FP4GEMM_CASE(2, 2, 2) FP4GEMM_CASE(3, 3, 2) FP4GEMM_CASE(4, 4, 2)
    FP4GEMM_CASE(5, 5, 2) FP4GEMM_CASE(6, 6, 2) FP4GEMM_CASE(7, 7, 2) FP4GEMM_CASE(8, 8, 2)
    FP4GEMM_CASE(9, 9, 1) FP4GEMM_CASE(10, 10, 1) FP4GEMM_CASE(11, 11, 1) FP4GEMM_CASE(12, 12, 1)
    FP4GEMM_CASE(13, 13, 1) FP4GEMM_CASE(14, 14, 1) FP4GEMM_CASE(15, 15, 1) FP4GEMM_CASE(16, 16, 1)
    FP4GEMM_CASE(17, 1, 1) FP4GEMM_CASE(18, 2, 1) FP4GEMM_CASE(19, 3, 1) FP4GEMM_CASE(20, 4, 1)
    FP4GEMM_CASE(21, 5, 1) FP4GEMM_CASE(22, 6, 1) FP4GEMM_CASE(23, 7, 1) FP4GEMM_CASE(24, 8, 1)
#undef FP4GEMM_CASE
    default: break;
  }
  // The last TMA stores must have read the epilogue buffer before the CTA's shared memory goes
  // (their global writes complete with the grid, as in CUTLASS's TMA-store epilogue).
  if (p.c_maps != nullptr && threadIdx.x % 128 == 0) ptx::bulk_wait_group_read_0();
  FP4GEMM_TRACE_DO(if (st.trace && blockIdx.x < kTraceCtas) {
    st.trace[kTraceTotal] = clock64() - t_start;
    st.trace[kTraceEntryNs] = ns_entry;
    st.trace[kTraceExitNs] = globaltimer();
    for (int i = 0; i < kTraceCounters; ++i) g_trace[blockIdx.x][st.cw][i] = st.trace[i];
  })
}

// The persistent GEMM, launched as a programmatic dependent of the pre-pass before it: its CTAs
// start (barrier set-up, tensor-map prefetch) as the pre-pass drains; the producer waits for the
// pre-pass with griddepcontrol.wait.
template <Format F>
cudaError_t launch_gemm(const FusedParams& params, OutType out_type, int num_ctas, std::size_t smem_bytes, bool pdl,
                        cudaStream_t stream) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(num_ctas);
  config.blockDim = dim3(KernelConfig::kThreads);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  config.attrs = attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, fused_grouped_gemm<F>, params, out_type);
}

// Enqueues the pre-pass and the fused kernel. Instantiated once per format in fused_<format>.cu
// (extern below), so the two instantiations compile in parallel.
// Every launch's error is returned at once (a later launch would otherwise run on a failed one's
// missing output).
template <Format F>
cudaError_t launch_fused(const FusedParams& params, OutType out_type, int num_ctas,
                  std::size_t smem_bytes, const PrepassArgs& prepass, dim3 pre_grid,
                  const ScaleConversion* conversions, int num_conversions, dim3 conversion_grid, bool pdl,
                  cudaStream_t stream) {
  if (num_conversions > 0) {
    scales_to_blocked<F><<<conversion_grid, 256, 0, stream>>>(conversions, num_conversions);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
#ifdef FP4GEMM_TRACE
  const unsigned long long reset[2] = {~0ull, 0ull};
  cudaMemcpyToSymbolAsync(g_prepass_ns, reset, sizeof reset, 0, cudaMemcpyHostToDevice, stream);
#endif
  dequant_activations<F><<<pre_grid, 256, 0, stream>>>(prepass);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return launch_gemm<F>(params, out_type, num_ctas, smem_bytes, pdl, stream);
}

// The routed (MoE) path: the device scheduler has written the work list (moe_schedule.cu); the
// pre-pass reads the routed rows, then the same GEMM runs.
template <Format F, PrepassSource S>
cudaError_t launch_routed(const FusedParams& params, OutType out_type, int num_ctas, std::size_t smem_bytes,
                          const PrepassArgs& prepass, dim3 pre_grid, bool pdl, cudaStream_t stream) {
  static_assert(S != PrepassSource::routed_bf16 || F == Format::mxfp4, "bf16 activations pair with bf16 weights");
  dequant_activations<F, S><<<pre_grid, 256, 0, stream>>>(prepass);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return launch_gemm<F>(params, out_type, num_ctas, smem_bytes, pdl, stream);
}

template <Format F>
cudaError_t set_fused_smem(std::size_t smem_bytes) {
  return cudaFuncSetAttribute(fused_grouped_gemm<F>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(smem_bytes));
}

#ifdef FP4GEMM_TRACE
// Copies the last launch's counters out: [kTraceCtas][kTraceRoles][kTraceCounters].
template <Format F>
cudaError_t read_trace(unsigned long long* out) {
  if (cudaError_t e = cudaMemcpyFromSymbol(out, g_trace, sizeof(g_trace)); e != cudaSuccess) return e;
  return cudaMemcpyFromSymbol(out + sizeof(g_trace) / sizeof(*out), g_prepass_ns, sizeof(g_prepass_ns));
}
#define FP4GEMM_TRACE_INSTANTIATION(PREFIX, F) PREFIX template cudaError_t read_trace<F>(unsigned long long*);
#else
#define FP4GEMM_TRACE_INSTANTIATION(PREFIX, F)
#endif

#define FP4GEMM_FUSED_INSTANTIATION(PREFIX, F)                                                            \
  PREFIX template cudaError_t launch_fused<F>(const FusedParams&, OutType, int, std::size_t, \
                                       const PrepassArgs&, dim3, const ScaleConversion*, int, dim3, bool, \
                                       cudaStream_t);                                                     \
  PREFIX template cudaError_t set_fused_smem<F>(std::size_t);                                           \
  PREFIX template cudaError_t launch_routed<F, PrepassSource::routed_fp4>(const FusedParams&, OutType, int,        \
                                                                      std::size_t, const PrepassArgs&, dim3, bool, \
                                                                      cudaStream_t);                              \
  FP4GEMM_TRACE_INSTANTIATION(PREFIX, F)

#define FP4GEMM_W4A16_INSTANTIATION(PREFIX)                                                              \
  PREFIX template cudaError_t launch_routed<Format::mxfp4, PrepassSource::routed_bf16>(                     \
      const FusedParams&, OutType, int, std::size_t, const PrepassArgs&, dim3, bool, cudaStream_t);

#ifndef FP4GEMM_FUSED_INSTANTIATE
FP4GEMM_FUSED_INSTANTIATION(extern, Format::nvfp4)
FP4GEMM_FUSED_INSTANTIATION(extern, Format::mxfp4)
FP4GEMM_W4A16_INSTANTIATION(extern)
#endif

}  // namespace fp4gemm::detail::sm90
