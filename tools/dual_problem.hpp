// The dual GEMM problem that `fp4gemm dual` and `fp4gemm bench --suite dual` time:
// C = act(A B1^T, A B2^T) as L groups, with the fused plan (Options::epilogue) and the unfused
// path it replaces (two plain fp4gemm GEMMs + an elementwise activation kernel).
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <vector>

#include "cuda_util.hpp"
#include "data.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::cli {

// The dual GEMM runs on the fast kernel only: throws fp4gemm::Error naming --backend for
// Backend::reference (before any device work).
void check_dual_backend(Backend backend);

class DualProblem {
 public:
  // Gate data (A, B1, their scales, C) from `data`; up data (B2, its scales, the unfused up GEMM's
  // C) from its own seed. GPU MODE values, or with `full_values` random bytes (all 16 nibbles) and
  // scales over the normal range (realistic tensor-core power). Then the plans (Backend::fast,
  // `tuning`): the fused one writes gate's C; the unfused path's plain GEMMs write gate's and up's
  // C, both reading gate's A. Synchronises `stream`.
  DualProblem(const ProblemShape& shape, const DataSettings& data, bool full_values, Epilogue epilogue,
              const Tuning& tuning, cudaStream_t stream);

  const ProblemData& gate() const { return gate_; }
  const ProblemData& up() const { return up_; }
  const Plan& fused() const { return *fused_; }
  void run_fused(cudaStream_t stream) const { fused_->run(stream); }
  // The unfused path's two plain GEMMs alone (what `fp4gemm dual` times as "unfused").
  void run_plain(cudaStream_t stream) const;
  // The whole unfused path: the two plain GEMMs, then the elementwise act(g, u) kernel (FP32 math,
  // output in the problem's output type) into a buffer of its own.
  void run_unfused(cudaStream_t stream) const;

 private:
  ProblemData gate_, up_;
  std::optional<Plan> fused_, plain_gate_, plain_up_;  // built after the data (plans copy scales)
  std::vector<DeviceBuffer> unfused_out_;              // per group, [M, ldc]
};

}  // namespace fp4gemm::cli
