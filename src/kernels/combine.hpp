// The MoE layer's top-k combine (one kernel): used by MoeLayer, fp4gemm::moe_combine and the
// expert-parallel exchange. Internal.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace fp4gemm::detail {

// Pairs read from a second array: pair i's row is local.y + local.row[i] * local.ld when
// local.row[i] >= 0 (the expert-parallel combine reads the pairs that stayed on their rank from
// the local layer's output instead of a copy in the exchange buffer).
struct CombineLocal {
  const __nv_bfloat16* y = nullptr;
  long long ld = 0;
  const int* row = nullptr;
};

// out[t, h] = sum_j w[t, j] * y[row_of[t * k + j], h] over j = 0..k-1 in order (row_of null: row
// t * k + j), skipping ids outside [0, experts), each step one FP32 fma (acc = fma(w, y, acc),
// from acc = 0), rounded once to bf16. token_count (device, may be null): tokens past it are
// absent (their out rows are not written).
void launch_combine(const __nv_bfloat16* y, long long ld_y, int hidden, const int* row_of, const void* ids,
                    bool ids_int64, const void* weights, bool weights_bf16, int k, int experts, int tokens,
                    __nv_bfloat16* out, long long ld_out, int multiprocessors, cudaStream_t s,
                    const int* token_count = nullptr, CombineLocal local = {});

}  // namespace fp4gemm::detail
