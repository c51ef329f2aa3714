// The MoE layer's top-k combine as a device template over where each pair's row lives: the layer
// reads its own routed rows (kernels/combine.cu), the expert-parallel combine reads the rows where
// the experts' ranks left them, in their peer-mapped buffers (kernels/ep.cu). Internal.
#pragma once
#include <cuda_bf16.h>

#include "device/ptx/ptx.cuh"

namespace fp4gemm::detail {

// out[t, h] = sum_j w[t, j] * row(t * k + j)[h] over j = 0..k-1 in order, skipping ids outside
// [0, experts) and pairs whose row is null, each step one FP32 fma (acc = fma(w, y, acc), from acc
// = 0), rounded once to bf16. A thread owns 8 columns of one token (16-byte loads and stores) and
// has up to kBatch of its rows' loads in flight before their fmas (the fmas keep their order).
// kBatch is 4 and the bias a template flag so the kernel takes ~60 registers: it is a gather bound
// by loads in flight per SM, and 8 rows in flight with the bias code in every instantiation took
// ~100 registers (2 blocks per SM) and ran 15-70 % slower than a 36-register one-row-at-a-time
// kernel at 1024-4096 tokens (H200).
// tokens_at (device, may be null): tokens past it are absent (their out rows are not written).
// kBias: bias ([experts, hidden], bf16 or bias_f32 float) added to each pair's row in FP32 before
// its fma (acc = fma(w, y + bias[id], acc)): the layer's down-projection bias (gpt-oss).
template <typename Id, typename Wt, typename Rows, bool kBias>
__global__ void __launch_bounds__(256) combine_kernel(Rows rows, int hidden, const Id* __restrict__ ids,
                                                      const Wt* __restrict__ weights, int k, int experts, int tokens,
                                                      __nv_bfloat16* __restrict__ out, long long ld_out,
                                                      const int* __restrict__ tokens_at, const void* __restrict__ bias,
                                                      int bias_f32) {
  constexpr int kBatch = 4;
  // The layer launches it as a programmatic dependent of GEMM2 (kernels/combine.cu), whose CTAs let it launch at
  // their start: it waits for that grid before reading anything. (Without programmatic launch: a no-op.)
  ptx::wait_prerequisites();
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
      int e[kBatch];
      unsigned present = 0;  // bit q: pair j0 + q contributes (a skipped pair gets no fma at all)
#pragma unroll
      for (int q = 0; q < kBatch; ++q) {
        if (j0 + q >= k) break;
        const long long i = static_cast<long long>(t) * k + j0 + q;
        const long long id = static_cast<long long>(ids[i]);
        const __nv_bfloat16* src = id >= 0 && id < experts ? rows(i) : nullptr;
        if (src == nullptr) continue;
        present |= 1u << q;
        e[q] = static_cast<int>(id);
        w[q] = static_cast<float>(weights[i]);
        v[q] = *reinterpret_cast<const uint4*>(src + 8 * c);
      }
#pragma unroll
      for (int q = 0; q < kBatch; ++q) {
        if (!(present >> q & 1u)) continue;
        const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v[q]);
        float b[8] = {-0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f};  // (x + -0 is x)
        if constexpr (kBias) {
          const long long at = static_cast<long long>(e[q]) * hidden + 8 * c;
          if (bias_f32) {
            const float4* bp = reinterpret_cast<const float4*>(static_cast<const float*>(bias) + at);
            const float4 b0 = __ldg(bp), b1 = __ldg(bp + 1);
            b[0] = b0.x, b[1] = b0.y, b[2] = b0.z, b[3] = b0.w, b[4] = b1.x, b[5] = b1.y, b[6] = b1.z, b[7] = b1.w;
          } else {
            const uint4 bv = __ldg(reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(bias) + at));
            const __nv_bfloat162* bh = reinterpret_cast<const __nv_bfloat162*>(&bv);
#pragma unroll
            for (int h = 0; h < 4; ++h) {
              const float2 f = __bfloat1622float2(bh[h]);
              b[2 * h] = f.x, b[2 * h + 1] = f.y;
            }
          }
        }
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const float2 f = __bfloat1622float2(p[h]);
          acc[2 * h] = fmaf(w[q], f.x + b[2 * h], acc[2 * h]);
          acc[2 * h + 1] = fmaf(w[q], f.y + b[2 * h + 1], acc[2 * h + 1]);
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
