// Peers: a simple dequantise-to-bf16 kernel, cuBLAS bf16 per group / grouped, per-group streams;
// the elementwise GLU kernel of the unfused dual GEMM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "device/glu.hpp"
#include "formats/scale_layout.hpp"
#include "peers.hpp"

namespace fp4gemm::cli {
namespace {

constexpr int kDequantThreads = 256;

__device__ inline float e2m1_value(std::uint32_t nibble) {
  const std::uint32_t e = (nibble >> 1) & 3u, m = nibble & 1u;
  // e == 0: 0 or 0.5; otherwise (1 + m/2) * 2^(e-1), built from its bits.
  const float v = e == 0 ? 0.5f * static_cast<float>(m) : __uint_as_float(((e + 126u) << 23) | (m << 22));
  return (nibble & 8u) ? -v : v;
}

__device__ inline float scale_value(Format format, std::uint32_t code) {
  const float nan = __uint_as_float(0x7FC00000u);
  if (format == Format::mxfp4) {  // UE8M0: 2^(code - 127)
    if (code == 0xFFu) return nan;
    return code == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(code << 23);
  }
  if ((code & 0x7Fu) == 0x7Fu) return nan;  // E4M3, bias 7, no infinities
  const std::uint32_t e = (code >> 3) & 0xFu, m = code & 7u;
  const float v = e == 0 ? static_cast<float>(m) * (1.0f / 512.0f) : __uint_as_float(((e + 120u) << 23) | (m << 20));
  return (code & 0x80u) ? -v : v;
}

// One thread per 8 elements: 4 packed bytes in, 16 bytes of bf16 out; all 8 share one scale.
__global__ void dequantize_kernel(const std::uint8_t* packed, std::int64_t ld, const std::uint8_t* scales,
                                  int rows, int k, Format format, ScaleLayout layout,
                                  __nv_bfloat16* out) {
  const std::int64_t chunks_per_row = k / 8;
  const std::int64_t total = static_cast<std::int64_t>(rows) * chunks_per_row;
  const int vec = format == Format::nvfp4 ? 16 : 32;
  const std::int64_t cols = k / vec;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const std::int64_t row = i / chunks_per_row;
    const std::int64_t k0 = (i % chunks_per_row) * 8;
    const std::uint32_t word = *reinterpret_cast<const std::uint32_t*>(packed + row * ld + k0 / 2);
    const float s = scale_value(format, scales[formats::detail::scale_offset(layout, row, k0 / vec, cols)]);
    std::uint32_t pairs[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // byte j holds elements k0+2j (low nibble) and k0+2j+1
      const __nv_bfloat162 p = __floats2bfloat162_rn(e2m1_value(word >> (8 * j)) * s,
                                                     e2m1_value(word >> (8 * j + 4)) * s);
      std::memcpy(&pairs[j], &p, sizeof(std::uint32_t));
    }
    *reinterpret_cast<uint4*>(out + row * k + k0) = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
  }
}

constexpr std::size_t kBf16Bytes = 2;

__device__ inline float to_float(__half x) { return __half2float(x); }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(float x) { return x; }
template <class T>
__device__ inline T from_float(float x);
template <>
__device__ inline __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ inline float from_float<float>(float x) { return x; }

// One thread per 8 consecutive elements of a row (16-byte loads and stores; 32 for f32).
template <class T>
__global__ void glu_kernel(const T* g, const T* u, T* out, std::int64_t ld, int rows, int n, int kind,
                           float alpha, float limit) {
  constexpr int kVec = 8;
  struct alignas(16) Pack {
    T v[kVec];
  };
  const std::int64_t chunks_per_row = n / kVec;
  const std::int64_t total = static_cast<std::int64_t>(rows) * chunks_per_row;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const std::int64_t at = (i / chunks_per_row) * ld + (i % chunks_per_row) * kVec;
    const Pack gp = *reinterpret_cast<const Pack*>(g + at), up = *reinterpret_cast<const Pack*>(u + at);
    Pack o;
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      o.v[j] = from_float<T>(detail::glu_activate(kind, to_float(gp.v[j]), to_float(up.v[j]), alpha, limit));
    *reinterpret_cast<Pack*>(out + at) = o;
  }
}

template <class T>
void launch_glu(const void* g, const void* u, void* out, std::int64_t ld, int rows, int n, int kind, float alpha,
                float limit, cudaStream_t stream) {
  const std::int64_t total = static_cast<std::int64_t>(rows) * (n / 8);
  if (total == 0) return;
  const std::int64_t blocks = std::clamp<std::int64_t>((total + kDequantThreads - 1) / kDequantThreads, 1, 1 << 20);
  glu_kernel<T><<<static_cast<unsigned>(blocks), kDequantThreads, 0, stream>>>(
      static_cast<const T*>(g), static_cast<const T*>(u), static_cast<T*>(out), ld, rows, n, kind, alpha, limit);
}

}  // namespace

