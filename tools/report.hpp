// Results of a benchmark case, the stdout table, and their JSON form (nlohmann_json).
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

#include "check.hpp"
#include "cli.hpp"
#include "timing.hpp"

namespace fp4gemm::cli {

using Json = nlohmann::ordered_json;

struct PeerResults {
  bool measured = false;
  TimingStats dequant;         // dequantise every group's A and B to bf16, alone
  TimingStats dequant_cublas;  // (a) per group: dequantise A_g, B_g, then cublasGemmEx
  TimingStats gemm_loop;       // (b) per-group cublasGemmEx on operands dequantised in advance
  bool grouped_ok = false;     // (b) cublasGemmGroupedBatchedEx ran
  std::string grouped_status;  //     its cuBLAS status when it did not
  TimingStats grouped;
  bool streams_ok = false;     // (c) one plan per group, each on its own stream
  std::string streams_status;
  std::string streams_label;
  int streams = 0;
  TimingStats streams_time;
  // Cross-checks against fp4gemm's own output of the same inputs.
  Agreement cublas_agreement;   // bf16 cuBLAS output vs fp4gemm output (tolerance 2^-7)
  Agreement streams_agreement;  // per-group streams output vs fp4gemm output (bitwise)

  // Peer (b) is the faster of the two cuBLAS bf16 variants.
  bool grouped_is_best() const { return grouped_ok && grouped.median_us < gemm_loop.median_us; }
  double cublas_bf16_us() const { return grouped_is_best() ? grouped.median_us : gemm_loop.median_us; }
  const char* cublas_method() const {
    return grouped_is_best() ? "cublasGemmGroupedBatchedEx" : "cublasGemmEx per group";
  }
};

struct CaseResult {
  int index = 0;  // 1-based within the selected suite
  std::string suite;
  ProblemShape shape;
  double flops = 0, min_bytes = 0;
  Floors floors;
  std::string label, kernel, plan_text, fallback_reason;
  Backend requested = Backend::automatic;
  TimingStats time;
  PeerResults peers;
};

// What every bench suite sets up once its options are checked: the device (NoDeviceError without
// one), the --json path checked (empty: none), a stream, the ceilings of this GPU measured now
// (a progress line on stderr) and the L2 flusher. Use as
// `const BenchRun run(path); const auto& [device, stream, ceilings, flusher] = run;`.
struct BenchRun {
  explicit BenchRun(const std::string& json_path);
  DeviceInfo device;
  Stream stream;
  Ceilings ceilings;
  L2Flusher flusher;
};

// ---- stdout -------------------------------------------------------------------------------------
// A suite's first two lines: "<tool> <version> on <GPU> (...), <date>" and the ceilings measured now.
void print_device_and_ceilings(std::ostream& os, const std::string& tool, const DeviceInfo& device,
                               const Ceilings& ceilings);
void print_bench_header(std::ostream& os, const DeviceInfo& device, const Ceilings& ceilings,
                        const RunSettings& settings, std::size_t flush_bytes, bool peers, int settle_ms);
void print_table_head(std::ostream& os);
void print_case_rows(std::ostream& os, const CaseResult& r);
void print_legend(std::ostream& os, bool any_fallback);
// "time: 123.45 us (median of 100, min 120.10) | 487.2 TFLOP/s | 1.234 TB/s effective"
std::string time_line(const TimingStats& t, double flops, double bytes);

// ---- JSON ---------------------------------------------------------------------------------------
Json device_json(const DeviceInfo& device);
Json ceilings_json(const Ceilings& ceilings);
Json settings_json(const RunSettings& settings);
// The FP4GEMM_* knob variables that were set (the plans' Tuning was read from them): {} in
// production; and the same as a "measurement knobs: NAME=value ..." line (nothing when none is set).
Json tuning_json();
void print_tuning_knobs(std::ostream& os);
Json stats_json(const TimingStats& t);
Json check_json(const CheckReport& c);
Json case_json(const CaseResult& r);
// The start of a bench suite's document: tool, version, date, gpu, ceilings, settings (settings_json
// with the suite, peers, settle_ms, the L2 flush and the timing method) and an empty "cases" array.
Json bench_document(const std::string& tool, const std::string& suite, const DeviceInfo& device,
                    const Ceilings& ceilings, const RunSettings& s, bool peers, int settle_ms, std::size_t flush_bytes);
// Writes `doc` (indented) to `path`; throws fp4gemm::Error naming --json when it cannot.
void write_json(const std::string& path, const Json& doc);
// A suite's end: writes `doc` to `path` with a progress line; empty path: nothing.
void write_suite_json(const std::string& path, const Json& doc);

// One timed case of the moe and layer suites against its floors: TFLOP/s, TB/s and the larger
// floor / time (all 0 where the time is 0).
struct CaseRates {
  double tflops = 0, tbps = 0, ratio = 0;
};
CaseRates case_rates(const TimingStats& t, double flops, double bytes, const Floors& floors);
// Adds flops, bytes, time_us, tflops, tbps, compute_floor_us, memory_floor_us, bound and ratio.
void add_rates_json(Json& j, const TimingStats& t, double flops, double bytes, const Floors& floors);
// Fails early (before minutes of benchmarking) when `path` cannot be written; empty: no-op.
void require_writable(const std::string& path);

}  // namespace fp4gemm::cli
