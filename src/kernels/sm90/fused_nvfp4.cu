// The NVFP4 launchers and pre-pass kernels (the GEMM kernel instantiations have a translation unit
// each: fused_variants.cuh, fused_variant_*.cu).
#define FP4GEMM_FUSED_INSTANTIATE
#include "kernels/sm90/fused_kernel.cuh"

namespace fp4gemm::detail::sm90 {
FP4GEMM_FUSED_INSTANTIATION(, Format::nvfp4)
}  // namespace fp4gemm::detail::sm90
