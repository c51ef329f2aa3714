// The MoE layer's top-k combine (kernels/combine.hpp): the combine kernel over the layer's rows.
#include "kernels/combine.hpp"

#include <type_traits>

#include "kernels/combine.cuh"
#include "kernels/launch_config.hpp"

namespace fp4gemm::detail {

namespace {

// Pair i's row: y + row_of[i] * ld (row_of null: row i).
struct LayerRows {
  const __nv_bfloat16* y;
  long long ld;
  const int* row_of;
  __device__ __forceinline__ const __nv_bfloat16* operator()(long long i) const {
    return y + (row_of != nullptr ? static_cast<long long>(row_of[i]) : i) * ld;
  }
};

}  // namespace

cudaError_t launch_combine(const __nv_bfloat16* y, long long ld_y, int hidden, const int* row_of, const void* ids,
                    bool ids_int64, const void* weights, bool weights_bf16, int k, int experts, int tokens,
                    __nv_bfloat16* out, long long ld_out, int multiprocessors, cudaStream_t s,
                    const int* token_count, const void* bias, bool bias_f32) {
  const unsigned grid = combine_grid(tokens, hidden, multiprocessors);
  const LayerRows rows{y, ld_y, row_of};
  auto go = [&](auto id_tag, auto wt_tag) {
    using Id = decltype(id_tag);
    using Wt = decltype(wt_tag);
    auto with_bias = [&](auto has_bias) {
      // A programmatic dependent of the launch before it (the layer's GEMM2, or the caller's kernel): it waits for
      // that grid before it reads anything (combine.cuh).
      const LaunchConfig l(dim3(grid), dim3(256), 0, s);
      return cudaLaunchKernelEx(&l.config, combine_kernel<Id, Wt, LayerRows, decltype(has_bias)::value>, rows, hidden,
                         static_cast<const Id*>(ids), static_cast<const Wt*>(weights), k, experts, tokens, out,
                         static_cast<long long>(ld_out), token_count, bias, bias_f32 ? 1 : 0);
    };
    return bias != nullptr ? with_bias(std::true_type{}) : with_bias(std::false_type{});
  };
  if (ids_int64) return weights_bf16 ? go(0LL, __nv_bfloat16{}) : go(0LL, 0.0f);
  return weights_bf16 ? go(0, __nv_bfloat16{}) : go(0, 0.0f);
}

}  // namespace fp4gemm::detail
