// `fp4gemm bench --suite layer`: the whole MoE expert layer (routing, activation quantisation,
// GEMM1 + SwiGLU, GEMM2, top-k combine: fp4gemm::MoeLayer) of four models at T = 1 .. 4096 tokens (SPEC 4's T
// 1 / 8 / 64 / 512 / 4096 among them),
// with the bf16-rate and copy-bandwidth floors measured in the same run. The torch peers (the same
// layer in torch bf16 and FP8) need torch and run from bench/layer_vs_torch.py, which calls this
// CLI's `layer` command in the same process tree.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "cli.hpp"
#include "digest.hpp"
#include "layer_problem.hpp"
#include "report.hpp"

namespace fp4gemm::cli {

namespace {

constexpr int kLayerTokens[] = {1, 8, 32, 128, 256, 1024, 4096};
// SPEC 4's layer suite also times T 64 and 512 (issue 52's table): cases 29-36, after the first 28, so that those keep
// the numbers earlier results cite them by.
constexpr int kLayerTokensSpec[] = {64, 512};
constexpr int kLayerPlanTokens = 4096;  // one plan per model covers every case
static_assert(kLayerTokens[std::size(kLayerTokens) - 1] <= kLayerPlanTokens &&
              kLayerTokensSpec[std::size(kLayerTokensSpec) - 1] <= kLayerPlanTokens);

struct LayerCase {
  const LayerModel* model;
  int tokens;
};

std::vector<LayerCase> layer_suite() {
  std::vector<LayerCase> cases;
  for (const LayerModel& m : layer_models())
    for (int t : kLayerTokens) cases.push_back({&m, t});
  for (const LayerModel& m : layer_models())
    for (int t : kLayerTokensSpec) cases.push_back({&m, t});
  return cases;
}

}  // namespace

int run_layer_suite(const BenchOptions& o) {
  const std::string act = o.act.empty() ? "nvfp4" : o.act;
  const RunSettings rs = resolve_settings(o);
  const std::vector<LayerCase> all = layer_suite();
  std::vector<std::pair<int, LayerCase>> cases;
  for (int index : pick_cases(o.cases, all.size(), "layer")) cases.emplace_back(index, all[index - 1]);
  // Run a model's cases together (its appended T 64 / 512 right after its first seven), so that each model's
  // weights are made and planned once; the cases keep their numbers.
  std::stable_sort(cases.begin(), cases.end(),
                   [](const auto& x, const auto& y) { return x.second.model < y.second.model; });
  for (const auto& c : cases) validate_layer_model(*c.second.model, act);
  const BenchRun run(rs.json_path);
  const auto& [device, stream, ceilings, flusher] = run;
  print_device_and_ceilings(std::cout, "fp4gemm bench --suite layer", device, ceilings);
  std::cout << "settings: " << act << (act == "bf16" ? " activations x mxfp4 weights (W4A16)" : " (W4A4)")
            << ", uniform top-k routing (distinct experts per token), random data (nibbles, scales near 1/8..1), "
            << "median of " << rs.timing.iters << " reps after " << rs.timing.warmup
            << " warm-up, L2 flushed before each rep; one plan per model (max T 4096), eager runs (graph cache)\n\n";
  std::printf("%-4s %-14s %5s %6s %10s %8s %7s %10s %10s %6s\n", "case", "model", "T", "active", "time_us", "TFLOP/s",
              "TB/s", "cfloor_us", "mfloor_us", "ratio");
  std::fflush(stdout);

  Json doc;
  doc["tool"] = "fp4gemm bench --suite layer";
  doc["version"] = FP4GEMM_VERSION;
  doc["date"] = utc_now();
  doc["gpu"] = device_json(device);
  doc["ceilings"] = ceilings_json(ceilings);
  doc["settings"] = Json{{"act", act},
                         {"seed", rs.data.seed},
                         {"iters", rs.timing.iters},
                         {"warmup", rs.timing.warmup},
                         {"settle_ms", o.settle_ms},
                         {"decode_tokens", o.decode_tokens},
                         {"weight_layout", o.weight_layout},
                         {"values", o.values.empty() ? std::string("gpumode") : o.values}};
  doc["cases"] = Json::array();
  // One plan (and one weight set) per model: the cases of a model run in order on it.
  std::unique_ptr<LayerProblem> problem;
  const LayerModel* planned = nullptr;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& [index, c] = cases[i];
    const LayerModel& m = *c.model;
    if (planned != c.model) {
      problem.reset();  // the previous model's weights first
      LayerProblemOptions lo;
      lo.decode_tokens = o.decode_tokens, lo.checkpoint_scales = o.values == "checkpoint";
      lo.pieces = o.weight_layout == "pieces";
      problem = std::make_unique<LayerProblem>(m, act, kLayerPlanTokens, rs.data.seed, stream.get(), lo);
      planned = c.model;
    }
    progress("[bench] layer case " + std::to_string(i + 1) + "/" + std::to_string(cases.size()) + " (" + m.name +
             ", T " + std::to_string(c.tokens) + ")...");
    problem->set_tokens(c.tokens, rs.data.seed + c.tokens, stream.get());
    problem->run(stream.get());
    problem->check(stream.get());  // bad routing data would throw here, naming the argument
    if (o.settle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.settle_ms));  // as bench.cpp
    const TimingStats t =
        time_region(stream.get(), &flusher, rs.timing, [&](cudaStream_t st) { problem->run(st); });
    problem->check(stream.get());
    if (digest_enabled()) {
      Digest d;
      d.add(problem->output(), static_cast<std::size_t>(c.tokens) * m.hidden * 2, stream.get());
      d.print("layer", index);
    }
    const double flops = problem->flops(), bytes = problem->bytes();
    const Floors floors = floors_for(flops, bytes, ceilings);
    const CaseRates r = case_rates(t, flops, bytes, floors);
    std::printf("%-4d %-14s %5d %6d %10.2f %8.1f %7.3f %10.2f %10.2f %6.2f\n", index, m.name.c_str(), c.tokens,
                problem->active_experts(), t.median_us, r.tflops, r.tbps, floors.compute_us, floors.memory_us, r.ratio);
    std::fflush(stdout);
    Json j{{"index", index},
           {"model", m.name},
           {"experts", m.experts},
           {"hidden", m.hidden},
           {"inter", m.inter},
           {"topk", m.topk},
           {"activation", m.swigluoai ? "swigluoai" : "silu"},
           {"tokens", c.tokens},
           {"active_experts", problem->active_experts()},
           {"plan", problem->describe()}};
    add_rates_json(j, t, flops, bytes, floors);
    doc["cases"].push_back(std::move(j));
  }
  std::cout << "\nT: tokens; active: experts with rows. TFLOP/s: 2 T topk (2 I H + H I) / time. TB/s: the active\n"
               "experts' w13 and w2 with their scales + the tokens in and out (bf16), / time. cfloor / mfloor:\n"
               "FLOPs / measured bf16 rate, bytes / measured copy bandwidth; ratio: the larger floor / time.\n"
               "Peers (torch bf16 and FP8 layers, same run): python3 bench/layer_vs_torch.py --cli <this binary>.\n";
  write_suite_json(rs.json_path, doc);
  return 0;
}

}  // namespace fp4gemm::cli
