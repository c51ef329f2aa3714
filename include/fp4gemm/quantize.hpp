// fp4gemm GPU activation quantiser: bf16 / f16 / f32 rows -> packed e2m1 + block scales (NVFP4 with
// an FP32 global scale, or MXFP4), bit for bit the rule of the host quantiser
// fp4gemm::formats::quantize (see formats.hpp), in either scale layout. One memory-bound kernel;
// no host synchronisation, no allocation, graph-capturable.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm {

enum class InputType { bf16, f16, f32 };
const char* to_string(InputType t);

struct QuantizeArgs {
  Format format = Format::nvfp4;
  InputType input = InputType::bf16;
  const void* x = nullptr;  // [rows, k], row stride ldx elements, device memory
  std::int64_t ldx = 0;     // elements; 0: k
  std::int64_t rows = 0, k = 0;  // k: a multiple of 16 (nvfp4) / 32 (mxfp4)
  void* packed = nullptr;        // [rows, k/2] bytes, row stride ld_packed
  std::int64_t ld_packed = 0;    // bytes; 0: k/2
  void* scales = nullptr;        // linear [rows, k/vec] (row stride k/vec) or blocked ([rows padded
                                 // to 128, k/vec padded to 4] atoms; the padding is written as 0)
  ScaleLayout scale_layout = ScaleLayout::linear;
  // NVFP4 only: the global scale gs (values are e2m1 * S * gs), a device FP32 read at run time
  // (e.g. a calibrated input_scale), or the scalar when null. Finite and > 0 (a device value that
  // is not quantises nothing sensible: its blocks get scale code 0x7F, NaN).
  const float* global_scale_device = nullptr;
  float global_scale = 1.0f;
};

// Quantises on `stream` (the current device's). Arguments are validated (fp4gemm::Error naming the
// field); pointers must be device memory of the current device.
void quantize_activations(const QuantizeArgs& args, cudaStream_t stream = nullptr);

namespace detail {
// Without the device-pointer checks (callers that own their buffers, e.g. the expert layer).
void launch_quantize(const QuantizeArgs& args, cudaStream_t stream);
// The same for rows [*row_begin, *row_end) only (device ints, clamped to [0, rows); linear scale
// layout): e.g. the expert layer's sorted intermediate, whose rows past its routing's offsets are
// unused.
void launch_quantize(const QuantizeArgs& args, cudaStream_t stream, const int* row_begin, const int* row_end);
// The expert layer's launches, as programmatic dependents of the launch before them (the routing, or GEMM1): the
// kernel lets its own dependent start at once and waits for its predecessor (griddepcontrol.wait) first
// (wait_first: it reads that one's output -- GEMM1's intermediate, the routing's offsets) or last (wait_last: it reads
// only what was complete before its predecessor started -- the caller's tokens, a host global scale -- and waits
// so that its completion still implies the predecessor's, which the launches after it rely on).
enum class QuantizeChain { none, wait_first, wait_last };
void launch_quantize(const QuantizeArgs& args, cudaStream_t stream, const int* row_begin, const int* row_end,
                     QuantizeChain chain);
}  // namespace detail

}  // namespace fp4gemm
