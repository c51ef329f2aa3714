// The top-k combine kernel (kernels/combine.hpp).
#include "kernels/combine.hpp"

#include <algorithm>
#include <type_traits>

namespace fp4gemm::detail {

namespace {

// A thread owns 8 columns of one token: 16-byte loads and stores. kLocal: pairs with
// local.row[i] >= 0 read local.y (the same values, the same fma order).
template <typename Id, typename Wt, bool kLocal>
__global__ void __launch_bounds__(256) combine_kernel(const __nv_bfloat16* __restrict__ y, long long ld_y, int hidden,
                                                      const int* __restrict__ row_of, const Id* __restrict__ ids,
                                                      const Wt* __restrict__ weights, int k, int experts, int tokens,
                                                      __nv_bfloat16* __restrict__ out, long long ld_out,
                                                      const int* __restrict__ token_count, CombineLocal local) {
  if (token_count != nullptr) tokens = min(tokens, max(*token_count, 0));  // the rest are absent
  const int chunks = hidden / 8;
  const long long total = static_cast<long long>(tokens) * chunks;
  for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int t = static_cast<int>(idx / chunks), c = static_cast<int>(idx % chunks);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < k; ++j) {
      const long long i = static_cast<long long>(t) * k + j;
      const long long id = static_cast<long long>(ids[i]);
      if (id < 0 || id >= experts) continue;
      const float w = static_cast<float>(weights[i]);
      const __nv_bfloat16* src;
      if (kLocal && local.row[i] >= 0) {
        src = local.y + static_cast<long long>(local.row[i]) * local.ld;
      } else {
        const long long row = row_of != nullptr ? static_cast<long long>(row_of[i]) : i;
        src = y + row * ld_y;
      }
      const uint4 v = *reinterpret_cast<const uint4*>(src + 8 * c);
      const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __bfloat1622float2(p[q]);
        acc[2 * q] = fmaf(w, f.x, acc[2 * q]);
        acc[2 * q + 1] = fmaf(w, f.y, acc[2 * q + 1]);
      }
    }
    uint4 o;
    __nv_bfloat162* po = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int q = 0; q < 4; ++q) po[q] = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
    *reinterpret_cast<uint4*>(out + t * ld_out + 8 * c) = o;
  }
}

}  // namespace

void launch_combine(const __nv_bfloat16* y, long long ld_y, int hidden, const int* row_of, const void* ids,
                    bool ids_int64, const void* weights, bool weights_bf16, int k, int experts, int tokens,
                    __nv_bfloat16* out, long long ld_out, int multiprocessors, cudaStream_t s,
                    const int* token_count, CombineLocal local) {
  const long long total = static_cast<long long>(tokens) * (hidden / 8);
  const unsigned grid = static_cast<unsigned>(std::max<long long>(1, std::min<long long>((total + 255) / 256, 16LL * multiprocessors)));
  auto go = [&](auto id_tag, auto wt_tag, auto local_tag) {
    using Id = decltype(id_tag);
    using Wt = decltype(wt_tag);
    combine_kernel<Id, Wt, decltype(local_tag)::value><<<grid, 256, 0, s>>>(
        y, ld_y, hidden, row_of, static_cast<const Id*>(ids), static_cast<const Wt*>(weights), k, experts, tokens, out,
        ld_out, token_count, local);
  };
  auto with_local = [&](auto id_tag, auto wt_tag) {
    if (local.row != nullptr) go(id_tag, wt_tag, std::true_type{});
    else go(id_tag, wt_tag, std::false_type{});
  };
  if (ids_int64) {
    if (weights_bf16) with_local(0LL, __nv_bfloat16{}); else with_local(0LL, 0.0f);
  } else {
    if (weights_bf16) with_local(0, __nv_bfloat16{}); else with_local(0, 0.0f);
  }
}

}  // namespace fp4gemm::detail
