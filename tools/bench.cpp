// `fp4gemm bench`: the seed and dense suites (SPEC 4) with floors and peers, table + JSON; the moe
// suite is moe_bench.cpp, the dual suite dual_bench.cpp.
#include <chrono>
#include <iostream>
#include <thread>

#include "cli.hpp"
#include "digest.hpp"
#include "peers.hpp"
#include "report.hpp"

namespace fp4gemm::cli {

namespace {

struct SuiteCase {
  std::string suite;
  ProblemShape shape;
};

// SPEC 4: GPU MODE's nvfp4_group_gemm cases and seed 004's dense --mnkl problems.
std::vector<SuiteCase> suite_cases(const std::string& suite) {
  std::vector<SuiteCase> cases;
  if (suite == "seed" || suite == "all") {
    cases.push_back({"seed", {"seed1", {80, 176, 128, 72, 64, 248, 96, 160}, 4096, 7168, 0}});
    cases.push_back({"seed", {"seed2", {40, 76, 168, 72, 164, 148, 196, 160}, 7168, 2048, 0}});
    cases.push_back({"seed", {"seed3", {192, 320}, 3072, 4096, 0}});
    cases.push_back({"seed", {"seed4", {128, 384}, 4096, 1536, 0}});
  }
  if (suite == "dense" || suite == "all") {
    cases.push_back({"dense", {"dense1", {8192}, 8192, 1024, 1}});  // --mnkl 8192,8192,1024,1
    cases.push_back({"dense", {"dense2", {2048}, 2048, 512, 1}});   // --mnkl 2048,2048,512,1
  }
  if (cases.empty())
    throw Error("--suite", -1, "unknown suite '" + suite + "' (expected seed, dense, all, moe, dual or layer)");
  return cases;
}

std::vector<std::pair<int, SuiteCase>> select_cases(const BenchOptions& o, Format format) {
  const std::vector<SuiteCase> all = suite_cases(o.suite);
  std::vector<std::pair<int, SuiteCase>> picked;
  for (int index : pick_cases(o.cases, all.size(), o.suite)) picked.emplace_back(index, all[index - 1]);
  for (const auto& p : picked) validate_shape(p.second.shape, format, "--format", "--format", "--format");
  return picked;
}

// Times peer (b) both ways; the grouped call is tried once first since it may be unsupported.
void time_cublas_predequantised(PeerResults& p, const CublasPeers& cub, cublasHandle_t handle,
                                const RunSettings& s, const L2Flusher& flusher, cudaStream_t stream) {
  p.gemm_loop = time_region(stream, &flusher, s.timing, [&](cudaStream_t st) { cub.gemm_loop(handle, st); });
  const cublasStatus_t status = cub.gemm_grouped(handle, stream);
  CLI_CUDA_CHECK(cudaStreamSynchronize(stream), "peers (cublasGemmGroupedBatchedEx)");
  if (status != CUBLAS_STATUS_SUCCESS) {
    p.grouped_status = cublas_status_name(status);
    return;
  }
  p.grouped_ok = true;
  p.grouped = time_region(stream, &flusher, s.timing, [&](cudaStream_t st) {
    CLI_CUBLAS_CHECK(cub.gemm_grouped(handle, st), "peers (cublasGemmGroupedBatchedEx)");
  });
}

// Peer (c) with the backend the main row ran (the reference kernel after a fallback).
void time_streams(PeerResults& p, const ProblemData& data, const RunSettings& s, const PlanChoice& main,
                  const OutputSnapshot& ours, const L2Flusher& flusher, cudaStream_t stream) {
  Options options;
  options.format = s.data.format;
  options.scale_layout = s.data.layout;
  options.out_type = s.data.out;
  options.backend = main.fell_back ? Backend::reference : main.requested;
  options.tuning = s.tuning;
  p.streams_label = main.label();
  try {
    StreamsPeer peer(data, options);
    p.streams = peer.streams();
    data.poison_outputs(stream);
    p.streams_time = time_region(stream, &flusher, s.timing, [&](cudaStream_t st) { peer.run(st); });
    p.streams_ok = true;
    p.streams_agreement = compare_identical(data, ours, snapshot_outputs(data));
  } catch (const Error& e) {
    p.streams_status = strip_prefix(e.what());
  }
}

PeerResults time_peers(const ProblemData& data, const RunSettings& s, const PlanChoice& main,
                       const OutputSnapshot& ours, const L2Flusher& flusher, cudaStream_t stream) {
  PeerResults p;
  CublasHandle handle;
  CublasPeers cub(data);
  p.dequant = time_region(stream, &flusher, s.timing, [&](cudaStream_t st) { cub.dequantize_all(st); });
  p.dequant_cublas = time_region(stream, &flusher, s.timing,
                                 [&](cudaStream_t st) { cub.dequantize_and_gemm(handle.get(), st); });
  // The operands are now dequantised in advance (the region above wrote them).
  time_cublas_predequantised(p, cub, handle.get(), s, flusher, stream);
  p.cublas_agreement = compare_with_bf16(data, ours, cub.outputs());
  time_streams(p, data, s, main, ours, flusher, stream);
  p.measured = true;
  return p;
}

CaseResult run_case(int index, const SuiteCase& c, const RunSettings& s, const Ceilings& ceilings,
                    const L2Flusher& flusher, cudaStream_t stream, bool with_peers, int settle_ms,
                    const std::string& tag) {
  progress(tag + ": generating data (" + c.shape.describe() + ")...");
  ProblemData data(c.shape, s.data);
  const std::vector<GroupDesc> descs = data.descs();
  const PlanChoice plan = make_plan(descs, s);

  CaseResult r;
  r.index = index;
  r.suite = c.suite;
  r.shape = c.shape;
  r.flops = plan.plan->flops();
  r.min_bytes = plan.plan->min_bytes();
  r.floors = floors_for(r.flops, r.min_bytes, ceilings);
  r.label = plan.label();
  r.kernel = plan.plan->kernel_name();
  r.plan_text = plan.plan->describe();
  r.fallback_reason = plan.fallback_reason;
  r.requested = s.backend;

  // Measured on H200: seed case 1 timed right after the cuBLAS 8192^3 ceiling loop took 138.7 us,
  // after seed case 2 128.3 us, alone in a process 124 us. An idle pause before each case keeps one
  // case's timing from depending on what ran before it.
  CLI_CUDA_CHECK(cudaDeviceSynchronize(), "bench");
  if (settle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
  progress(tag + ": timing fp4gemm [" + r.label + "]...");
  data.poison_outputs(stream);
  r.time = time_region(stream, &flusher, s.timing, [&](cudaStream_t st) { plan.plan->run(st); });
  if (digest_enabled()) {
    Digest d;
    for (const GroupBuffers& g : data.groups()) d.add(g.c.get(), g.c.bytes(), stream);
    d.print(c.suite.c_str(), index);
  }
  if (with_peers) {
    const OutputSnapshot ours = snapshot_outputs(data);
    progress(tag + ": timing peers...");
    r.peers = time_peers(data, s, plan, ours, flusher, stream);
  }
  return r;
}

}  // namespace

int run_bench(const BenchOptions& o) {
  if (!o.values.empty()) {
    const bool ok = o.suite == "dual" ? o.values != "checkpoint" : o.suite == "layer" ? o.values != "full"
                                                                  : o.suite == "moe" && o.values != "gpumode";
    if (!ok)
      throw Error("--values", -1,
                  "'" + o.values + "' does not apply to the " + o.suite +
                      " suite: the dual suite takes gpumode or full, the moe suite full or checkpoint, the layer suite "
                      "gpumode or checkpoint (seed and dense use GPU MODE values)");
  }
  if (o.suite == "moe") return run_moe_suite(o);
  if (o.suite == "layer") return run_layer_suite(o);
  if (!o.act.empty())
    throw Error("--act", -1, "applies to the moe and layer suites only (the other suites are W4A4 in --format)");
  if (o.suite == "dual") return run_dual_suite(o);
  const RunSettings s = resolve_settings(o);
  const auto cases = select_cases(o, s.data.format);
  const BenchRun run(s.json_path);
  const auto& [device, stream, ceilings, flusher] = run;

  print_bench_header(std::cout, device, ceilings, s, flusher.bytes(), !o.no_peers, o.settle_ms);
  print_table_head(std::cout);
  Json doc = bench_document("fp4gemm bench", o.suite, device, ceilings, s, !o.no_peers, o.settle_ms, flusher.bytes());

  bool any_fallback = false;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string tag = "[bench] case " + std::to_string(i + 1) + "/" + std::to_string(cases.size()) + " (" +
                            cases[i].second.shape.name + ")";
    const CaseResult r = run_case(cases[i].first, cases[i].second, s, ceilings, flusher, stream.get(),
                                  !o.no_peers, o.settle_ms, tag);
    any_fallback = any_fallback || !r.fallback_reason.empty();
    print_case_rows(std::cout, r);
    doc["cases"].push_back(case_json(r));
  }
  print_legend(std::cout, any_fallback);
  write_suite_json(s.json_path, doc);
  return 0;
}

}  // namespace fp4gemm::cli
