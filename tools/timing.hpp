// Timing (CUDA events, warm-up, median, L2 flush between repetitions) and the measured ceilings.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>

#include "cuda_util.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::cli {

struct TimingStats {
  double median_us = 0, min_us = 0, mean_us = 0, max_us = 0;
  int reps = 0;
};

struct TimingConfig {
  int warmup = 10;
  int iters = 100;
  // Repetitions are capped so one measurement takes about this long (slow backends such as the
  // reference kernel would otherwise take minutes); never fewer than kMinReps.
  double budget_s = 3.0;
  static constexpr int kMinReps = 5;
};

// Evicts the L2 cache: a cudaMemsetAsync over a buffer of at least twice the L2 size.
class L2Flusher {
 public:
  explicit L2Flusher(std::size_t l2_bytes);
  void flush(cudaStream_t stream) const;
  std::size_t bytes() const { return buffer_.bytes(); }

 private:
  DeviceBuffer buffer_;
};

// Enqueues `body(stream)` `warmup` times, then `iters` timed repetitions: each one is
// [flush L2] -> event -> body -> event (the flush is outside the events). `body` may fork to
// other streams as long as it joins back into `stream`. Returns the statistics of the per-rep
// event times. `flusher` may be null (no flush, e.g. for the ceilings).
using Body = std::function<void(cudaStream_t)>;
TimingStats time_region(cudaStream_t stream, const L2Flusher* flusher, const TimingConfig& config,
                        const Body& body);

// ---- ceilings of this GPU, measured ------------------------------------------------------------
struct Ceilings {
  double bf16_tflops = 0;      // cuBLAS bf16 8192^3 (cublasGemmEx, CUBLAS_COMPUTE_32F), median
  double bf16_gemm_us = 0;
  double copy_tbps = 0;        // device-to-device cudaMemcpyAsync, read + write bytes, median
  double copy_us = 0;
  std::size_t copy_bytes = 0;  // bytes per copy (each way)
};

constexpr int kCeilingGemmSize = 8192;
Ceilings measure_ceilings(cudaStream_t stream);

// Floors of one problem on this GPU and the ratio max(floor) / time.
struct Floors {
  double compute_us = 0, memory_us = 0;
  double max_us() const { return compute_us > memory_us ? compute_us : memory_us; }
  const char* bound() const { return compute_us >= memory_us ? "compute" : "memory"; }
};
Floors floors_for(double flops, double min_bytes, const Ceilings& ceilings);

}  // namespace fp4gemm::cli
