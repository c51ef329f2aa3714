// How a CTA of the fused kernel gets its work: the scheduler interface (CUTLASS / DeepGEMM style,
// for a precomputed list).
//
// A scheduler is a type with
//   static __device__ CtaWork initial_work(const FusedParams& p, std::uint8_t* scratch);
// called by every thread of the CTA at entry (`scratch`: the ring's shared memory, free until the
// first load). The CTA then walks its pieces with CtaWork::is_valid / next_work. The work list is
// the same structure for both schedulers (tiles, pieces, each CTA's first producer record:
// device/schedule.hpp, device/params.cuh); what differs is who writes it and when:
//   HostWorkList       the pointer-array plan's list, built on the host from host shapes
//                      (host/core/schedule.cpp: stream-K pieces, width classes, cost model);
//   MoeDeviceSchedule  the MoE plan's: each CTA cuts the run's device-side expert offsets into
//                      its own tiles in its prologue (device/moe_schedule.cuh).
#pragma once

#include <cstdint>

#include "device/kernel_config.cuh"
#include "device/moe_schedule.cuh"
#include "device/params.cuh"

namespace fp4gemm::detail::sm90 {

// A CTA's pieces [begin, end) of the work list, all of token-width class n16.
struct CtaWork {
  int begin, end, n16;
  __device__ __forceinline__ bool empty() const { return begin == end; }
  __device__ __forceinline__ bool is_valid(int piece) const { return piece < end; }
  __device__ __forceinline__ int next_work(int piece) const { return piece + 1; }
};

struct HostWorkList {
  static constexpr bool kRoutedOutput = false;  // C per group (GroupParams::c)
  static constexpr bool kGlu = false;           // no GLU code in the plain pointer-array kernel
  static constexpr bool kWeightPieces = false;  // the weights as rows (MoE plans may read pieces: below)
  static __device__ __forceinline__ CtaWork initial_work(const FusedParams& p, std::uint8_t*) {
    // (the class is loaded beside the range: the ring's geometry needs it)
    return CtaWork{p.cta_begin[blockIdx.x], p.cta_begin[blockIdx.x + 1], p.cta_class[blockIdx.x]};
  }
};

// The pointer-array dual GEMM (Options::epilogue): the host's work list, gate / up row pairs and
// the GLU epilogue (its own instantiation, so the plain kernel's code is untouched).
struct HostWorkListGlu : HostWorkList {
  static constexpr bool kGlu = true;
};

struct MoeDeviceSchedule {
  static constexpr bool kRoutedOutput = true;  // one C for every expert (p.moe.c)
  static constexpr bool kGlu = false;          // plain outputs (the layer's down GEMM); GLU plans: below
  static constexpr bool kWeightPieces = false;
  static __device__ __forceinline__ CtaWork initial_work(const FusedParams& p, std::uint8_t* scratch) {
    CtaWork w;
    moe_schedule_cta<KernelConfig::kThreads>(p.moe, *reinterpret_cast<MoeScheduleScratch*>(scratch), w.begin, w.end,
                                             w.n16);
    return w;
  }
};

// The MoE GEMM of a GLU plan (p.moe.glu != 0: the layer's gate / up GEMM): gate / up row pairs and the GLU
// epilogue. Its own instantiation, as the dual GEMM's: the launch picks it from the plan, so neither
// kernel carries the other's epilogue (half the code per kernel, half the compile time per unit).
struct MoeDeviceScheduleGlu : MoeDeviceSchedule {
  static constexpr bool kGlu = true;
};

// The same schedules for weights in k-block pieces (WeightLayout::pieces, p.moe.weight_pieces != 0): 3-D weight maps, a
// thread's two rows of a k-block in one 16-byte shared load. Instantiations of their own, so the row-major kernels'
// code is untouched.
struct MoeDeviceSchedulePieces : MoeDeviceSchedule {
  static constexpr bool kWeightPieces = true;
};
struct MoeDeviceScheduleGluPieces : MoeDeviceScheduleGlu {
  static constexpr bool kWeightPieces = true;
};

}  // namespace fp4gemm::detail::sm90
