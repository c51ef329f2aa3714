// The GPU reference kernel: exact dequantisation in FP32, FP32 accumulation in K order; dual GEMMs
// (Options::epilogue) take both products that way and the fast kernel's FP32 activation
// (device/glu.hpp), rounded once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "device/glu.hpp"
#include "formats/scale_layout.hpp"
#include "reference/gpu_reference.hpp"

#include "host/core/cuda_check.hpp"
#include "host/core/device_memory.hpp"

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

// Row m of A against row n of B (scales sfb), FP32 fmaf in K order: each dequantised value and
// each product is exact in FP32 (as in bf16).
__device__ float reference_dot(const std::uint8_t* a_row, const std::uint8_t* sfa, std::int64_t m,
                               const std::uint8_t* b_row, const std::uint8_t* sfb, std::int64_t n, std::int64_t k,
                               Format format, ScaleLayout layout) {
  const int vec = format == Format::nvfp4 ? 16 : 32;
  const std::int64_t cols = k / vec;
  float acc = 0.f;
  for (int kb = 0; kb < cols; ++kb) {
    const float sa = scale_value(format, sfa[formats::detail::scale_offset(layout, m, std::int64_t{kb}, cols)]);
    const float sb = scale_value(format, sfb[formats::detail::scale_offset(layout, n, std::int64_t{kb}, cols)]);
    for (int i = kb * vec; i < (kb + 1) * vec; ++i) {
      const unsigned x = (a_row[i / 2] >> ((i & 1) * 4)) & 0xFu;
      const unsigned y = (b_row[i / 2] >> ((i & 1) * 4)) & 0xFu;
      acc = fmaf(e2m1_value(x) * sa, e2m1_value(y) * sb, acc);
    }
  }
  return acc;
}

__device__ void store_out(void* c, std::int64_t idx, float out, OutType out_type) {
  switch (out_type) {
    case OutType::f16: static_cast<__half*>(c)[idx] = __float2half_rn(out); break;
    case OutType::bf16: static_cast<__nv_bfloat16*>(c)[idx] = __float2bfloat16_rn(out); break;
    case OutType::f32: static_cast<float*>(c)[idx] = out; break;
  }
}

__device__ void reference_element(const GroupParams& g, std::int64_t m, std::int64_t n, Format format,
                                  ScaleLayout layout, OutType out_type) {
  const float acc = reference_dot(g.a + m * g.lda, g.sfa, m, g.b + n * g.ldb, g.sfb, n, g.k, format, layout);
  const float alpha = g.alpha_device ? *g.alpha_device : g.alpha;
  store_out(g.c, m * g.ldc + n, acc * alpha, out_type);
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

// One group of a dual GEMM: the user's GroupDesc fields the reference reads (b and b_up with
// their own scales; the fast kernel's table instead sees both as one 2N-row window).
struct DualReferenceGroup {
  int m, n, k;
  const std::uint8_t *a, *b, *b_up, *sfa, *sfb, *sfb_up;
  std::int64_t lda, ldb, ldc;
  void* c;
  const float *alpha_device, *alpha_up_device;
  float alpha, alpha_up;
};

struct DualActivationArgs {
  int kind;  // GluKind
  float alpha, limit;
};

// C[m, n] = act(alpha (A B^T)[m, n], alpha_up (A B_up^T)[m, n]) in FP32 (glu_activate: the fast
// kernel's epilogue formula and operations), rounded once. Same grid as reference_gemm_kernel.
__global__ void reference_dual_kernel(const DualReferenceGroup* groups, int num_groups, Format format,
                                      ScaleLayout layout, OutType out_type, DualActivationArgs act) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  for (int z = blockIdx.z; z < num_groups; z += gridDim.z) {
    const DualReferenceGroup g = groups[z];
    if (n >= g.n) continue;
    for (std::int64_t m = blockIdx.y * blockDim.y + threadIdx.y; m < g.m;
         m += static_cast<std::int64_t>(gridDim.y) * blockDim.y) {
      const std::uint8_t* a_row = g.a + m * g.lda;
      const float gate = reference_dot(a_row, g.sfa, m, g.b + n * g.ldb, g.sfb, n, g.k, format, layout);
      const float up = reference_dot(a_row, g.sfa, m, g.b_up + n * g.ldb, g.sfb_up, n, g.k, format, layout);
      const float alpha = g.alpha_device ? *g.alpha_device : g.alpha;
      const float alpha_up = g.alpha_up_device ? *g.alpha_up_device : g.alpha_up;
      store_out(g.c, m * g.ldc + n, glu_activate(act.kind, gate * alpha, up * alpha_up, act.alpha, act.limit), out_type);
    }
  }
}

