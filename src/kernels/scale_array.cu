// The expert layer's alpha folding (kernels/combine.hpp: launch_scale_array).
#include "kernels/combine.hpp"

namespace fp4gemm::detail {

namespace {

// out[e] = in[e] * s (FP32, rounded once): a checkpoint's per-expert weight scale with the
// activations' global scale folded in.
__global__ void scale_array(const float* __restrict__ in, float s, float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __fmul_rn(in[i], s);
}

}  // namespace

cudaError_t launch_scale_array(const float* in, float s, float* out, int n, cudaStream_t stream) {
  scale_array<<<(n + 255) / 256, 256, 0, stream>>>(in, s, out, n);
  return cudaGetLastError();
}

}  // namespace fp4gemm::detail
