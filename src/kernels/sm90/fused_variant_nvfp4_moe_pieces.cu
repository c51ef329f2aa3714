// The fused kernel's nvfp4_moe_pieces instantiation (fused_variants.cuh).
#include "kernels/sm90/fused_kernel.cuh"

FP4GEMM_DEFINE_FUSED_VARIANT(nvfp4_moe_pieces)
