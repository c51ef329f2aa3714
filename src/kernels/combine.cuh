// The MoE layer's top-k combine as a device template over where each pair's row lives: the layer
// reads its own routed rows (kernels/combine.cu), the expert-parallel combine reads the rows where
// the experts' ranks left them, in their peer-mapped buffers (kernels/ep.cu). Internal.
#pragma once
#include <cuda_bf16.h>

namespace fp4gemm::detail {

// out[t, h] = sum_j w[t, j] * row(t * k + j)[h] over j = 0..k-1 in order, skipping ids outside
// [0, experts) and pairs whose row is null, each step one FP32 fma (acc = fma(w, y, acc), from acc
// = 0), rounded once to bf16. A thread owns 8 columns of one token (16-byte loads and stores) and
// has up to kBatch of its rows' loads in flight before their fmas (the fmas keep their order).
// tokens_at (device, may be null): tokens past it are absent (their out rows are not written).
template <typename Id, typename Wt, typename Rows>
__global__ void __launch_bounds__(256) combine_kernel(Rows rows, int hidden, const Id* __restrict__ ids,
                                                      const Wt* __restrict__ weights, int k, int experts, int tokens,
                                                      __nv_bfloat16* __restrict__ out, long long ld_out,
                                                      const int* __restrict__ tokens_at) {
  constexpr int kBatch = 8;
  if (tokens_at != nullptr) tokens = min(tokens, max(*tokens_at, 0));
  const int chunks = hidden / 8;
  const long long total = static_cast<long long>(tokens) * chunks;
  for (long long idx = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int t = static_cast<int>(idx / chunks), c = static_cast<int>(idx % chunks);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j0 = 0; j0 < k; j0 += kBatch) {
      uint4 v[kBatch];
      float w[kBatch];
      unsigned present = 0;  // bit q: pair j0 + q contributes (a skipped pair gets no fma at all)
#pragma unroll
      for (int q = 0; q < kBatch; ++q) {
        if (j0 + q >= k) break;
        const long long i = static_cast<long long>(t) * k + j0 + q;
        const long long id = static_cast<long long>(ids[i]);
        const __nv_bfloat16* src = id >= 0 && id < experts ? rows(i) : nullptr;
        if (src == nullptr) continue;
        present |= 1u << q;
        w[q] = static_cast<float>(weights[i]);
        v[q] = *reinterpret_cast<const uint4*>(src + 8 * c);
      }
#pragma unroll
      for (int q = 0; q < kBatch; ++q) {
        if (!(present >> q & 1u)) continue;
        const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v[q]);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __bfloat1622float2(p[e]);
          acc[2 * e] = fmaf(w[q], f.x, acc[2 * e]);
          acc[2 * e + 1] = fmaf(w[q], f.y, acc[2 * e + 1]);
        }
      }
    }
    uint4 o;
    __nv_bfloat162* po = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int e = 0; e < 4; ++e) po[e] = __floats2bfloat162_rn(acc[2 * e], acc[2 * e + 1]);
    *reinterpret_cast<uint4*>(out + t * ld_out + 8 * c) = o;
  }
}

// Grid of the combine: a thread per 8 columns of a token, at most 16 blocks per SM.
inline unsigned combine_grid(int tokens, int hidden, int multiprocessors) {
  const long long total = static_cast<long long>(tokens) * (hidden / 8);
  const long long blocks = (total + 255) / 256, cap = 16LL * multiprocessors;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks < cap ? blocks : cap);
}

}  // namespace fp4gemm::detail
