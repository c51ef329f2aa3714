// Host tier: the fused kernel's ring geometry rules (src/device/kernel_config.cuh), shared by the MoE plan that
// checks them and the kernel that carves its shared memory: which token-width classes fill their rings in stage
// pairs, and that such a ring has an even number of stages, at least two pairs, inside the plan's ring bytes.
#include <gtest/gtest.h>

#include "device/kernel_config.cuh"

namespace fp4gemm::detail::sm90 {
namespace {

using C = KernelConfig;

TEST(MoeRingPairs, ClassesOnStagePairsAreThoseWithOneGroupPerKblock) {
  int paired = 0;
  for (int narrow : {128, 256})
    for (int n16 = 1; n16 <= SchedulePolicy::kWidthClasses; ++n16) {
      const int halves = halves_of_class(n16, narrow), kbps = moe_stage_kblocks(n16, halves);
      ASSERT_TRUE(kbps == 1 || kbps == kMoeWideStageKblocks);
      // stage pairs are consumed one group per k-block (two A register sets) or, at 16 tokens, a pair per group
      if (kbps > 1) EXPECT_TRUE(kblock_groups(2 * n16, halves)) << n16 << " " << halves;
      EXPECT_EQ(kbps > 1, moe_wide_stages(2 * n16, halves));
      paired += kbps > 1;
    }
  // the 16-token class pairs at either tile height; one-half classes up to 128 tokens, two-half ones up to 80
  EXPECT_EQ(moe_stage_kblocks(1, 2), 2);
  EXPECT_EQ(moe_stage_kblocks(1, 1), 2);
  EXPECT_EQ(moe_stage_kblocks(5, 2), 2);
  EXPECT_EQ(moe_stage_kblocks(6, 2), 1);
  EXPECT_EQ(moe_stage_kblocks(8, 2), 1);
  EXPECT_EQ(moe_stage_kblocks(8, 1), 2);
  EXPECT_EQ(moe_stage_kblocks(9, 1), 1);
  EXPECT_EQ(moe_stage_kblocks(16, 1), 1);
  EXPECT_EQ(paired, 13);  // narrow rows 128: the 8 classes up to 128 tokens; 256: the 5 two-half ones
}

TEST(MoeRingPairs, PairedRingsAreEvenWithTwoPairsAndFit) {
  // Hopper's ring (the plan's: the opt-in shared memory less the fixed part, less a trace build's counters) and
  // smaller ones down to the smallest a plan allows.
  const int hopper = SmemLayout::kHopperMaxBytes - SmemLayout::kFixedBytes;
  for (int ring : {hopper, hopper - 4096, hopper - 16384, SmemLayout::kMinRingBytes + 8192, SmemLayout::kMinRingBytes})
    for (int narrow : {128, 256})
      for (int n16 = 1; n16 <= SchedulePolicy::kWidthClasses; ++n16) {
        const int halves = halves_of_class(n16, narrow), kbps = moe_stage_kblocks(n16, halves);
        const int act = n16 * C::kActClassBytes;
        const int plain = SmemLayout::stages(ring, act, halves), st = SmemLayout::stages(ring, act, halves, kbps);
        EXPECT_EQ(st % kbps, 0) << ring << " " << n16;
        EXPECT_TRUE(st == plain || (kbps > 1 && st == plain - 1)) << ring << " " << n16;  // at most one stage lost
        // the carve-up of the ring ends inside what the plan reserves
        EXPECT_LE(1023 + SmemLayout::of(st, act, halves).empty + st * 8, ring + SmemLayout::kFixedBytes);
        // on Hopper's ring every paired class has >= 2 pairs (the plan throws otherwise)
        if (ring >= hopper - 16384 && kbps > 1) EXPECT_GE(st, C::kMinPairStages) << ring << " " << n16;
      }
}

}  // namespace
}  // namespace fp4gemm::detail::sm90
