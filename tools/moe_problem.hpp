// MoE problems for `fp4gemm moe` and `fp4gemm bench --suite moe`: random top-k routings aligned on
// the host, device data, one fp4gemm::MoeGemm plan, timing, the dynamic-routing loop and --check.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "cuda_util.hpp"
#include "fp4gemm/moe.hpp"
#include "timing.hpp"

namespace fp4gemm::cli {

struct MoeShape {
  std::string name;  // "qwen3-30b-a3b up", "moe", ...
  int experts = 0, n = 0, k = 0;
  int tokens = 0, topk = 1;
  std::string describe() const;  // "E=128 N=1536 K=2048 T=256 top-8"
};

struct MoeSettings {
  Format format = Format::nvfp4;  // weights (and FP4 activations)
  MoeActivation activation = MoeActivation::fp4;
  ScaleLayout scales = ScaleLayout::blocked;  // of the weight scales
  OutType out = OutType::bf16;
  MoeLayout layout = MoeLayout::contiguous;
  std::string routing = "uniform";
  bool gpumode_values = false;  // {0, +-0.5, +-1, +-1.5} x {1, 2}: exact sums (else full range)
  // Full range with the MXFP4 weight scale codes a trained checkpoint has (117..127: 2^-10..1, a
  // block's largest weight <= 6) instead of 117..137 (--values checkpoint).
  bool checkpoint_scales = false;
  std::uint64_t seed = 1111;
  bool pieces = false;  // the plan reads the weights packed into pieces (MoeOptions::weight_layout; --weight-layout)
  Tuning tuning;  // the plan's measurement knobs (FP4GEMM_* variables; MoeOptions::tuning)
  std::string describe() const;  // "nvfp4 x nvfp4 (W4A4), blocked weight scales -> bf16, contiguous"
};

// The routing distributions: uniform (distinct random experts per token), skewed (Zipf-like
// popularity, exponent 1.2, over a random order of the experts), balanced (round robin: equal
// rows per expert), one-hot (every token picks experts 0..topk-1).
const std::vector<std::string>& moe_routings();

// One top-k routing of `tokens` tokens, aligned: rows sorted by expert, stable by token.
struct HostRouting {
  std::vector<int> offsets;  // [E + 1]
  std::vector<int> gather;   // [tokens * topk]: the token of each sorted row
  std::vector<int> counts;   // [E]
  int rows = 0, active_experts = 0, max_rows = 0;
};
HostRouting draw_routing(int experts, int tokens, int topk, const std::string& kind, std::mt19937_64& rng);

// Checks the shape and settings on the host (before any GPU work); fp4gemm::Error names the
// command-line option (--experts, --n, --k, --tokens, --topk, --act).
void validate_moe_shape(const MoeShape& shape, const MoeSettings& settings);

// Device data for one shape (weights, activations, routing buffers, output), one plan for every
// routing of `pool`, and the routing in use. Contiguous: a holds the `tokens` token rows, read
// through the gather index; capacity = tokens * topk. Masked: a is [E, capacity, ...] with
// capacity = the most rows any routing of the pool gives one expert.
class MoeProblem {
 public:
  MoeProblem(const MoeShape& shape, const MoeSettings& settings, std::vector<HostRouting> pool);
  MoeProblem(const MoeProblem&) = delete;
  MoeProblem& operator=(const MoeProblem&) = delete;

  const MoeGemm& plan() const { return *plan_; }
  const MoeShape& shape() const { return shape_; }
  const MoeSettings& settings() const { return settings_; }
  const HostRouting& routing() const { return pool_[current_]; }
  const DeviceBuffer& output() const { return c_; }  // [rows, ldc], poisoned where no run writes
  int capacity() const { return capacity_; }

  // Makes routing `i` of the pool current (synchronous copy to the device).
  void use_routing(std::size_t i);
  void run(cudaStream_t stream) const;
  // 2 * rows * N * K of the current routing.
  double flops() const;
  // Active experts' weights and weight scales + activations + output, once each (current routing).
  double bytes() const;

  // Poisons the output, runs, and compares with reference::moe_gemm (bit-identical on GPU MODE
  // values, SPEC 3's FP32 bound on full-range data); rows no expert owns must keep the poison.
  CheckReport check(cudaStream_t stream);
  // Wall time per step of `steps` steps, each uploading the next routing of the pool from pinned
  // host memory (cudaMemcpyAsync) and running; after a few warm-up steps. Then check()s the plan's
  // device error word (throws on bad routing data).
  double dynamic_us_per_step(int steps, cudaStream_t stream);

 private:
  void poison_output(cudaStream_t stream) const;
  MoeArgs args() const;

  MoeShape shape_;
  MoeSettings settings_;
  std::vector<HostRouting> pool_;
  std::size_t current_ = 0;
  int capacity_ = 0, a_rows_ = 0;
  std::int64_t lda_ = 0, ldc_ = 0, a_scale_cols_ = 0;
  DeviceBuffer w_, w_scales_, a_, a_scales_, offsets_, gather_, counts_, c_;
  DeviceBuffer pieces_;  // MoeSettings::pieces: what the plan reads
  std::unique_ptr<MoeGemm> plan_;  // built once the weights are filled (linear scales are converted then)
};

}  // namespace fp4gemm::cli
