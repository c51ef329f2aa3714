// A GLU plan's weight scales (the MoE GEMM's GLU epilogue and the pointer-array dual GEMM): one
// blocked copy with the kernel's row order -- 16-row blocks of 8 gate rows and their 8 up rows,
// so kernel row p is output column 8 (p / 16) + p % 8 of half (p % 16) / 8 -- made from the
// user's scales in either layout (kernel in plan_kernels.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail::sm90 {

// `first` / `second`: the scales of the weight map's first and second 8 rows of each 16
// (stacked / interleaved: both the expert's one buffer, rows picked by `gate_up`).
struct GluScaleJob {
  const std::uint8_t* first;
  const std::uint8_t* second;
  std::int64_t expert_stride;  // bytes, both sources
  std::uint8_t* dst;
  std::int64_t dst_expert_stride;
  int width, cols, src_rows;  // I, scale columns, rows of one source matrix
  int gate_up;                // GateUpLayout
  ScaleLayout layout;         // of the sources
};

// Enqueues the copy for `experts` experts (blockIdx.y) on `stream`.
cudaError_t launch_glu_scales(const GluScaleJob& job, int experts, cudaStream_t stream);

}  // namespace fp4gemm::detail::sm90
