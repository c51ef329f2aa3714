// The MoE layer's top-k combine over the layer's rows (MoeLayer, fp4gemm::moe_combine); the
// expert-parallel combine runs the same kernel template (kernels/combine.cuh) over peers' rows.
// Internal.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace fp4gemm::detail {

// out[t, h] = sum_j w[t, j] * y[row_of[t * k + j], h] over j = 0..k-1 in order (row_of null: row
// t * k + j), skipping ids outside [0, experts), each step one FP32 fma (acc = fma(w, y, acc),
// from acc = 0), rounded once to bf16. token_count (device, may be null): tokens past it are
// absent (their out rows are not written). bias (may be null): [experts, hidden], bf16 or f32,
// added to each pair's row in FP32 before its fma (combine_kernel). Returns the launch's error.
cudaError_t launch_combine(const __nv_bfloat16* y, long long ld_y, int hidden, const int* row_of, const void* ids,
                    bool ids_int64, const void* weights, bool weights_bf16, int k, int experts, int tokens,
                    __nv_bfloat16* out, long long ld_out, int multiprocessors, cudaStream_t s,
                    const int* token_count = nullptr, const void* bias = nullptr, bool bias_f32 = false);

// out[e] = in[e] * s for e in [0, n) (FP32, rounded once): the layer's per-expert alphas with an
// activation global scale folded in (kernels/scale_array.cu). Returns the launch's error.
cudaError_t launch_scale_array(const float* in, float s, float* out, int n, cudaStream_t stream);

}  // namespace fp4gemm::detail
