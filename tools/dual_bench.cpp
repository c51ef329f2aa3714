// `fp4gemm bench --suite dual` (issue 21): GPU MODE's nvfp4_dual_gemm shapes, C = silu(A B1^T) *
// (A B2^T) with L = 1; per shape, in one run: the fused fp4gemm dual GEMM, the unfused fp4gemm path
// (two plain GEMMs + the elementwise kernel), cuBLAS bf16 on operands dequantised in advance (two
// GEMMs + the same kernel), and the bf16 floor 4 M N K / the cuBLAS bf16 rate measured at start-up.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <thread>

#include "cli.hpp"
#include "digest.hpp"
#include "dual_problem.hpp"
#include "peers.hpp"
#include "report.hpp"

namespace fp4gemm::cli {

namespace {

struct DualShape {
  const char* name;
  int m, n, k;
};

// GPU MODE's nvfp4_dual_gemm benchmark shapes (M, N, K), L = 1.
constexpr DualShape kDualShapes[] = {
    {"dual1", 256, 4096, 7168},
    {"dual2", 512, 4096, 7168},
    {"dual3", 256, 3072, 4096},
    {"dual4", 512, 3072, 7168},
};

constexpr std::size_t kBf16Bytes = 2;

// The cuBLAS peer: A, B1 and B2 of every group dequantised to bf16 once, at construction; a run is,
// per group, two cublasGemmEx (bf16 out) and the unfused path's elementwise kernel on bf16.
class CublasDualPeer {
 public:
  CublasDualPeer(const DualProblem& problem, cudaStream_t stream);
  void run(cublasHandle_t handle, cudaStream_t stream) const;

