// Plan-time kernels of the fused GEMM's plans (plan_kernels.hpp, glu_scales.hpp): linear expert
// scales to blocked, the MXFP4 scale-code check, and a GLU plan's paired scale copies.
#include "kernels/sm90/plan_kernels.hpp"

#include <algorithm>

#include "device/prepass.cuh"
#include "formats/scale_layout.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "kernels/sm90/glu_scales.hpp"

namespace fp4gemm::detail::sm90 {

// Linear expert scales -> blocked, once at plan time (the pre-pass's conversion kernel, one job per
// expert).
template <Format F>
cudaError_t convert_expert_scales(const ScaleConversion* jobs, int experts, int rows, int cols, cudaStream_t stream) {
  const std::int64_t words = static_cast<std::int64_t>((rows + 127) / 128) * (((cols + 3) / 4 + 7) / 8) * 128;
  const dim3 grid(static_cast<unsigned>((words + 255) / 256), std::min(experts, PrepassArgs::kMaxGridY));
  scales_to_blocked<F><<<grid, 256, 0, stream>>>(jobs, experts);
  return cudaGetLastError();
}

// The largest byte of the blocks [p + y * stride, + n) (y = blockIdx.y, one per expert) into
// *out (zeroed by the caller): the plan's check that every MXFP4 scale code the kernel can read is
// <= 128 (FusedParams::small_mx_scales).
__global__ void __launch_bounds__(256) max_byte(const std::uint8_t* p, std::int64_t n, std::int64_t stride,
                                                unsigned* out) {
  p += blockIdx.y * stride;
  unsigned m = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t{256} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * 256)
    m = max(m, static_cast<unsigned>(p[i]));
  for (int o = 16; o > 0; o /= 2) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
  if (threadIdx.x % 32 == 0 && m != 0) atomicMax(out, m);
}

cudaError_t launch_max_byte(const std::uint8_t* p, std::int64_t n, std::int64_t stride, int experts, unsigned* out,
                            cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>((n + 255) / 256, 256));
  max_byte<<<dim3(blocks, static_cast<unsigned>(experts)), 256, 0, stream>>>(p, n, stride, out);
  return cudaGetLastError();
}

// A GLU plan's weight scales in the kernel's row order (glu_scales.hpp).
// One thread per 4-byte word of the copy: kernel row p, scale columns 4q..4q+3 (contiguous in the
// blocked layout; padding columns and rows past 2I are zero). The source's 4 bytes are one word
// when aligned (blocked sources always; linear ones with rows of a multiple of 4 bytes).
__global__ void __launch_bounds__(256) glu_scales_to_blocked(GluScaleJob j) {
  const int e = blockIdx.y;
  const int padded_rows = (2 * j.width + 127) / 128 * 128, col_words = (j.cols + 3) / 4;
  const int total = padded_rows * col_words;  // < 2^31: checked by the launch
  const bool word_rows = j.layout == ScaleLayout::blocked || j.cols % 4 == 0;
  for (int u = blockIdx.x * blockDim.x + threadIdx.x; u < total; u += gridDim.x * blockDim.x) {
    const int p = u / col_words, q = u % col_words;
    const int half = (p % 16) / 8, i = 8 * (p / 16) + p % 8;
    std::uint32_t v = 0;
    if (i < j.width) {
      const std::uint8_t* src = (half == 0 || j.gate_up != static_cast<int>(GateUpLayout::separate) ? j.first : j.second) +
                                e * j.expert_stride;
      const int row = j.gate_up == static_cast<int>(GateUpLayout::stacked)       ? half * j.width + i
                      : j.gate_up == static_cast<int>(GateUpLayout::interleaved) ? 2 * i + half
                                                                                 : i;
      const std::uint8_t* at = src + formats::detail::scale_offset<int>(j.layout, row, 4 * q, j.cols);
      if (word_rows && (reinterpret_cast<std::uintptr_t>(at) & 3) == 0 && 4 * q + 4 <= j.cols) {
        v = *reinterpret_cast<const std::uint32_t*>(at);
      } else {
        for (int b = 0; b < 4 && 4 * q + b < j.cols; ++b) v |= static_cast<std::uint32_t>(at[b]) << (8 * b);
      }
    }
    *reinterpret_cast<std::uint32_t*>(j.dst + e * j.dst_expert_stride + formats::detail::blocked_offset<int>(p, 4 * q, j.cols)) = v;
  }
}

cudaError_t launch_glu_scales(const GluScaleJob& job, int experts, cudaStream_t stream) {
  const std::int64_t words = static_cast<std::int64_t>(formats::blocked_scale_bytes(2 * job.width, job.cols)) / 4;
  if (words >= (std::int64_t{1} << 31)) return cudaErrorInvalidValue;  // (validation keeps 2I x K/vec far below)
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>((words + 255) / 256, 2048)), static_cast<unsigned>(experts));
  glu_scales_to_blocked<<<grid, 256, 0, stream>>>(job);
  return cudaGetLastError();
}

template cudaError_t convert_expert_scales<Format::nvfp4>(const ScaleConversion*, int, int, int, cudaStream_t);
template cudaError_t convert_expert_scales<Format::mxfp4>(const ScaleConversion*, int, int, int, cudaStream_t);

}  // namespace fp4gemm::detail::sm90