void glu_elementwise(const void* g, const void* u, void* out, std::int64_t ld, int rows, int n, OutType type,
                     const Options& act, cudaStream_t stream) {
  if (act.epilogue == Epilogue::none) throw Error("options.epilogue", -1, "the elementwise GLU needs an activation");
  if (n % 8 != 0 || ld % 8 != 0) throw Error("glu", -1, "the elementwise GLU needs n and ld multiples of 8");
  const int kind = act.epilogue == Epilogue::silu ? detail::kGluSilu : detail::kGluSwigluOai;
  const float alpha = act.swiglu_alpha, limit = act.swiglu_limit;
  switch (type) {
    case OutType::f16: launch_glu<__half>(g, u, out, ld, rows, n, kind, alpha, limit, stream); break;
    case OutType::bf16: launch_glu<__nv_bfloat16>(g, u, out, ld, rows, n, kind, alpha, limit, stream); break;
    case OutType::f32: launch_glu<float>(g, u, out, ld, rows, n, kind, alpha, limit, stream); break;
  }
  CLI_CUDA_CHECK(cudaGetLastError(), "glu (elementwise)");
}

void cublas_bf16_gemm(cublasHandle_t handle, const void* a, const void* b, void* c, int m, int n, int k,
                      std::int64_t ldc) {
  const float alpha = 1.0f, beta = 0.0f;
  CLI_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16BF, k, a, CUDA_R_16BF,
                                k, &beta, c, CUDA_R_16BF, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT),
                   "peers (cublasGemmEx)");
}

void dequantize_to_bf16(const void* packed, std::int64_t ld, const void* scales, int rows, int k,
                        Format format, ScaleLayout layout, void* out, cudaStream_t stream) {
  const std::int64_t total = static_cast<std::int64_t>(rows) * (k / 8);
  if (total == 0) return;
  const std::int64_t blocks = std::clamp<std::int64_t>((total + kDequantThreads - 1) / kDequantThreads, 1, 1 << 20);
  dequantize_kernel<<<static_cast<unsigned>(blocks), kDequantThreads, 0, stream>>>(
      static_cast<const std::uint8_t*>(packed), ld, static_cast<const std::uint8_t*>(scales), rows, k,
      format, layout, static_cast<__nv_bfloat16*>(out));
  CLI_CUDA_CHECK(cudaGetLastError(), "peers (dequantise)");
}

// ---- cuBLAS peers -----------------------------------------------------------------------------

CublasPeers::CublasPeers(const ProblemData& data) : data_(data) {
  const ProblemShape& shape = data.shape();
  ldc_ = output_row_elems(shape.n);
  std::size_t need = 0;
  for (int m : shape.m)
    if (m > 0)
      need += (static_cast<std::size_t>(m) * shape.k + static_cast<std::size_t>(shape.n) * shape.k +
               static_cast<std::size_t>(m) * ldc_) * kBf16Bytes;
  require_free_memory(need + (64u << 20), "peers (bf16 operands)");

  const auto& groups = data.groups();
  a_bf16_.resize(groups.size());
  b_bf16_.resize(groups.size());
  c_bf16_.resize(groups.size());
  std::vector<const void*> ptrs_b, ptrs_a;
  std::vector<void*> ptrs_c;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const GroupBuffers& gb = groups[g];
    if (gb.m == 0) continue;
    a_bf16_[g] = DeviceBuffer(static_cast<std::size_t>(gb.m) * gb.k * kBf16Bytes, "peers (bf16 A)");
    b_bf16_[g] = DeviceBuffer(static_cast<std::size_t>(gb.n) * gb.k * kBf16Bytes, "peers (bf16 B)");
    c_bf16_[g] = DeviceBuffer(static_cast<std::size_t>(gb.m) * ldc_ * kBf16Bytes, "peers (bf16 C)");
    ptrs_b.push_back(b_bf16_[g].get());
    ptrs_a.push_back(a_bf16_[g].get());
    ptrs_c.push_back(c_bf16_[g].get());
    trans_a_.push_back(CUBLAS_OP_T);
    trans_b_.push_back(CUBLAS_OP_N);
    gm_.push_back(gb.n);
    gn_.push_back(gb.m);
    gk_.push_back(gb.k);
    glda_.push_back(gb.k);
    gldb_.push_back(gb.k);
    gldc_.push_back(static_cast<int>(ldc_));
    gsize_.push_back(1);
    galpha_.push_back(1.0f);
    gbeta_.push_back(0.0f);
  }
  grouped_count_ = static_cast<int>(ptrs_a.size());
  if (grouped_count_ > 0) {
    const std::size_t n = static_cast<std::size_t>(grouped_count_);
    d_ptrs_ = DeviceBuffer(3 * n * sizeof(void*), "peers (pointer arrays)");
    auto* base = d_ptrs_.as<void*>();
    CLI_CUDA_CHECK(cudaMemcpy(base, ptrs_b.data(), n * sizeof(void*), cudaMemcpyHostToDevice), "peers");
    CLI_CUDA_CHECK(cudaMemcpy(base + n, ptrs_a.data(), n * sizeof(void*), cudaMemcpyHostToDevice), "peers");
    CLI_CUDA_CHECK(cudaMemcpy(base + 2 * n, ptrs_c.data(), n * sizeof(void*), cudaMemcpyHostToDevice), "peers");
  }
}

