// The fused kernel's instantiations, one row each: (name, format, scheduler, MXFP4 scale decode).
// Each row's kernel is compiled in a translation unit of its own, fused_variant_<name>.cu (one line:
// FP4GEMM_DEFINE_FUSED_VARIANT(<name>)), so that the build compiles them side by side instead of
// one format's whole set in one unit; launch_gemm and set_fused_smem (fused_kernel.cuh) reach them
// through the functions each row declares. A new variant is one row here and one such file.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "device/params.cuh"
#include "device/scheduler.cuh"
#include "fp4gemm/fp4gemm.hpp"

#define FP4GEMM_FUSED_VARIANTS(X)                                                           \
  X(nvfp4_host, Format::nvfp4, HostWorkList, kMxTwo)                                        \
  X(nvfp4_host_glu, Format::nvfp4, HostWorkListGlu, kMxTwo)                                 \
  X(nvfp4_moe, Format::nvfp4, MoeDeviceSchedule, kMxTwo)                                    \
  X(nvfp4_moe_glu, Format::nvfp4, MoeDeviceScheduleGlu, kMxTwo)                             \
  X(mxfp4_host, Format::mxfp4, HostWorkList, kMxTwo)                                        \
  X(mxfp4_host_glu, Format::mxfp4, HostWorkListGlu, kMxTwo)                                 \
  X(mxfp4_moe, Format::mxfp4, MoeDeviceSchedule, kMxTwo)                                    \
  X(mxfp4_moe_glu, Format::mxfp4, MoeDeviceScheduleGlu, kMxTwo)                             \
  X(mxfp4_moe_one, Format::mxfp4, MoeDeviceSchedule, kMxOne)                                \
  X(mxfp4_moe_one_glu, Format::mxfp4, MoeDeviceScheduleGlu, kMxOne)                         \
  X(mxfp4_moe_checked, Format::mxfp4, MoeDeviceSchedule, kMxOneChecked)                     \
  X(mxfp4_moe_checked_glu, Format::mxfp4, MoeDeviceScheduleGlu, kMxOneChecked)              \
  X(nvfp4_moe_pieces, Format::nvfp4, MoeDeviceSchedulePieces, kMxTwo)                       \
  X(nvfp4_moe_glu_pieces, Format::nvfp4, MoeDeviceScheduleGluPieces, kMxTwo)                \
  X(mxfp4_moe_pieces, Format::mxfp4, MoeDeviceSchedulePieces, kMxTwo)                       \
  X(mxfp4_moe_glu_pieces, Format::mxfp4, MoeDeviceScheduleGluPieces, kMxTwo)                \
  X(mxfp4_moe_one_pieces, Format::mxfp4, MoeDeviceSchedulePieces, kMxOne)                   \
  X(mxfp4_moe_one_glu_pieces, Format::mxfp4, MoeDeviceScheduleGluPieces, kMxOne)            \
  X(mxfp4_moe_checked_pieces, Format::mxfp4, MoeDeviceSchedulePieces, kMxOneChecked)        \
  X(mxfp4_moe_checked_glu_pieces, Format::mxfp4, MoeDeviceScheduleGluPieces, kMxOneChecked)

namespace fp4gemm::detail::sm90 {

#define FP4GEMM_DECLARE_FUSED_VARIANT(name, format, scheduler, mx)                                        \
  struct FusedVariant_##name {                                                                            \
    static constexpr Format kFormat = format;                                                             \
    using Scheduler = scheduler;                                                                          \
    static constexpr int kSmallMx = mx;                                                                   \
  };                                                                                                      \
  cudaError_t fused_launch_##name(const cudaLaunchConfig_t& config, const FusedParams& params, OutType out); \
  cudaError_t fused_smem_##name(std::size_t smem_bytes);                                                  \
  cudaError_t fused_trace_##name(unsigned long long* out);
FP4GEMM_FUSED_VARIANTS(FP4GEMM_DECLARE_FUSED_VARIANT)
#undef FP4GEMM_DECLARE_FUSED_VARIANT

// A trace build's reader of the counters of the variant launched last (each unit has its own
// counters; read_trace calls this one). Set by the launch in a trace build only.
inline cudaError_t (*g_fused_last_trace)(unsigned long long* out) = nullptr;

}  // namespace fp4gemm::detail::sm90

// In fused_variant_<name>.cu (after including fused_kernel.cuh): the row's kernel and its functions.
#define FP4GEMM_DEFINE_FUSED_VARIANT(name)                                                                    \
  namespace fp4gemm::detail::sm90 {                                                                           \
  cudaError_t fused_launch_##name(const cudaLaunchConfig_t& config, const FusedParams& params, OutType out) { \
    using V = FusedVariant_##name;                                                                            \
    if constexpr (Trace::kOn) g_fused_last_trace = fused_trace_##name;                                        \
    return cudaLaunchKernelEx(&config, fused_grouped_gemm<V::kFormat, V::Scheduler, V::kSmallMx>, params, out); \
  }                                                                                                           \
  cudaError_t fused_smem_##name(std::size_t smem_bytes) {                                                     \
    using V = FusedVariant_##name;                                                                            \
    return cudaFuncSetAttribute(fused_grouped_gemm<V::kFormat, V::Scheduler, V::kSmallMx>,                    \
                                cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes));   \
  }                                                                                                           \
  cudaError_t fused_trace_##name(unsigned long long* out) { return Trace::read_counters(out); }              \
  }