constexpr unsigned kMaxGridYZ = 65535;

dim3 reference_grid(int max_m, int max_n, int num_groups) {
  return dim3((static_cast<unsigned>(max_n) + 31) / 32, std::min((static_cast<unsigned>(max_m) + 7) / 8, kMaxGridYZ),
              std::min<unsigned>(num_groups, kMaxGridYZ));
}

}  // namespace

cudaError_t launch_reference_gemm(const GroupParams* d_groups, int num_groups, int max_m, int max_n,
                                  Format format, ScaleLayout layout, OutType out_type, cudaStream_t stream) {
  if (num_groups == 0 || max_m == 0 || max_n == 0) return cudaSuccess;
  reference_gemm_kernel<<<reference_grid(max_m, max_n, num_groups), dim3(32, 8), 0, stream>>>(d_groups, num_groups,
                                                                                              format, layout, out_type);
  return cudaGetLastError();
}

namespace {

class ReferencePlan final : public KernelPlan {
 public:
  explicit ReferencePlan(const KernelContext& c)
      : groups_(c.d_groups), count_(static_cast<int>(c.groups.size())), max_m_(c.max_m), max_n_(c.max_n),
        format_(c.options.format), layout_(c.options.scale_layout), out_(c.options.out_type) {
    if (c.options.epilogue == Epilogue::none || c.groups.empty()) return;
    // A dual GEMM: its own table of the groups' gate and up operands (validated by the plan).
    std::vector<DualReferenceGroup> table;
    for (const GroupDesc& g : c.groups)
      table.push_back({g.m, g.n, g.k, static_cast<const std::uint8_t*>(g.a), static_cast<const std::uint8_t*>(g.b),
                       static_cast<const std::uint8_t*>(g.b_up), static_cast<const std::uint8_t*>(g.sfa),
                       static_cast<const std::uint8_t*>(g.sfb), static_cast<const std::uint8_t*>(g.sfb_up), g.lda,
                       g.ldb, g.ldc, g.c, g.alpha_device, g.alpha_up_device, g.alpha, g.alpha_up});
    act_ = {c.options.epilogue == Epilogue::silu ? kGluSilu : kGluSwigluOai, c.options.swiglu_alpha,
            c.options.swiglu_limit};
    dual_bytes_ = table.size() * sizeof(DualReferenceGroup);
    dual_ = memory_.upload(table, "plan");
  }
  void run(cudaStream_t stream) const override {
    if (dual_ != nullptr) {
      if (count_ == 0 || max_m_ == 0 || max_n_ == 0) return;
      reference_dual_kernel<<<reference_grid(max_m_, max_n_, count_), dim3(32, 8), 0, stream>>>(
          dual_, count_, format_, layout_, out_, act_);
      if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) throw_cuda(e, "reference_dual_kernel launch", "run");
      return;
    }
    const cudaError_t e = launch_reference_gemm(groups_, count_, max_m_, max_n_, format_, layout_, out_, stream);
    if (e != cudaSuccess) throw_cuda(e, "reference_gemm_kernel launch", "run");
  }
  std::string describe() const override { return dual_ != nullptr ? "dual GEMM, FP32 activation" : ""; }
  std::size_t device_bytes() const override { return dual_bytes_; }  // (plain: the plan's group table only)

 private:
  const GroupParams* groups_;
  int count_, max_m_, max_n_;
  Format format_;
  ScaleLayout layout_;
  OutType out_;
  DeviceAllocations memory_;  // the dual table
  const DualReferenceGroup* dual_ = nullptr;
  std::size_t dual_bytes_ = 0;
  DualActivationArgs act_{};
};

}  // namespace

std::unique_ptr<KernelPlan> make_reference_plan(const KernelContext& context) {
  return std::make_unique<ReferencePlan>(context);
}

}  // namespace fp4gemm::detail
