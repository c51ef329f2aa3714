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

// The MoE kernel's 16-token class loads its weights and scales two k-blocks at a time
// (kMoeWideStageKblocks) into ring stages 2i and 2i + 1, which its paired loop consumes together:
// one weight box of 64-byte rows per pair streams at 4.35 instead of 3.50 TB/s (TMA's 32-byte
// rows; the ring alone, measured on H200), and the producers issue half as many weight and scale
// copies. Barriers and activation boxes stay one per k-block (fused_kernel.cuh, mainloop.cuh).
// Weight maps per expert: [0, 1] one k-block (32-byte rows) of 128 / 256 rows, [2, 3] two k-blocks
// (64-byte rows, 64-byte swizzle: 16-byte chunk c of smem row r at c ^ ((r >> 1) & 3)).
constexpr int kMoeMapsPerExpert = 4;
constexpr int kMoeWideStageMaps = 2;
constexpr int kMoeWideStageKblocks = 2;

// Halves of a tile of token-width class n16 (every tile of a class has the same row count).
__host__ __device__ constexpr int halves_of_class(int n16, int narrow_rows) {
  return tile_rows(16 * n16, narrow_rows) / 128;
}

enum NamedBarrier : int { kConsumersBarrier = 1, kEpilogueBarrier0 = 2 /* + consumer warpgroup */ };

}  // namespace fp4gemm::detail::sm90
