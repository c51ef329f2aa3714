// fp4gemm::quantize_activations and the layer's quantiser launches (fp4gemm/quantize.hpp): the
// checks, then the kernels (kernels/quantize.cu, through the registry).
#include <cmath>
#include <cstdint>
#include <string>

#include "formats/scale_layout.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/quantize.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/validate.hpp"
#include "host/kernel_registry.hpp"  // (kernels/quantize.hpp)

namespace fp4gemm {

const char* to_string(InputType t) { return t == InputType::bf16 ? "bf16" : t == InputType::f16 ? "f16" : "f32"; }

namespace {

void validate(const QuantizeArgs& a) {
  if (a.format != Format::nvfp4 && a.format != Format::mxfp4) throw Error("format", -1, "unknown format");
  if (a.input != InputType::bf16 && a.input != InputType::f16 && a.input != InputType::f32)
    throw Error("input", -1, "unknown input type");
  if (a.scale_layout != ScaleLayout::linear && a.scale_layout != ScaleLayout::blocked)
    throw Error("scale_layout", -1, "unknown scale layout");
  const int vec = scale_block_size(a.format);
  if (a.rows < 0) throw Error("rows", -1, "must be >= 0 (got " + std::to_string(a.rows) + ")");
  if (a.k < 0 || a.k % vec != 0)
    throw Error("k", -1, "k = " + std::to_string(a.k) + " must be a non-negative multiple of " + std::to_string(vec) +
                             " for " + to_string(a.format));
  const std::int64_t esize = a.input == InputType::f32 ? 4 : 2;
  if (a.ldx < a.k || (a.ldx * esize) % 16 != 0)
    throw Error("ldx", -1, "row stride " + std::to_string(a.ldx) + " elements must be >= k and a multiple of 16 bytes");
  if (a.ld_packed < a.k / 2 || a.ld_packed % 8 != 0)
    throw Error("ld_packed", -1, "row stride " + std::to_string(a.ld_packed) + " bytes must be >= k/2 and a multiple of 8");
  if (a.format == Format::mxfp4 && (a.global_scale_device != nullptr || a.global_scale != 1.0f))
    throw Error("global_scale", -1, "only nvfp4 has a global scale (mxfp4's scales are powers of two)");
  if (a.global_scale_device == nullptr && (!(a.global_scale > 0.0f) || std::isinf(a.global_scale)))
    throw Error("global_scale", -1, "must be finite and > 0 (got " + std::to_string(a.global_scale) + ")");
  if (a.global_scale_device != nullptr && reinterpret_cast<std::uintptr_t>(a.global_scale_device) % 4 != 0)
    throw Error("global_scale_device", -1, "pointer is not 4-byte aligned");
  if (a.rows == 0 || a.k == 0) return;
  if (a.x == nullptr || reinterpret_cast<std::uintptr_t>(a.x) % 16 != 0)
    throw Error("x", -1, "must be a 16-byte aligned device pointer");
  if (a.packed == nullptr || reinterpret_cast<std::uintptr_t>(a.packed) % 16 != 0)
    throw Error("packed", -1, "must be a 16-byte aligned device pointer");
  if (a.scales == nullptr) throw Error("scales", -1, "null pointer");
}

QuantizeArgs resolved(const QuantizeArgs& in) {
  QuantizeArgs a = in;
  if (a.ldx == 0) a.ldx = a.k;
  if (a.ld_packed == 0) a.ld_packed = a.k / 2;
  return a;
}

}  // namespace

namespace detail {

void launch_quantize(const QuantizeArgs& in, cudaStream_t stream) { launch_quantize(in, stream, nullptr, nullptr); }

void launch_quantize(const QuantizeArgs& in, cudaStream_t stream, const int* row_begin, const int* row_end) {
  launch_quantize(in, stream, row_begin, row_end, QuantizeChain::none);
}

void launch_quantize(const QuantizeArgs& in, cudaStream_t stream, const int* row_begin, const int* row_end,
                     QuantizeChain chain) {
  const QuantizeArgs a = resolved(in);
  validate(a);
  // wait_last only where the kernel may read at once and its thread 0 has a row (its proof that the grid ends after its
  // predecessor, kernels/quantize.cu): a device global scale may be the predecessor's output, and row bounds may leave
  // thread 0 without a row -- both wait first.
  if (chain == QuantizeChain::wait_last && (a.global_scale_device != nullptr || row_begin != nullptr || row_end != nullptr))
    chain = QuantizeChain::wait_first;
  if (a.rows == 0 || a.k == 0) return;
  FP4GEMM_CUDA_CHECK(launch_quantize_kernel(a, row_begin, row_end, stream, chain), "quantize_activations");
}

}  // namespace detail

void quantize_activations(const QuantizeArgs& in, cudaStream_t stream) {
  const QuantizeArgs a = resolved(in);
  validate(a);
  if (a.rows == 0 || a.k == 0) return;
  int device = 0;
  FP4GEMM_CUDA_CHECK(cudaGetDevice(&device), "quantize_activations");
  const std::int64_t esize = a.input == InputType::f32 ? 4 : 2;
  const int vec = scale_block_size(a.format);
  detail::check_device_buffer("x", -1, a.x, ((a.rows - 1) * a.ldx + a.k) * esize, device);
  detail::check_device_buffer("packed", -1, a.packed, (a.rows - 1) * a.ld_packed + a.k / 2, device);
  detail::check_device_buffer("scales", -1, a.scales,
                              static_cast<std::int64_t>(formats::scale_bytes(a.scale_layout, a.rows, a.k / vec)), device);
  if (a.global_scale_device != nullptr)
    detail::check_device_buffer("global_scale_device", -1, a.global_scale_device, 4, device);
  detail::launch_quantize(a, stream);
}

}  // namespace fp4gemm