 private:
  struct Group {
    int m = 0, n = 0, k = 0;
    std::int64_t ldc = 0;
    DeviceBuffer a, b1, b2, c1, c2, out;
  };
  std::vector<Group> groups_;
  Options act_;  // the fused plan's options: its activation and constants
};

CublasDualPeer::CublasDualPeer(const DualProblem& problem, cudaStream_t stream) : act_(problem.fused().options()) {
  const DataSettings& s = problem.gate().settings();
  const auto& gate = problem.gate().groups();
  const auto& up = problem.up().groups();
  std::size_t need = 0;
  for (const GroupBuffers& x : gate)
    need += (static_cast<std::size_t>(x.m) * x.k + 2 * static_cast<std::size_t>(x.n) * x.k +
             3 * static_cast<std::size_t>(x.m) * x.ldc) * kBf16Bytes;
  require_free_memory(need + (64u << 20), "peers (bf16 operands)");
  for (std::size_t g = 0; g < gate.size(); ++g) {
    const GroupBuffers &x = gate[g], &u = up[g];
    Group& d = groups_.emplace_back();
    d.m = x.m, d.n = x.n, d.k = x.k, d.ldc = x.ldc;
    if (x.m == 0) continue;
    const std::size_t mk = static_cast<std::size_t>(x.m) * x.k * kBf16Bytes;
    const std::size_t nk = static_cast<std::size_t>(x.n) * x.k * kBf16Bytes;
    const std::size_t mn = static_cast<std::size_t>(x.m) * x.ldc * kBf16Bytes;
    d.a = DeviceBuffer(mk, "peers (bf16 A)");
    d.b1 = DeviceBuffer(nk, "peers (bf16 B1)");
    d.b2 = DeviceBuffer(nk, "peers (bf16 B2)");
    d.c1 = DeviceBuffer(mn, "peers (bf16 A B1^T)");
    d.c2 = DeviceBuffer(mn, "peers (bf16 A B2^T)");
    d.out = DeviceBuffer(mn, "peers (bf16 C)");
    dequantize_to_bf16(x.a.get(), x.lda, x.sfa.get(), x.m, x.k, s.format, s.layout, d.a.get(), stream);
    dequantize_to_bf16(x.b.get(), x.ldb, x.sfb.get(), x.n, x.k, s.format, s.layout, d.b1.get(), stream);
    dequantize_to_bf16(u.b.get(), u.ldb, u.sfb.get(), u.n, u.k, s.format, s.layout, d.b2.get(), stream);
  }
  CLI_CUDA_CHECK(cudaStreamSynchronize(stream), "peers (dequantise)");
}

void CublasDualPeer::run(cublasHandle_t handle, cudaStream_t stream) const {
  CLI_CUBLAS_CHECK(cublasSetStream(handle, stream), "peers");
  for (const Group& d : groups_) {
    if (d.m == 0) continue;
    cublas_bf16_gemm(handle, d.a.get(), d.b1.get(), d.c1.get(), d.m, d.n, d.k, d.ldc);
    cublas_bf16_gemm(handle, d.a.get(), d.b2.get(), d.c2.get(), d.m, d.n, d.k, d.ldc);
    glu_elementwise(d.c1.get(), d.c2.get(), d.out.get(), d.ldc, d.m, d.n, OutType::bf16, act_, stream);
  }
}

struct DualCase {
  int index = 0;
  ProblemShape shape;
  std::string plan;
  double flops = 0, floor_us = 0;
  TimingStats fused, unfused, gemms, cublas;
  bool peers = false;
};

double tflops(double flops, double us) { return us > 0 ? flops / (us * 1e-6) / 1e12 : 0; }
double ratio(double x, double y) { return y > 0 ? x / y : 0; }

std::string fmt(const char* f, double v) {
  char text[64];
  std::snprintf(text, sizeof text, f, v);
  return text;
}

constexpr const char* kHeadFormat = "%-6s %5s %6s %6s %10s %9s %8s %11s %10s %10s %9s\n";
constexpr const char* kRowFormat = "%-6s %5d %6d %6d %10.2f %9.2f %8.3f %11.2f %9.2fx %10s %9s\n";

void print_row(const DualCase& r) {
  const std::string cublas = r.peers ? fmt("%.2f", r.cublas.median_us) : "-";
  const std::string vs_cublas = r.peers ? fmt("%.2fx", ratio(r.cublas.median_us, r.fused.median_us)) : "-";
  std::printf(kRowFormat, r.shape.name.c_str(), r.shape.m[0], r.shape.n, r.shape.k, r.fused.median_us, r.floor_us,
              ratio(r.floor_us, r.fused.median_us), r.unfused.median_us, ratio(r.unfused.median_us, r.fused.median_us),
              cublas.c_str(), vs_cublas.c_str());
  std::fflush(stdout);
}

Json time_json(const TimingStats& t, const DualCase& r) {
  return Json{{"time_us", stats_json(t)},
              {"tflops", tflops(r.flops, t.median_us)},
              {"fraction_of_floor", ratio(r.floor_us, t.median_us)},
              {"speedup_of_fused", ratio(t.median_us, r.fused.median_us)}};
}

Json case_json(const DualCase& r) {
  Json unfused = time_json(r.unfused, r);
  unfused["gemms_only_us"] = stats_json(r.gemms);
  Json cublas;
  if (r.peers) {
    cublas = time_json(r.cublas, r);
    cublas["method"] = "2 x cublasGemmEx (bf16 in/out, CUBLAS_COMPUTE_32F) + elementwise silu(g) * u (bf16, FP32 math)";
  }
  Json fused = time_json(r.fused, r);
  fused.erase("speedup_of_fused");
  return Json{{"index", r.index},
              {"name", r.shape.name},
              {"shape", Json{{"m", r.shape.m[0]}, {"n", r.shape.n}, {"k", r.shape.k}, {"l", r.shape.l}}},
              {"plan", r.plan},
              {"flops", r.flops},
              {"floor_us", r.floor_us},
              {"fused", fused},
              {"unfused_fp4gemm", unfused},
              {"cublas_bf16_predequantised", cublas}};
}

}  // namespace

int run_dual_suite(const BenchOptions& o) {
  RunSettings s = resolve_settings(o);
  check_dual_backend(s.backend);
  s.backend = Backend::fast;  // what the plans use (auto would pick it too; there is no fallback)
  const std::string values = o.values.empty() ? "gpumode" : o.values;
  const std::vector<int> picked = pick_cases(o.cases, std::size(kDualShapes), "dual");
  const BenchRun run(s.json_path);
  const auto& [device, stream, ceilings, flusher] = run;
  const bool peers = !o.no_peers;
  std::unique_ptr<CublasHandle> handle;
  if (peers) handle = std::make_unique<CublasHandle>();

  print_bench_header(std::cout, device, ceilings, s, flusher.bytes(), peers, o.settle_ms);
  std::cout << "dual suite: C = silu(A B1^T) * (A B2^T), L = 1, " << values << " data\n\n";
  std::printf(kHeadFormat, "case", "M", "N", "K", "fused_us", "floor_us", "of_floor", "unfused_us", "vs_unfused",
              "cublas_us", "vs_cuBLAS");
  std::fflush(stdout);

  Json doc = bench_document("fp4gemm bench --suite dual", "dual", device, ceilings, s, peers, o.settle_ms,
                            flusher.bytes());
  doc["settings"]["activation"] = to_string(Epilogue::silu);
  doc["settings"]["values"] = values;
  doc["settings"]["floor"] = "4 M N K / ceilings.bf16_tflops";

  for (std::size_t i = 0; i < picked.size(); ++i) {
    const DualShape& d = kDualShapes[picked[i] - 1];
    DualCase r;
    r.index = picked[i];
    r.shape.name = d.name;
    r.shape.m = {d.m};
    r.shape.n = d.n, r.shape.k = d.k, r.shape.l = 1;
    r.peers = peers;
    const std::string tag =
        "[bench] dual case " + std::to_string(i + 1) + "/" + std::to_string(picked.size()) + " (" + d.name + ")";
    progress(tag + ": generating data (" + r.shape.describe() + ")...");
    const DualProblem problem(r.shape, s.data, values == "full", Epilogue::silu, s.tuning, stream.get());
    r.plan = problem.fused().describe();
    r.flops = problem.fused().flops();  // 4 M N K: both products
    r.floor_us = r.flops / (ceilings.bf16_tflops * 1e12) * 1e6;

    CLI_CUDA_CHECK(cudaDeviceSynchronize(), "bench");
    if (o.settle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.settle_ms));  // as bench.cpp
    progress(tag + ": timing fp4gemm fused and unfused...");
    if (digest_enabled()) problem.gate().poison_outputs(stream.get());
    r.fused = time_region(stream.get(), &flusher, s.timing, [&](cudaStream_t st) { problem.run_fused(st); });
    if (digest_enabled()) {
      Digest d;
      for (const GroupBuffers& g : problem.gate().groups()) d.add(g.c.get(), g.c.bytes(), stream.get());
      d.print("dual", r.index);
    }
    r.unfused = time_region(stream.get(), &flusher, s.timing, [&](cudaStream_t st) { problem.run_unfused(st); });
    r.gemms = time_region(stream.get(), &flusher, s.timing, [&](cudaStream_t st) { problem.run_plain(st); });
    if (peers) {
      progress(tag + ": timing cuBLAS bf16...");
      const CublasDualPeer peer(problem, stream.get());
      r.cublas = time_region(stream.get(), &flusher, s.timing, [&](cudaStream_t st) { peer.run(handle->get(), st); });
    }
    print_row(r);
    doc["cases"].push_back(case_json(r));
  }
  std::cout << "\nfused: one fp4gemm plan, silu(g) * u in its epilogue (FP32), rounded once to "
            << to_string(s.data.out) << ".\n"
               "floor: 4 M N K / the cuBLAS bf16 rate measured at start-up; of_floor: floor / fused time.\n"
               "unfused: two plain fp4gemm GEMMs (same plan options, outputs in "
            << to_string(s.data.out)
            << ") + an elementwise silu(g) * u kernel\n"
               "  (FP32 math); vs_unfused: its time / fused time.\n"
               "cublas: cuBLAS bf16 on A, B1, B2 dequantised in advance: two cublasGemmEx (bf16 out, FP32 compute)\n"
               "  + the same kernel on bf16; vs_cuBLAS: its time / fused time. Medians, L2 flushed before each rep.\n";
  write_suite_json(s.json_path, doc);
  return 0;
}

}  // namespace fp4gemm::cli
