// What sizes the fused kernel's registers and shared memory (KernelConfig), and its named barriers.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "device/schedule.hpp"

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
  // WeightLayout::pieces: 16 rows x one k-block, lane (g, c) of a warp holding bytes 8c..8c+7 of rows g and g + 8
  // (the A-fragment rows of one thread), so a half is 8 such pieces in row-block order.
  static constexpr int kPieceBytes = 16 * kBlockK / 2;
  // Weight scales of a stage: one 512-byte blocked atom (128 rows x 4 scale columns) per half.
  static constexpr int kScaleAtomBytes = 512;
  // Largest stage: 256 tokens x 64 k of 16-bit activations + one half (the 2-half stages have
  // <= 128 tokens: 16 KB + 8 KB + 1 KB).
  static_assert(kPieceBytes == 512 && kHalfWeightBytes % kPieceBytes == 0, "a piece is 32 lanes x 16 bytes");
  static constexpr int kStageBytes = kMaxTokens * kBlockK * 2 + kHalfWeightBytes + kScaleAtomBytes;
  static constexpr int kMaxStages = 16;  // ring depth: as many stages of the CTA's width as fit
  static constexpr int kAccRegs = 128;   // FP32 accumulators per consumer thread: halves x N / 2
  static constexpr int kPartialFloats = kConsumerThreads * kAccRegs;  // one writer's FP32 tile
  // 16-bit epilogue: each consumer warpgroup transposes its 64 weight rows x 128 tokens at a time
  // through shared memory (stmatrix), then writes 16-byte chunks of C rows.
  static constexpr int kEpiTokens = 128;
  static constexpr int kEpiBytes = kConsumerWarpgroups * kEpiTokens * 64 * 2;
  // Tiles of <= 16 * kPairMaxN8 / 2 tokens run two k-blocks per commit group (mainloop.cuh): the
  // 16-token class. Paired, the 32-token class made ptxas spill more around every class's loop
  // (consumer spill instructions 188 -> 341) and the 48-token class serialised every wgmma of the
  // kernel (C7512); the 64-token class alone spills in its loop.
  static constexpr int kPairMaxN8 = 2;
  // ... which holds the previous pair's two stages while both of the next pair fill: >= 4 stages
  // in the smallest ring a plan allows (2 * kStageBytes: the largest stages, twice).
  static constexpr int kMinPairStages = 4;
  static_assert(2 * kStageBytes / (kPairMaxN8 / 2 * kActClassBytes + kMaxHalves * (kHalfWeightBytes + kScaleAtomBytes)) >=
                    kMinPairStages,
                "the paired mainloop needs 4 ring stages");
  static_assert(kActClassBytes % 1024 == 0, "128-byte swizzle atoms need 1024-byte aligned stages");
  static_assert(tile_rows(SchedulePolicy::kNarrowTokens, 256) == 128 * kMaxHalves &&
                    tile_rows(kMaxTokens, 256) == 128,
                "the mainloop is written for 1 or 2 halves");
  static_assert(kMaxHalves * SchedulePolicy::kNarrowTokens / 2 <= kAccRegs && kMaxTokens / 2 <= kAccRegs,
                "accumulators beyond the register budget");
  static_assert(SchedulePolicy::kWidthClasses == 16, "the class dispatch below has 16 cases");
};

// The MoE plan's split-K partial slot (one per CTA, moe_schedule.cuh's stream-K): tiles of the 16-
// and 32-token classes only, <= 2 halves x 16 accumulators per consumer thread.
constexpr int kMoeSlotFloats = KernelConfig::kConsumerThreads * 32;

// The MoE kernel loads its weights and scales two k-blocks at a time (kMoeWideStageKblocks) into
// ring stages 2i and 2i + 1 in every class whose consumer runs one commit group per k-block
// (moe_wide_stages below; the 16-token class consumes a pair as one group): one weight box of 64-byte
// rows (pieces: 1 KB runs instead of 512 bytes) per pair streams at 4.35 instead of 3.50 TB/s
// (TMA's 32-byte rows; the ring alone, measured on H200), the producers issue half as many weight
// and scale copies, and the consumers wait and release once per pair. Activation boxes stay one per
// k-block; a pair has one `full` and one `empty` barrier, stage 2i's (stage 2i + 1's are unused:
// fused_kernel.cuh, mainloop.cuh). Such a class's ring has an even number of stages, >= 4 (the
// consumers hold the previous pair while the next one fills: SmemLayout::stages, the plan's check).
// Weight maps per expert: [0, 1] one k-block (32-byte rows) of 128 / 256 rows, [2, 3] two k-blocks
// (64-byte rows, 64-byte swizzle: 16-byte chunk c of smem row r at c ^ ((r >> 1) & 3)).
constexpr int kMoeMapsPerExpert = 4;
constexpr int kMoeWideStageMaps = 2;
constexpr int kMoeWideStageKblocks = 2;

// Halves of a tile of token-width class n16 (every tile of a class has the same row count).
__host__ __device__ constexpr int halves_of_class(int n16, int narrow_rows) {
  return tile_rows(16 * n16, narrow_rows) / 128;
}

