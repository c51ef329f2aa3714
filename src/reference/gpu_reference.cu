// The GPU reference kernel: exact dequantisation in FP32, FP32 accumulation in K order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "formats/scale_layout.hpp"
#include "reference/gpu_reference.hpp"

#include "host/core/cuda_check.hpp"

namespace fp4gemm::detail {
namespace {

__device__ float e2m1_value(unsigned nibble) {
  constexpr float kMagnitude[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float v = kMagnitude[nibble & 7u];
  return (nibble & 8u) ? -v : v;
}

__device__ float scale_value(Format format, unsigned code) {
  if (format == Format::mxfp4) {
    if (code == 0xFFu) return __int_as_float(0x7FC00000);
    return code == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(code) << 23);
  }
  if ((code & 0x7Fu) == 0x7Fu) return __int_as_float(0x7FC00000);
  const unsigned exponent = (code >> 3) & 0xFu, mantissa = code & 7u;
  const float magnitude = exponent == 0 ? ldexpf(static_cast<float>(mantissa), -9)
                                        : ldexpf(1.f + mantissa / 8.f, static_cast<int>(exponent) - 7);
  return (code & 0x80u) ? -magnitude : magnitude;
}

__device__ void reference_element(const GroupParams& g, std::int64_t m, std::int64_t n, Format format,
                                  ScaleLayout layout, OutType out_type) {
  const int vec = format == Format::nvfp4 ? 16 : 32;
  const std::int64_t cols = g.k / vec;
  const std::uint8_t* a_row = g.a + m * g.lda;
  const std::uint8_t* b_row = g.b + n * g.ldb;
  float acc = 0.f;
  for (int kb = 0; kb < cols; ++kb) {
    const float sa = scale_value(format, g.sfa[formats::detail::scale_offset(layout, m, std::int64_t{kb}, cols)]);
    const float sb = scale_value(format, g.sfb[formats::detail::scale_offset(layout, n, std::int64_t{kb}, cols)]);
    for (int k = kb * vec; k < (kb + 1) * vec; ++k) {
      const unsigned a = (a_row[k / 2] >> ((k & 1) * 4)) & 0xFu;
      const unsigned b = (b_row[k / 2] >> ((k & 1) * 4)) & 0xFu;
      // Each dequantised value is exact in FP32 (as in bf16); the product is exact too.
      acc = fmaf(e2m1_value(a) * sa, e2m1_value(b) * sb, acc);
    }
  }
  const float alpha = g.alpha_device ? *g.alpha_device : g.alpha;
  const float out = acc * alpha;
  const std::int64_t idx = m * g.ldc + n;
  switch (out_type) {
    case OutType::f16: static_cast<__half*>(g.c)[idx] = __float2half_rn(out); break;
    case OutType::bf16: static_cast<__nv_bfloat16*>(g.c)[idx] = __float2bfloat16_rn(out); break;
    case OutType::f32: static_cast<float*>(g.c)[idx] = out; break;
  }
}

// Grid: x covers N, y and z stride over M and the groups (each at most 65535 blocks), so any
// group count and M fit.
__global__ void reference_gemm_kernel(const GroupParams* groups, int num_groups, Format format,
                                      ScaleLayout layout, OutType out_type) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  for (int z = blockIdx.z; z < num_groups; z += gridDim.z) {
    const GroupParams g = groups[z];
    if (n >= g.n) continue;
    for (std::int64_t m = blockIdx.y * blockDim.y + threadIdx.y; m < g.m;
         m += static_cast<std::int64_t>(gridDim.y) * blockDim.y)
      reference_element(g, m, n, format, layout, out_type);
  }
}

}  // namespace

cudaError_t launch_reference_gemm(const GroupParams* d_groups, int num_groups, int max_m, int max_n,
                                  Format format, ScaleLayout layout, OutType out_type, cudaStream_t stream) {
  if (num_groups == 0 || max_m == 0 || max_n == 0) return cudaSuccess;
  constexpr unsigned kMaxGridYZ = 65535;
  const dim3 block(32, 8);
  const dim3 grid((static_cast<unsigned>(max_n) + 31) / 32, std::min((static_cast<unsigned>(max_m) + 7) / 8, kMaxGridYZ),
                  std::min<unsigned>(num_groups, kMaxGridYZ));
  reference_gemm_kernel<<<grid, block, 0, stream>>>(d_groups, num_groups, format, layout, out_type);
  return cudaGetLastError();
}

namespace {

class ReferencePlan final : public KernelPlan {
 public:
  explicit ReferencePlan(const KernelContext& c)
      : groups_(c.d_groups), count_(static_cast<int>(c.groups.size())), max_m_(c.max_m), max_n_(c.max_n),
        format_(c.options.format), layout_(c.options.scale_layout), out_(c.options.out_type) {}
  void run(cudaStream_t stream) const override {
    const cudaError_t e = launch_reference_gemm(groups_, count_, max_m_, max_n_, format_, layout_, out_, stream);
    if (e != cudaSuccess) throw_cuda(e, "reference_gemm_kernel launch", "run");
  }
  std::string describe() const override { return ""; }
  std::size_t device_bytes() const override { return 0; }  // reads the plan's group table only

 private:
  const GroupParams* groups_;
  int count_, max_m_, max_n_;
  Format format_;
  ScaleLayout layout_;
  OutType out_;
};

}  // namespace

std::unique_ptr<KernelPlan> make_reference_plan(const KernelContext& context) {
  return std::make_unique<ReferencePlan>(context);
}

}  // namespace fp4gemm::detail