void CublasPeers::dequantize_group(std::size_t g, cudaStream_t stream) const {
  const GroupBuffers& gb = data_.groups()[g];
  const DataSettings& s = data_.settings();
  dequantize_to_bf16(gb.a.get(), gb.lda, gb.sfa.get(), gb.m, gb.k, s.format, s.layout, a_bf16_[g].get(), stream);
  dequantize_to_bf16(gb.b.get(), gb.ldb, gb.sfb.get(), gb.n, gb.k, s.format, s.layout, b_bf16_[g].get(), stream);
}

void CublasPeers::gemm_group(std::size_t g, cublasHandle_t handle) const {
  const GroupBuffers& gb = data_.groups()[g];
  cublas_bf16_gemm(handle, a_bf16_[g].get(), b_bf16_[g].get(), c_bf16_[g].get(), gb.m, gb.n, gb.k, ldc_);
}

void CublasPeers::dequantize_all(cudaStream_t stream) const {
  for (std::size_t g = 0; g < data_.groups().size(); ++g)
    if (data_.groups()[g].m > 0) dequantize_group(g, stream);
}

void CublasPeers::dequantize_and_gemm(cublasHandle_t handle, cudaStream_t stream) const {
  CLI_CUBLAS_CHECK(cublasSetStream(handle, stream), "peers");
  for (std::size_t g = 0; g < data_.groups().size(); ++g) {
    if (data_.groups()[g].m == 0) continue;
    dequantize_group(g, stream);
    gemm_group(g, handle);
  }
}

void CublasPeers::gemm_loop(cublasHandle_t handle, cudaStream_t stream) const {
  CLI_CUBLAS_CHECK(cublasSetStream(handle, stream), "peers");
  for (std::size_t g = 0; g < data_.groups().size(); ++g)
    if (data_.groups()[g].m > 0) gemm_group(g, handle);
}

cublasStatus_t CublasPeers::gemm_grouped(cublasHandle_t handle, cudaStream_t stream) const {
  if (grouped_count_ == 0) return CUBLAS_STATUS_SUCCESS;
  CLI_CUBLAS_CHECK(cublasSetStream(handle, stream), "peers");
  const std::size_t n = static_cast<std::size_t>(grouped_count_);
  auto* base = d_ptrs_.as<void*>();
  return cublasGemmGroupedBatchedEx(handle, trans_a_.data(), trans_b_.data(), gm_.data(), gn_.data(),
                                    gk_.data(), galpha_.data(), base, CUDA_R_16BF, glda_.data(), base + n,
                                    CUDA_R_16BF, gldb_.data(), gbeta_.data(), base + 2 * n, CUDA_R_16BF,
                                    gldc_.data(), grouped_count_, gsize_.data(), CUBLAS_COMPUTE_32F);
}

std::vector<std::vector<std::uint8_t>> CublasPeers::outputs() const {
  CLI_CUDA_CHECK(cudaDeviceSynchronize(), "peers (outputs)");
  std::vector<std::vector<std::uint8_t>> out(c_bf16_.size());
  for (std::size_t g = 0; g < c_bf16_.size(); ++g) {
    out[g].resize(c_bf16_[g].bytes());
    if (!out[g].empty())
      CLI_CUDA_CHECK(cudaMemcpy(out[g].data(), c_bf16_[g].get(), out[g].size(), cudaMemcpyDeviceToHost),
                     "peers (outputs)");
  }
  return out;
}

// ---- per-group streams ------------------------------------------------------------------------

StreamsPeer::StreamsPeer(const ProblemData& data, const Options& options) {
  const std::vector<GroupDesc> descs = data.descs();
  for (const GroupDesc& d : descs) {
    if (d.m == 0) continue;
    plans_.emplace_back(std::span<const GroupDesc>(&d, 1), options);
    streams_.push_back(std::make_unique<Stream>());
    joins_.emplace_back(/*timing=*/false);
  }
}

void StreamsPeer::run(cudaStream_t stream) const {
  CLI_CUDA_CHECK(cudaEventRecord(fork_.get(), stream), "peers (streams)");
  for (std::size_t i = 0; i < plans_.size(); ++i) {
    cudaStream_t side = streams_[i]->get();
    CLI_CUDA_CHECK(cudaStreamWaitEvent(side, fork_.get(), 0), "peers (streams)");
    plans_[i].run(side);
    CLI_CUDA_CHECK(cudaEventRecord(joins_[i].get(), side), "peers (streams)");
    CLI_CUDA_CHECK(cudaStreamWaitEvent(stream, joins_[i].get(), 0), "peers (streams)");
  }
}

}  // namespace fp4gemm::cli