// Whether a consumer of n8 token columns (tile tokens / 8) and `halves` halves runs one commit group
// per k-block with two A register sets (mainloop.cuh): every one-half class, and two-half classes up to
// 96 accumulators (48 tokens x 2 halves); the wider two-half classes have registers for one set per half
// and run one group per half.
__host__ __device__ constexpr bool kblock_groups(int n8, int halves) { return halves == 1 || halves * 4 * n8 <= 96; }
// The MoE kernel's classes that fill their rings in stage pairs: those of the first kind up to 128 tokens at one
// half and 80 at two, whose rings keep >= 8 stages on Hopper (227 KB). Not the 144-token one-half class (on the rows
// layout ptxas put its two weight loads 29 instructions apart: the host tier's scripts/sass_load_pairs.py), the
// 96-token two-half class (with the pair's bookkeeping ptxas spilled in its loop: 2 LDL / STL per pair, the plain
// MXFP4 kernel on pieces), nor the
// 160-256-token one-half classes: their rings of 5-7 stages lose one to the pairing, and a consumer holds a whole
// pair, so two k-blocks stay in flight instead of four (Qwen3-30B-A3B T 4096, 256-token tiles: 836 -> 891 us, H200).
__host__ __device__ constexpr bool moe_wide_stages(int n8, int halves) {
  return kblock_groups(n8, halves) && (halves == 1 ? n8 <= 16 : n8 <= 10);
}
__host__ __device__ constexpr int moe_stage_kblocks(int n16, int halves) {
  return moe_wide_stages(2 * n16, halves) ? kMoeWideStageKblocks : 1;
}

// The CTA's shared memory, one rule for the plan that sizes it and the kernel that carves it:
//   [ring: stages x activations | stages x halves x weights | stages x halves x scale atoms]
//   [epilogue buffer, 1024-byte aligned] [full barriers] [empty barriers]
// The ring's depth depends on the CTA's token-width class (known on the device only for MoE plans):
// as many stages of that class as ring_bytes holds, at most kMaxStages. The barriers and the
// epilogue buffer sit after the deepest ring's end, so the plan reserves them at fixed size.
struct SmemLayout {
  using C = KernelConfig;
  // Beyond the ring: both barrier arrays of the deepest ring, the epilogue buffer, and 1 KB of
  // alignment slack each for the ring's start (the 128-byte swizzle) and the epilogue buffer's.
  static constexpr int kFixedBytes = 2 * C::kMaxStages * static_cast<int>(sizeof(std::uint64_t)) + C::kEpiBytes + 2048;
  // The smallest ring a plan allows: the largest stage, twice.
  static constexpr int kMinRingBytes = 2 * C::kStageBytes;
  // Hopper's opt-in shared memory per CTA (sm_90: 227 KB).
  static constexpr int kHopperMaxBytes = 227 * 1024;

  __host__ __device__ static constexpr int stage_bytes(int act_stage_bytes, int halves) {
    return act_stage_bytes + halves * (C::kHalfWeightBytes + C::kScaleAtomBytes);
  }
  // (kbps: ring stages filled together, the MoE kernel's stage pairs: a multiple of it)
  __host__ __device__ static constexpr int stages(int ring_bytes, int act_stage_bytes, int halves, int kbps = 1) {
    const int s = ring_bytes / stage_bytes(act_stage_bytes, halves);
    return (s < C::kMaxStages ? s : C::kMaxStages) / kbps * kbps;
  }

  // Where each part of a ring of `stages` stages starts, in bytes from the (1024-byte aligned) base.
  int w, s, epi, full, empty;
  __host__ __device__ static constexpr SmemLayout of(int stages, int act_stage_bytes, int halves) {
    SmemLayout l{};
    l.w = stages * act_stage_bytes;                                    // [stages][act_stage_bytes] before it
    l.s = l.w + stages * halves * C::kHalfWeightBytes;                // [stages][halves][4 KB]
    const int ring_used = l.s + stages * halves * C::kScaleAtomBytes;  // [stages][halves][512 B]
    l.epi = (ring_used + 1023) / 1024 * 1024;                          // [2][128 tokens][128 B]
    l.full = l.epi + C::kEpiBytes;                                     // [stages] mbarriers
    l.empty = l.full + stages * static_cast<int>(sizeof(std::uint64_t));
    return l;
  }
};
// Every class's ring, carved from a base up to 1023 bytes past the allocation's start, ends inside
// ring_bytes + kFixedBytes (checked for the smallest ring and the largest an sm_90 CTA has).
constexpr bool smem_layout_fits(int ring_bytes) {
  for (int n16 = 1; n16 <= SchedulePolicy::kWidthClasses; ++n16)
    for (int halves = 1; halves <= KernelConfig::kMaxHalves; ++halves) {
      const int act = n16 * KernelConfig::kActClassBytes, st = SmemLayout::stages(ring_bytes, act, halves);
      if (1023 + SmemLayout::of(st, act, halves).empty + st * static_cast<int>(sizeof(std::uint64_t)) > ring_bytes + SmemLayout::kFixedBytes) return false;
    }
  return true;
}
static_assert(smem_layout_fits(SmemLayout::kMinRingBytes) &&
                  smem_layout_fits(SmemLayout::kHopperMaxBytes - SmemLayout::kFixedBytes),
              "the kernel's carve-up overruns what the plan reserves");
static_assert(SmemLayout::kFixedBytes + SmemLayout::kMinRingBytes <= SmemLayout::kHopperMaxBytes,
              "the fused kernel's smallest ring does not fit an sm_90 CTA");

enum NamedBarrier : int { kConsumersBarrier = 1, kEpilogueBarrier0 = 2 /* + consumer warpgroup */ };

}  // namespace fp4gemm::detail::sm90
