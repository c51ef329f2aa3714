// Event timing with warm-up, median and L2 flush; the bf16 cuBLAS and copy-bandwidth ceilings.
#include "timing.hpp"

#include <algorithm>
#include <vector>

#include "data.hpp"

namespace fp4gemm::cli {

// ---- L2 flush ---------------------------------------------------------------------------------

L2Flusher::L2Flusher(std::size_t l2_bytes) {
  const std::size_t bytes = std::max<std::size_t>(2 * l2_bytes, 32u << 20);
  require_free_memory(bytes, "L2 flush buffer");
  buffer_ = DeviceBuffer(bytes, "L2 flush buffer");
}

void L2Flusher::flush(cudaStream_t stream) const {
  CLI_CUDA_CHECK(cudaMemsetAsync(buffer_.get(), 0, buffer_.padded_bytes(), stream), "L2 flush");
}

// ---- timing -----------------------------------------------------------------------------------

namespace {

float elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0;
  CLI_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()), "timing");
  return ms;
}

// One flushed, timed repetition, waited for: a first estimate of the cost of a repetition.
double probe_seconds(cudaStream_t stream, const L2Flusher* flusher, const Body& body) {
  Event start, stop;
  if (flusher) flusher->flush(stream);
  CLI_CUDA_CHECK(cudaEventRecord(start.get(), stream), "timing");
  body(stream);
  CLI_CUDA_CHECK(cudaEventRecord(stop.get(), stream), "timing");
  CLI_CUDA_CHECK(cudaEventSynchronize(stop.get()), "timing");
  return elapsed_ms(start, stop) * 1e-3;
}

TimingStats summarise(std::vector<double> us) {
  TimingStats s;
  s.reps = static_cast<int>(us.size());
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  const std::size_t n = us.size();
  s.median_us = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  s.min_us = us.front();
  s.max_us = us.back();
  double sum = 0;
  for (double v : us) sum += v;
  s.mean_us = sum / static_cast<double>(n);
  return s;
}

}  // namespace

TimingStats time_region(cudaStream_t stream, const L2Flusher* flusher, const TimingConfig& config,
                        const Body& body) {
  // The first warm-up repetition is timed so slow backends get fewer warm-ups and repetitions.
  const double first_s = probe_seconds(stream, flusher, body);
  int warmup = config.warmup - 1;
  if (first_s > 0 && first_s * warmup > config.budget_s / 3) warmup = static_cast<int>(config.budget_s / 3 / first_s);
  for (int i = 0; i < warmup; ++i) {
    if (flusher) flusher->flush(stream);
    body(stream);
  }
  CLI_CUDA_CHECK(cudaStreamSynchronize(stream), "timing (warm-up)");

  int reps = std::max(1, config.iters);
  const double probe_s = probe_seconds(stream, flusher, body);
  if (probe_s > 0 && probe_s * reps > config.budget_s)
    reps = std::min(reps, std::max(TimingConfig::kMinReps, static_cast<int>(config.budget_s / probe_s)));

  // NOTES: all repetitions are enqueued back to back and waited for once, so host launch cost
  // overlaps the previous repetition's flush (as in triton's do_bench).
  std::vector<Event> starts, stops;
  starts.reserve(reps);
  stops.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    starts.emplace_back();
    stops.emplace_back();
  }
  for (int i = 0; i < reps; ++i) {
    if (flusher) flusher->flush(stream);
    CLI_CUDA_CHECK(cudaEventRecord(starts[i].get(), stream), "timing");
    body(stream);
    CLI_CUDA_CHECK(cudaEventRecord(stops[i].get(), stream), "timing");
  }
  CLI_CUDA_CHECK(cudaStreamSynchronize(stream), "timing");
  std::vector<double> us(reps);
  for (int i = 0; i < reps; ++i) us[i] = 1e3 * elapsed_ms(starts[i], stops[i]);
  return summarise(std::move(us));
}

// ---- ceilings ---------------------------------------------------------------------------------

namespace {

constexpr std::size_t kBf16Bytes = 2;

// cuBLAS bf16 GEMM 8192^3 on random non-zero data, the same TN layout the peers use.
void measure_bf16_gemm(cudaStream_t stream, Ceilings& c) {
  constexpr int n = kCeilingGemmSize;
  const std::size_t elems = static_cast<std::size_t>(n) * n;
  require_free_memory(3 * elems * kBf16Bytes + (64u << 20), "ceiling (bf16 GEMM)");
  DeviceBuffer a(elems * kBf16Bytes, "ceiling (bf16 GEMM)");
  DeviceBuffer b(elems * kBf16Bytes, "ceiling (bf16 GEMM)");
  DeviceBuffer out(elems * kBf16Bytes, "ceiling (bf16 GEMM)");
  fill_bf16_random(a.get(), elems, 0x5EEDA, stream);
  fill_bf16_random(b.get(), elems, 0x5EEDB, stream);
  CublasHandle handle;
  CLI_CUBLAS_CHECK(cublasSetStream(handle.get(), stream), "ceiling (bf16 GEMM)");
  const float alpha = 1.0f, beta = 0.0f;
  auto body = [&](cudaStream_t) {
    CLI_CUBLAS_CHECK(cublasGemmEx(handle.get(), CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, b.get(),
                                  CUDA_R_16BF, n, a.get(), CUDA_R_16BF, n, &beta, out.get(), CUDA_R_16BF,
                                  n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "ceiling (bf16 GEMM)");
  };
  const TimingStats t = time_region(stream, nullptr, TimingConfig{5, 30, 10.0}, body);
  c.bf16_gemm_us = t.median_us;
  c.bf16_tflops = 2.0 * n * static_cast<double>(n) * n / (t.median_us * 1e-6) / 1e12;
}

// Device-to-device copy of a large buffer (2 GiB, less when memory is short): read + write bytes.
void measure_copy(cudaStream_t stream, Ceilings& c) {
  std::size_t free_bytes = 0, total_bytes = 0;
  CLI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes), "ceiling (copy)");
  std::size_t bytes = std::size_t{2} << 30;
  bytes = std::min(bytes, (free_bytes / 4) & ~((std::size_t{1} << 20) - 1));
  if (bytes < (std::size_t{64} << 20)) throw Error("ceiling (copy)", -1, "not enough free device memory");
  DeviceBuffer src(bytes, "ceiling (copy)"), dst(bytes, "ceiling (copy)");
  CLI_CUDA_CHECK(cudaMemsetAsync(src.get(), 0x5A, bytes, stream), "ceiling (copy)");
  auto body = [&](cudaStream_t s) {
    CLI_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s), "ceiling (copy)");
  };
  const TimingStats t = time_region(stream, nullptr, TimingConfig{3, 20, 10.0}, body);
  c.copy_bytes = bytes;
  c.copy_us = t.median_us;
  c.copy_tbps = 2.0 * static_cast<double>(bytes) / (t.median_us * 1e-6) / 1e12;
}

}  // namespace

Ceilings measure_ceilings(cudaStream_t stream) {
  Ceilings c;
  measure_bf16_gemm(stream, c);
  measure_copy(stream, c);
  return c;
}

Floors floors_for(double flops, double min_bytes, const Ceilings& ceilings) {
  Floors f;
  if (ceilings.bf16_tflops > 0) f.compute_us = flops / (ceilings.bf16_tflops * 1e12) * 1e6;
  if (ceilings.copy_tbps > 0) f.memory_us = min_bytes / (ceilings.copy_tbps * 1e12) * 1e6;
  return f;
}

}  // namespace fp4gemm::cli
