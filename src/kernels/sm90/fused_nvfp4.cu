// Instantiates the fused kernel for NVFP4 (one translation unit per format).
#define FP4GEMM_FUSED_INSTANTIATE
#include "kernels/sm90/fused_kernel.cuh"

namespace fp4gemm::detail::sm90 {
FP4GEMM_FUSED_INSTANTIATION(, Format::nvfp4)
}  // namespace fp4gemm::detail::sm90
