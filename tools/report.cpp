// The bench table on stdout and the JSON documents of every command.
#include "report.hpp"

#include <cstdio>
#include <fstream>

#include "tuning_env.hpp"

namespace fp4gemm::cli {

namespace {

std::string format(const char* fmt, auto... args) {
  char text[512];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

double tflops(double flops, double us) { return us > 0 ? flops / (us * 1e-6) / 1e12 : 0; }
double tbps(double bytes, double us) { return us > 0 ? bytes / (us * 1e-6) / 1e12 : 0; }

constexpr const char* kRowFormat = "%-7s %-37s %10.2f %8.1f %7.3f %10.2f %10.2f %6.3f %9s  %s\n";

// One table row: the case's floors beside this implementation's time.
void print_row(std::ostream& os, const std::string& case_name, const std::string& impl, double us,
               const CaseResult& r, const std::string& note) {
  const double cublas_us = r.peers.measured ? r.peers.cublas_bf16_us() : 0;
  const std::string speedup = cublas_us > 0 && us > 0 ? format("%.2fx", cublas_us / us) : "-";
  const double ratio = us > 0 ? r.floors.max_us() / us : 0;
  os << format(kRowFormat, case_name.c_str(), impl.c_str(), us, tflops(r.flops, us), tbps(r.min_bytes, us),
               r.floors.compute_us, r.floors.memory_us, ratio, speedup.c_str(), note.c_str());
}

Json time_block(const TimingStats& t, const CaseResult& r) {
  Json j;
  j["time_us"] = stats_json(t);
  j["tflops"] = tflops(r.flops, t.median_us);
  j["tbps"] = tbps(r.min_bytes, t.median_us);
  j["ratio"] = t.median_us > 0 ? r.floors.max_us() / t.median_us : 0.0;
  if (r.peers.measured && t.median_us > 0)
    j["speedup_vs_cublas_bf16"] = r.peers.cublas_bf16_us() / t.median_us;
  return j;
}

std::string agreement_note(const Agreement& a, const char* what) {
  if (a.elements == 0) return "";
  if (a.ok()) return std::string(what) + " agrees with fp4gemm; ";
  return format("%s DISAGREES with fp4gemm (%lld of %lld elements); ", what, static_cast<long long>(a.mismatches),
                static_cast<long long>(a.elements));
}

Json agreement_json(const Agreement& a) {
  return Json{{"elements", a.elements}, {"mismatches", a.mismatches}, {"max_rel_diff", a.max_rel}, {"agree", a.ok()}};
}

Json peers_json(const CaseResult& r) {
  const PeerResults& p = r.peers;
  Json j;
  j["dequant_only"] = {{"time_us", stats_json(p.dequant)}};
  j["dequant_cublas"] = time_block(p.dequant_cublas, r);
  j["dequant_cublas"]["dequant_us"] = p.dequant.median_us;
  Json b = time_block(p.grouped_is_best() ? p.grouped : p.gemm_loop, r);
  b["method"] = p.cublas_method();
  b["gemm_ex_loop_us"] = stats_json(p.gemm_loop);
  b["grouped_batched_ex_us"] = p.grouped_ok ? stats_json(p.grouped) : Json();
  b["grouped_batched_ex_status"] = p.grouped_ok ? "CUBLAS_STATUS_SUCCESS" : p.grouped_status;
  b["agreement_with_fp4gemm"] = agreement_json(p.cublas_agreement);
  j["cublas_bf16_predequantised"] = b;
  Json c = p.streams_ok ? time_block(p.streams_time, r) : Json::object();
  c["backend"] = p.streams_label;
  c["streams"] = p.streams;
  if (!p.streams_ok) c["error"] = p.streams_status;
  if (p.streams_ok) c["agreement_with_fp4gemm"] = agreement_json(p.streams_agreement);
  j["per_group_streams"] = c;
  j["output_type"] = "bf16";
  return j;
}

DeviceInfo start_bench(const std::string& json_path) {
  DeviceInfo device = require_device();
  require_writable(json_path);
  return device;
}

Ceilings measure_bench_ceilings(cudaStream_t stream) {
  progress("[bench] measuring ceilings (cuBLAS bf16 8192^3, device-to-device copy)...");
  return measure_ceilings(stream);
}

}  // namespace

BenchRun::BenchRun(const std::string& json_path)
    : device(start_bench(json_path)), ceilings(measure_bench_ceilings(stream.get())), flusher(device.l2_bytes) {}

// ---- stdout -------------------------------------------------------------------------------------

void print_device_and_ceilings(std::ostream& os, const std::string& tool, const DeviceInfo& device,
                               const Ceilings& ceilings) {
  os << format("%s %s on %s (sm_%d%d, %d SMs, L2 %.1f MiB), %s\n", tool.c_str(), FP4GEMM_VERSION, device.name.c_str(),
               device.sm_major, device.sm_minor, device.multiprocessors, device.l2_bytes / 1048576.0,
               utc_now().c_str());
  os << format("ceilings, measured now: bf16 cuBLAS %d^3 %.1f TFLOP/s; device-to-device copy %.3f TB/s (read+write)\n",
               kCeilingGemmSize, ceilings.bf16_tflops, ceilings.copy_tbps);
}

void print_bench_header(std::ostream& os, const DeviceInfo& device, const Ceilings& ceilings,
                        const RunSettings& s, std::size_t flush_bytes, bool peers, int settle_ms) {
  print_device_and_ceilings(os, "fp4gemm bench", device, ceilings);
  os << format("settings: %s, %s scales -> %s, backend %s, seed %llu, median of %d reps after %d warm-up, "
               "L2 flushed (%.0f MiB memset) before each rep, %d ms idle before each case%s\n",
               to_string(s.data.format), to_string(s.data.layout), to_string(s.data.out), to_string(s.backend),
               static_cast<unsigned long long>(s.data.seed), s.timing.iters, s.timing.warmup,
               flush_bytes / 1048576.0, settle_ms, peers ? "" : "; peers skipped");
  print_tuning_knobs(os);
}

void print_tuning_knobs(std::ostream& os) {
  if (const auto knobs = tuning_environment(); !knobs.empty()) {
    os << "measurement knobs:";
    for (const auto& [name, value] : knobs) os << " " << name << "=" << value;
    os << "\n";
  }
}

void print_table_head(std::ostream& os) {
  os << format("\n%-7s %-37s %10s %8s %7s %10s %10s %6s %9s  %s\n", "case", "impl", "time_us", "TFLOP/s",
               "TB/s", "cfloor_us", "mfloor_us", "ratio", "vs_cuBLAS", "note");
}

void print_case_rows(std::ostream& os, const CaseResult& r) {
  std::string note = r.shape.describe();
  if (r.time.reps > 0) note += format(" (%d reps)", r.time.reps);
  print_row(os, r.shape.name, "fp4gemm [" + r.label + "]", r.time.median_us, r, note);
  const PeerResults& p = r.peers;
  if (!p.measured) {
    os.flush();
    return;
  }
  print_row(os, "", "dequant+cuBLAS bf16", p.dequant_cublas.median_us, r,
            format("dequant alone %.2f us", p.dequant.median_us));
  const std::string grouped =
      p.grouped_ok ? format("grouped %.2f us", p.grouped.median_us) : "grouped: " + p.grouped_status;
  print_row(os, "", std::string("cuBLAS bf16 predequantised [") + (p.grouped_is_best() ? "grouped" : "loop") + "]",
            p.cublas_bf16_us(), r,
            agreement_note(p.cublas_agreement, "output") + format("per-group loop %.2f us, ", p.gemm_loop.median_us) +
                grouped);
  if (p.streams_ok)
    print_row(os, "", "per-group streams [" + p.streams_label + "]", p.streams_time.median_us, r,
              agreement_note(p.streams_agreement, "output") + format("%d plans on %d streams", p.streams, p.streams));
  else
    os << format("%-7s %-37s %s\n", "", "per-group streams", ("failed: " + p.streams_status).c_str());
  os.flush();
}

void print_legend(std::ostream& os, bool any_fallback) {
  os << "\ntime_us: median over the reps (CUDA events; L2 flushed before each rep, outside the events).\n"
        "TFLOP/s: sum 2*M*N*K / time. TB/s: minimum bytes (A, B, scales, C once each) / time.\n"
        "cfloor_us: FLOPs / measured bf16 cuBLAS rate. mfloor_us: minimum bytes / measured copy bandwidth.\n"
        "ratio: max(cfloor, mfloor) / time (1.0 = at the floor). vs_cuBLAS: time of 'cuBLAS bf16 predequantised'\n"
        "  / time of the row (> 1: faster). Peers write bf16 outputs.\n";
  if (any_fallback)
    os << "*: the fast kernel could not be planned (reason on stderr); the reference kernel ran instead.\n";
}

std::string time_line(const TimingStats& t, double flops, double bytes) {
  return format("time: %.2f us (median of %d, min %.2f) | %.1f TFLOP/s | %.3f TB/s effective", t.median_us, t.reps,
                t.min_us, tflops(flops, t.median_us), tbps(bytes, t.median_us));
}

// ---- JSON ---------------------------------------------------------------------------------------

Json device_json(const DeviceInfo& d) {
  return Json{{"index", d.index},
              {"name", d.name},
              {"sm", std::to_string(d.sm_major) + std::to_string(d.sm_minor)},
              {"multiprocessors", d.multiprocessors},
              {"l2_bytes", d.l2_bytes},
              {"smem_per_block_optin", d.smem_per_block_optin},
              {"has_fast_kernel", d.has_fast_kernel}};
}

Json ceilings_json(const Ceilings& c) {
  return Json{{"bf16_gemm_size", kCeilingGemmSize},
              {"bf16_tflops", c.bf16_tflops},
              {"bf16_gemm_us", c.bf16_gemm_us},
              {"bf16_method", "cublasGemmEx bf16 in/out, CUBLAS_COMPUTE_32F, random non-zero data, median"},
              {"copy_tbps", c.copy_tbps},
              {"copy_us", c.copy_us},
              {"copy_bytes", c.copy_bytes},
              {"copy_method", "cudaMemcpyAsync device-to-device, read+write bytes, median"}};
}

Json tuning_json() {
  Json j = Json::object();
  for (const auto& [name, value] : tuning_environment()) j[name] = value;
  return j;
}

Json settings_json(const RunSettings& s) {
  return Json{{"format", to_string(s.data.format)},
              {"scale_layout", to_string(s.data.layout)},
              {"out_type", to_string(s.data.out)},
              {"backend", to_string(s.backend)},
              {"seed", s.data.seed},
              {"iters", s.timing.iters},
              {"warmup", s.timing.warmup},
              {"budget_s_per_measurement", s.timing.budget_s},
              {"tuning_environment", tuning_json()}};
}

Json bench_document(const std::string& tool, const std::string& suite, const DeviceInfo& device,
                    const Ceilings& ceilings, const RunSettings& s, bool peers, int settle_ms, std::size_t flush_bytes) {
  Json doc;
  doc["tool"] = tool;
  doc["version"] = FP4GEMM_VERSION;
  doc["date"] = utc_now();
  doc["gpu"] = device_json(device);
  doc["ceilings"] = ceilings_json(ceilings);
  Json settings = settings_json(s);
  settings["suite"] = suite;
  settings["peers"] = peers;
  settings["settle_ms"] = settle_ms;
  settings["l2_flush_bytes"] = flush_bytes;
  settings["timing"] = "CUDA events per rep, L2 flushed (cudaMemsetAsync) before each rep outside the events, median";
  doc["settings"] = settings;
  doc["cases"] = Json::array();
  return doc;
}

Json check_json(const CheckReport& c) {
  return Json{{"elements", c.elements},
              {"max_abs_error", c.max_abs},
              {"max_rel_error", c.max_rel},
              {"tolerance_failures", c.tolerance_failures},
              {"nan_mismatches", c.nan_mismatches},
              {"bit_mismatches", c.bit_mismatches},
              {"outside_writes", c.outside_writes},
              {"require_bit_identical", c.require_bit_identical},
              {"fp32_bound", c.fp32_bound},
              {"bound_failures", c.bound_failures},
              {"pass", c.pass()}};
}

Json stats_json(const TimingStats& t) {
  return Json{{"median", t.median_us}, {"min", t.min_us}, {"mean", t.mean_us}, {"max", t.max_us}, {"reps", t.reps}};
}

Json case_json(const CaseResult& r) {
  Json j;
  j["index"] = r.index;
  j["name"] = r.shape.name;
  j["suite"] = r.suite;
  j["shape"] = Json{{"groups", r.shape.m.size()}, {"m", r.shape.m}, {"n", r.shape.n}, {"k", r.shape.k},
                    {"l", r.shape.l > 0 ? Json(r.shape.l) : Json()}};
  j["flops"] = r.flops;
  j["min_bytes"] = r.min_bytes;
  j["floors"] = Json{{"compute_us", r.floors.compute_us}, {"memory_us", r.floors.memory_us}, {"bound", r.floors.bound()}};
  Json f = time_block(r.time, r);
  f["backend_requested"] = to_string(r.requested);
  f["backend"] = r.label;
  f["kernel"] = r.kernel;
  f["fallback"] = !r.fallback_reason.empty();
  f["fallback_reason"] = r.fallback_reason.empty() ? Json() : Json(r.fallback_reason);
  f["plan"] = r.plan_text;
  j["fp4gemm"] = f;
  j["peers"] = r.peers.measured ? peers_json(r) : Json();
  return j;
}

void write_json(const std::string& path, const Json& doc) {
  std::ofstream out(path);
  if (!out) throw Error("--json", -1, "cannot open '" + path + "' for writing");
  out << doc.dump(2) << "\n";
  if (!out) throw Error("--json", -1, "cannot write '" + path + "'");
}

void write_suite_json(const std::string& path, const Json& doc) {
  if (path.empty()) return;
  write_json(path, doc);
  progress("[bench] wrote " + path);
}

CaseRates case_rates(const TimingStats& t, double flops, double bytes, const Floors& floors) {
  if (t.median_us <= 0) return {};
  const double s = t.median_us * 1e-6;
  return {flops / s / 1e12, bytes / s / 1e12, floors.max_us() / t.median_us};
}

void add_rates_json(Json& j, const TimingStats& t, double flops, double bytes, const Floors& floors) {
  const CaseRates r = case_rates(t, flops, bytes, floors);
  j["flops"] = flops;
  j["bytes"] = bytes;
  j["time_us"] = stats_json(t);
  j["tflops"] = r.tflops;
  j["tbps"] = r.tbps;
  j["compute_floor_us"] = floors.compute_us;
  j["memory_floor_us"] = floors.memory_us;
  j["bound"] = floors.bound();
  j["ratio"] = r.ratio;
}

void require_writable(const std::string& path) {
  if (path.empty()) return;
  std::ofstream out(path, std::ios::app);
  if (!out) throw Error("--json", -1, "cannot open '" + path + "' for writing");
}

}  // namespace fp4gemm::cli
