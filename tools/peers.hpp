// The peers a user would otherwise run: dequantise + cuBLAS bf16, cuBLAS bf16 on operands
// dequantised in advance, and one fp4gemm plan per group on its own stream.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cuda_util.hpp"
#include "data.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::cli {

// Dequantises packed e2m1 rows [rows, k] (row stride ld bytes) with their scales (in `layout`)
// to bf16 [rows, k], row stride k. Exact: every e2m1 x scale product is a bf16 value.
void dequantize_to_bf16(const void* packed, std::int64_t ld, const void* scales, int rows, int k,
                        Format format, ScaleLayout layout, void* out, cudaStream_t stream);

// Row-major C[m, n] (row stride ldc elements) = A[m, k] B[n, k]^T: one cublasGemmEx on the handle's
// stream, bf16 in and out, CUBLAS_COMPUTE_32F; A and B dense (row stride k).
void cublas_bf16_gemm(cublasHandle_t handle, const void* a, const void* b, void* c, int m, int n, int k,
                      std::int64_t ldc);

// The elementwise step of an unfused dual GEMM: out = act(g, u) for every element of [rows, n]
// (row stride ld elements, all three of `type`; n and ld multiples of 8, 16-byte aligned), in
// FP32 with the fused epilogue's own function (detail::glu_activate): the activation of
// `act.epilogue` (silu(g) * u, or swigluoai with act.swiglu_alpha / swiglu_limit; not none),
// rounded once to `type`.
void glu_elementwise(const void* g, const void* u, void* out, std::int64_t ld, int rows, int n, OutType type,
                     const Options& act, cudaStream_t stream);

// bf16 copies of every group's A and B, bf16 outputs, and the cuBLAS calls on them. cuBLAS
// computes row-major C[M, N] = A[M, K] B[N, K]^T as column-major C^T = op_T(B) op_N(A).
class CublasPeers {
 public:
  explicit CublasPeers(const ProblemData& data);

  // Dequantise A_g and B_g of every group (the "dequant" part of peer a).
  void dequantize_all(cudaStream_t stream) const;
  // Peer (a): per group, dequantise A_g and B_g, then cublasGemmEx.
  void dequantize_and_gemm(cublasHandle_t handle, cudaStream_t stream) const;
  // Peer (b), per-group cublasGemmEx calls on the operands dequantised in advance.
  void gemm_loop(cublasHandle_t handle, cudaStream_t stream) const;
  // Peer (b), one cublasGemmGroupedBatchedEx call (bf16 in, bf16 out, CUBLAS_COMPUTE_32F).
  // Returns the cuBLAS status instead of throwing, so an unsupported combination is reported.
  cublasStatus_t gemm_grouped(cublasHandle_t handle, cudaStream_t stream) const;
  // Host copies of the bf16 outputs [M, ldc] per group (synchronises the device).
  std::vector<std::vector<std::uint8_t>> outputs() const;

 private:
  void dequantize_group(std::size_t g, cudaStream_t stream) const;
  void gemm_group(std::size_t g, cublasHandle_t handle) const;

  const ProblemData& data_;
  std::vector<DeviceBuffer> a_bf16_, b_bf16_, c_bf16_;
  std::int64_t ldc_ = 0;
  // cublasGemmGroupedBatchedEx arguments over the non-empty groups.
  std::vector<cublasOperation_t> trans_a_, trans_b_;
  std::vector<int> gm_, gn_, gk_, glda_, gldb_, gldc_, gsize_;
  std::vector<float> galpha_, gbeta_;
  DeviceBuffer d_ptrs_;  // [B pointers | A pointers | C pointers]
  int grouped_count_ = 0;
};

// Peer (c): one fp4gemm::Plan per non-empty group, each run on its own stream, forked from and
// joined back into the caller's stream with events.
class StreamsPeer {
 public:
  StreamsPeer(const ProblemData& data, const Options& options);
  void run(cudaStream_t stream) const;
  int streams() const { return static_cast<int>(plans_.size()); }

 private:
  std::vector<Plan> plans_;
  std::vector<std::unique_ptr<Stream>> streams_;
  Event fork_{/*timing=*/false};
  std::vector<Event> joins_;
};

}  // namespace fp4gemm::cli
