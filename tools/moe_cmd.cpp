// `fp4gemm moe`: time one MoE layer GEMM (fp4gemm::MoeGemm) on a random top-k routing; optional
// --check against reference::moe_gemm and a --dynamic loop with a new routing every step.
#include <iostream>

#include "cli.hpp"
#include "moe_problem.hpp"
#include "report.hpp"
#include "tuning_env.hpp"
#include "host/plans/fused_plan.hpp"  // trace_report

namespace fp4gemm::cli {

MoeSettings moe_settings(const std::string& act, const std::string& scales, const std::string& out,
                         const std::string& layout, const std::string& routing, const std::string& values,
                         std::uint64_t seed) {
  MoeSettings s;
  if (act == "bf16") {
    s.format = Format::mxfp4;  // W4A16: MXFP4 weights (their dequantised values are exact in bf16)
    s.activation = MoeActivation::bf16;
  } else if (act == "nvfp4" || act == "mxfp4") {
    s.format = parse_format(act);
  } else {
    throw Error("--act", -1, "unknown activation '" + act + "' (expected nvfp4, mxfp4 or bf16)");
  }
  try {
    s.scales = parse_layout(scales);
  } catch (const Error&) {
    throw Error("--scales", -1, "unknown weight scale layout '" + scales + "' (expected blocked or linear)");
  }
  s.out = parse_out(out);
  if (layout == "contiguous") s.layout = MoeLayout::contiguous;
  else if (layout == "masked") s.layout = MoeLayout::masked;
  else throw Error("--layout", -1, "unknown layout '" + layout + "' (expected contiguous or masked)");
  s.routing = routing;
  if (values != "full" && values != "gpumode" && values != "checkpoint")
    throw Error("--values", -1, "unknown values '" + values + "' (expected full, gpumode or checkpoint)");
  s.gpumode_values = values == "gpumode";
  s.checkpoint_scales = values == "checkpoint";
  s.seed = seed;
  s.tuning = tuning_from_environment();
  return s;
}

namespace {

// The routings a run uses: one, or (--dynamic) a pool drawn up front so that drawing them on the
// host is not what the loop measures.
constexpr int kDynamicPool = 16;

std::string routing_line(const HostRouting& r, int experts) {
  return "routing: " + std::to_string(r.rows) + " rows, " + std::to_string(r.active_experts) + " of " +
         std::to_string(experts) + " experts active, at most " + std::to_string(r.max_rows) + " rows per expert";
}

}  // namespace

int run_moe(const MoeCommandOptions& o) {
  MoeSettings s = moe_settings(o.act, o.scales, o.out, o.layout, o.routing, o.values, o.seed);
  s.pieces = o.weight_layout == "pieces";
  const MoeShape shape{"moe", o.experts, o.n, o.k, o.tokens, o.topk};
  validate_moe_shape(shape, s);
  if (o.iters < 1) throw Error("--iters", -1, "must be at least 1 (got " + std::to_string(o.iters) + ")");
  if (o.warmup < 0) throw Error("--warmup", -1, "must be >= 0 (got " + std::to_string(o.warmup) + ")");
  TimingConfig timing;
  timing.iters = o.iters;
  timing.warmup = o.warmup;
  const DeviceInfo device = require_device();
  require_writable(o.json);

  std::mt19937_64 rng(o.seed);
  std::vector<HostRouting> pool;
  for (int i = 0; i < (o.dynamic ? kDynamicPool : 1); ++i)
    pool.push_back(draw_routing(shape.experts, shape.tokens, shape.topk, s.routing, rng));
  MoeProblem problem(shape, s, pool);
  Stream stream;

  std::cout << "fp4gemm moe: " << shape.describe() << ", " << s.describe() << "\n";
  std::cout << routing_line(problem.routing(), shape.experts) << "; capacity " << problem.capacity() << "\n";
  std::cout << "plan: " << problem.plan().describe() << "\n";
  print_tuning_knobs(std::cout);
  CheckReport report;
  if (o.check) {
    progress("[moe] checking against the CPU reference (reference::moe_gemm)...");
    report = problem.check(stream.get());
    std::cout << report.summary() << "\n";
  }
  const L2Flusher flusher(device.l2_bytes);
  const TimingStats t = time_region(stream.get(), &flusher, timing, [&](cudaStream_t st) { problem.run(st); });
  const double flops = problem.flops(), bytes = problem.bytes();
  std::cout << time_line(t, flops, bytes) << "\n";
  std::cout << detail::sm90::trace_report(s.format);  // a trace build's per-CTA cycle counters ("" otherwise)
  double dynamic_us = 0;
  if (o.dynamic) {
    dynamic_us = problem.dynamic_us_per_step(o.iters, stream.get());
    std::cout << "dynamic routing: " << o.iters << " steps, each a new routing (of " << kDynamicPool
              << " drawn up front) uploaded with cudaMemcpyAsync from pinned memory, then run; no L2 flush: "
              << dynamic_us << " us/step wall\n";
  }
  if (!o.json.empty()) {
    Json doc;
    doc["tool"] = "fp4gemm moe";
    doc["version"] = FP4GEMM_VERSION;
    doc["date"] = utc_now();
    doc["gpu"] = device_json(device);
    doc["shape"] = Json{{"experts", shape.experts}, {"n", shape.n}, {"k", shape.k}, {"tokens", shape.tokens},
                        {"topk", shape.topk}};
    doc["settings"] = Json{{"act", o.act}, {"format", to_string(s.format)}, {"activation", to_string(s.activation)},
                           {"weight_scales", to_string(s.scales)}, {"out_type", to_string(s.out)},
                           {"layout", to_string(s.layout)}, {"routing", s.routing}, {"values", o.values}, {"weight_layout", o.weight_layout},
                           {"seed", o.seed}, {"iters", o.iters}, {"warmup", o.warmup}};
    const HostRouting& r = pool.front();
    doc["routing"] = Json{{"rows", r.rows}, {"active_experts", r.active_experts}, {"max_rows_per_expert", r.max_rows},
                          {"capacity", problem.capacity()}};
    doc["plan"] = problem.plan().describe();
    doc["tuning_environment"] = tuning_json();
    doc["flops"] = flops;
    doc["bytes"] = bytes;
    doc["time_us"] = stats_json(t);
    doc["tflops"] = t.median_us > 0 ? flops / (t.median_us * 1e-6) / 1e12 : 0.0;
    doc["tbps"] = t.median_us > 0 ? bytes / (t.median_us * 1e-6) / 1e12 : 0.0;
    doc["dynamic_us_per_step"] = o.dynamic ? Json(dynamic_us) : Json();
    doc["check"] = o.check ? check_json(report) : Json();
    write_json(o.json, doc);
  }
  return o.check && !report.pass() ? 1 : 0;
}

}  // namespace fp4gemm::cli
