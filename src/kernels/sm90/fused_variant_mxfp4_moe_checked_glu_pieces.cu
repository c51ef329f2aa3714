// The fused kernel's mxfp4_moe_checked_glu_pieces instantiation (fused_variants.cuh).
#include "kernels/sm90/fused_kernel.cuh"

FP4GEMM_DEFINE_FUSED_VARIANT(mxfp4_moe_checked_glu_pieces)
