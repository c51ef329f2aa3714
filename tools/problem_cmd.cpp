// `fp4gemm grouped` and `fp4gemm gemm`: time one problem, optionally check it against the reference.
#include <iostream>

#include "check.hpp"
#include "cli.hpp"
#include "report.hpp"
#include "host/plans/fused_plan.hpp"  // trace_report

namespace fp4gemm::cli {

namespace {

Json problem_json(const char* command, const ProblemShape& shape, const DeviceInfo& device,
                  const RunSettings& s, const PlanChoice& plan, const TimingStats& t) {
  Json doc;
  std::string tool = "fp4gemm ";
  tool.append(command);
  doc["tool"] = tool;
  doc["version"] = FP4GEMM_VERSION;
  doc["date"] = utc_now();
  doc["gpu"] = device_json(device);
  doc["settings"] = settings_json(s);
  doc["shape"] = Json{{"groups", shape.m.size()}, {"m", shape.m}, {"n", shape.n}, {"k", shape.k},
                      {"l", shape.l > 0 ? Json(shape.l) : Json()}};
  doc["flops"] = plan.plan->flops();
  doc["min_bytes"] = plan.plan->min_bytes();
  doc["backend"] = plan.label();
  doc["kernel"] = plan.plan->kernel_name();
  doc["fallback_reason"] = plan.fell_back ? Json(plan.fallback_reason) : Json();
  doc["plan"] = plan.plan->describe();
  doc["time_us"] = stats_json(t);
  doc["tflops"] = t.median_us > 0 ? plan.plan->flops() / (t.median_us * 1e-6) / 1e12 : 0.0;
  doc["tbps"] = t.median_us > 0 ? plan.plan->min_bytes() / (t.median_us * 1e-6) / 1e12 : 0.0;
  return doc;
}

// Shared by both commands: data, plan (with fallback), optional check, timing, report.
int run_problem(const char* command, const ProblemShape& shape, const RunSettings& s, bool check) {
  const DeviceInfo device = require_device();
  require_writable(s.json_path);
  ProblemData data(shape, s.data);
  const std::vector<GroupDesc> descs = data.descs();
  const PlanChoice plan = make_plan(descs, s);
  Stream stream;

  std::cout << "fp4gemm " << command << ": " << shape.describe() << ", " << to_string(s.data.format) << " "
            << to_string(s.data.layout) << " scales -> " << to_string(s.data.out) << "\n";
  std::cout << "plan: " << plan.plan->describe() << (plan.fell_back ? " (fallback from auto)" : "") << "\n";
  CheckReport report;
  if (check) {
    data.poison_outputs(stream.get());
    plan.plan->run(stream.get());
    CLI_CUDA_CHECK(cudaStreamSynchronize(stream.get()), "check (run)");
    std::string line = "[";
    line.append(command).append("] checking against the CPU reference...");
    progress(line);
    report = check_against_reference(data);
    std::cout << report.summary() << "\n";
  }
  const L2Flusher flusher(device.l2_bytes);
  const TimingStats t = time_region(stream.get(), &flusher, s.timing, [&](cudaStream_t st) { plan.plan->run(st); });
  std::cout << time_line(t, plan.plan->flops(), plan.plan->min_bytes()) << "\n";
  std::cout << detail::sm90::trace_report(s.data.format);  // a trace build's per-CTA cycle counters ("" otherwise)
  if (!s.json_path.empty()) {
    Json doc = problem_json(command, shape, device, s, plan, t);
    doc["check"] = check ? check_json(report) : Json();
    write_json(s.json_path, doc);
  }
  return check && !report.pass() ? 1 : 0;
}

}  // namespace

int run_grouped(const GroupedOptions& o) {
  const RunSettings s = resolve_settings(o);
  return run_problem("grouped", grouped_shape(o, s.data.format), s, o.check);
}

int run_gemm(const GemmOptions& o) {
  const RunSettings s = resolve_settings(o);
  return run_problem("gemm", gemm_shape(o, s.data.format), s, o.check);
}

}  // namespace fp4gemm::cli
