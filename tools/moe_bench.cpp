// `fp4gemm bench --suite moe`: the MoE layer GEMMs of SPEC 4's four models at 1..16384 tokens,
// with floors and the dynamic-routing loop. (Peers such as torch._grouped_mm and triton_kernels run
// from Python: python -m fp4gemm.bench --moe, ../shared/peers/.)
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "cli.hpp"
#include "digest.hpp"
#include "moe_problem.hpp"
#include "report.hpp"

namespace fp4gemm::cli {

namespace {

struct MoeModel {
  const char* name;
  int experts, topk;
  struct Gemm {
    const char* name;
    int n, k;
  } gemms[2];
};

// SPEC 4's MoE suite: gate-up (N = 2 x intermediate) and down projections of each model.
constexpr MoeModel kModels[] = {
    {"deepseek-v3", 256, 8, {{"gate-up", 4096, 7168}, {"down", 7168, 2048}}},
    {"qwen3-30b-a3b", 128, 8, {{"gate-up", 1536, 2048}, {"down", 2048, 768}}},
    {"gpt-oss-120b", 128, 4, {{"gate-up", 5760, 2880}, {"down", 2880, 2880}}},
    {"mixtral-8x7b", 8, 2, {{"gate-up", 28672, 4096}, {"down", 4096, 14336}}},
};
constexpr int kTokens[] = {1, 16, 64, 256, 1024, 4096, 16384};
constexpr int kDynamicSteps = 50;
constexpr int kRoutingPool = 8;

std::vector<MoeShape> moe_suite() {
  std::vector<MoeShape> shapes;
  for (const MoeModel& m : kModels)
    for (const MoeModel::Gemm& g : m.gemms)
      for (int t : kTokens)
        shapes.push_back({std::string(m.name) + " " + g.name, m.experts, g.n, g.k, t, m.topk});
  return shapes;
}

}  // namespace

int run_moe_suite(const BenchOptions& o) {
  const RunSettings rs = resolve_settings(o);
  MoeSettings s = moe_settings(o.act.empty() ? to_string(rs.data.format) : o.act,
                               to_string(rs.data.layout), to_string(rs.data.out), "contiguous", "uniform",
                               o.values.empty() ? "full" : o.values, rs.data.seed);
  s.pieces = o.weight_layout == "pieces";
  const std::vector<MoeShape> all = moe_suite();
  std::vector<std::pair<int, MoeShape>> cases;
  for (int index : pick_cases(o.cases, all.size(), "moe")) cases.emplace_back(index, all[index - 1]);
  for (const auto& c : cases) validate_moe_shape(c.second, s);
  const BenchRun run(rs.json_path);
  const auto& [device, stream, ceilings, flusher] = run;
  print_device_and_ceilings(std::cout, "fp4gemm bench --suite moe", device, ceilings);
  std::cout << "settings: " << s.describe() << ", median of " << rs.timing.iters << " reps after "
            << rs.timing.warmup << " warm-up, L2 flushed before each rep; dyn: " << kDynamicSteps
            << " steps, each uploading a new routing (cudaMemcpyAsync) and running, wall time per step\n\n";
  std::printf("%-4s %-22s %6s %7s %6s %10s %8s %7s %10s %10s %6s %10s\n", "case", "gemm", "T", "rows", "active",
              "time_us", "TFLOP/s", "TB/s", "cfloor_us", "mfloor_us", "ratio", "dyn_us");
  std::fflush(stdout);

  Json doc;
  doc["tool"] = "fp4gemm bench --suite moe";
  doc["version"] = FP4GEMM_VERSION;
  doc["date"] = utc_now();
  doc["gpu"] = device_json(device);
  doc["ceilings"] = ceilings_json(ceilings);
  doc["settings"] = Json{{"format", to_string(s.format)},        {"activation", to_string(s.activation)},
                         {"weight_scales", to_string(s.scales)}, {"out_type", to_string(s.out)},
                         {"routing", s.routing},                 {"values", o.values.empty() ? "full" : o.values},
                         {"seed", s.seed},                       {"iters", rs.timing.iters},
                         {"warmup", rs.timing.warmup},           {"settle_ms", o.settle_ms},
                         {"dynamic_steps", kDynamicSteps},       {"weight_layout", o.weight_layout}};
  doc["cases"] = Json::array();
  std::mt19937_64 rng(s.seed);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& [index, shape] = cases[i];
    progress("[bench] moe case " + std::to_string(i + 1) + "/" + std::to_string(cases.size()) + " (" + shape.name +
             ", " + shape.describe() + ")...");
    std::vector<HostRouting> pool;
    for (int r = 0; r < kRoutingPool; ++r)
      pool.push_back(draw_routing(shape.experts, shape.tokens, shape.topk, s.routing, rng));
    MoeProblem problem(shape, s, std::move(pool));
    CLI_CUDA_CHECK(cudaDeviceSynchronize(), "bench");
    if (o.settle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.settle_ms));  // as bench.cpp
    const TimingStats t = time_region(stream.get(), &flusher, rs.timing, [&](cudaStream_t st) { problem.run(st); });
    if (digest_enabled()) {
      Digest d;
      d.add(problem.output().get(), problem.output().bytes(), stream.get());
      d.print("moe", index);
    }
    const double flops = problem.flops(), bytes = problem.bytes();
    const Floors floors = floors_for(flops, bytes, ceilings);
    const HostRouting routing = problem.routing();  // the routing timed (dynamic changes it)
    const double dyn_us = problem.dynamic_us_per_step(kDynamicSteps, stream.get());
    const CaseRates r = case_rates(t, flops, bytes, floors);
    std::printf("%-4d %-22s %6d %7d %6d %10.2f %8.1f %7.3f %10.2f %10.2f %6.2f %10.2f\n", index, shape.name.c_str(),
                shape.tokens, routing.rows, routing.active_experts, t.median_us, r.tflops, r.tbps, floors.compute_us,
                floors.memory_us, r.ratio, dyn_us);
    std::fflush(stdout);
    Json j{{"index", index},
           {"gemm", shape.name},
           {"experts", shape.experts},
           {"n", shape.n},
           {"k", shape.k},
           {"tokens", shape.tokens},
           {"topk", shape.topk},
           {"rows", routing.rows},
           {"active_experts", routing.active_experts},
           {"max_rows_per_expert", routing.max_rows},
           {"plan", problem.plan().describe()}};
    add_rates_json(j, t, flops, bytes, floors);
    j["dynamic_us_per_step"] = dyn_us;
    doc["cases"].push_back(std::move(j));
  }
  std::cout << "\nrows: tokens x topk (uniform top-k routing); active: experts with rows. TFLOP/s: 2 rows N K / time.\n"
               "TB/s: active experts' weights + weight scales + activations (each token once) + output, / time.\n"
               "cfloor / mfloor: FLOPs / measured bf16 rate, bytes / measured copy bandwidth; ratio: the larger\n"
               "floor / time. dyn_us: wall time per step of the dynamic-routing loop (no L2 flush).\n";
  write_suite_json(rs.json_path, doc);
  return 0;
}

}  // namespace fp4gemm::cli
