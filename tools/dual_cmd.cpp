// `fp4gemm dual`: the dual GEMM C = act(A B1^T, A B2^T) (SwiGLU; gpt-oss's swigluoai) with batch L,
// run as L groups of one pointer-array Plan (Options::epilogue), timed against the two plain
// GEMMs it replaces and the bf16 floor measured in the same run; --check compares with the host
// reference's FP32 epilogue (bit for bit on GPU MODE data).
#include <cmath>
#include <cstring>
#include <iostream>
#include <sstream>

#include "check.hpp"
#include "cli.hpp"
#include "cuda_util.hpp"
#include "data.hpp"
#include "dual_problem.hpp"
#include "host/plans/fused_plan.hpp"
#include "timing.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "fp4gemm/reference.hpp"
#include "report.hpp"

namespace fp4gemm::cli {

namespace {

struct DualCheck {
  std::int64_t elements = 0, mismatches = 0;
  std::string first;
};

// Every group's output against reference::moe_gemm with the kernel's FP32 epilogue (one expert
// owning the group's rows, separate gate / up weights): GPU MODE data makes every FP32 sum exact,
// so the bits must match (+0 and -0 count as equal).
DualCheck check_dual(const ProblemData& gate, const ProblemData& up, const DataSettings& d, Epilogue epilogue) {
  DualCheck r;
  const reference::DualActivation act{epilogue == Epilogue::silu ? reference::Activation::silu
                                                                 : reference::Activation::swigluoai};
  const int vec = scale_block_size(d.format);
  const std::size_t elem = out_type_size(d.out);
  for (std::size_t g = 0; g < gate.groups().size(); ++g) {
    const GroupBuffers& x = gate.groups()[g];
    const GroupBuffers& u = up.groups()[g];
    if (x.m == 0) continue;
    const int cols = x.k / vec;
    const std::vector<std::uint8_t> a = download(x.a), b = download(x.b), bu = download(u.b), c = download(x.c);
    auto linear = [&](const DeviceBuffer& s, int rows) {
      std::vector<std::uint8_t> h = download(s);
      if (d.layout == ScaleLayout::linear) return h;
      std::vector<std::uint8_t> lin(static_cast<std::size_t>(rows) * cols);
      formats::blocked_to_linear(h.data(), rows, cols, lin.data());
      return lin;
    };
    const std::vector<std::uint8_t> sa = linear(x.sfa, x.m), sb = linear(x.sfb, x.n), su = linear(u.sfb, x.n);
    std::vector<std::uint8_t> want(c.size(), 0);
    const float one = 1.0f;
    const int offsets[2] = {0, x.m};
    reference::MoeHostProblem p;
    p.experts = 1, p.n = x.n, p.k = x.k, p.format = d.format;
    p.a = a.data(), p.lda = x.lda, p.a_scales = sa.data(), p.a_rows = x.m;
    p.w = b.data(), p.ldw = x.ldb, p.w_scales = sb.data(), p.w_layout = ScaleLayout::linear;
    p.alpha = &one, p.alpha_up = &one, p.offsets = offsets, p.c = want.data(), p.ldc = x.ldc, p.out_type = d.out;
    p.glu = &act, p.gate_up = static_cast<int>(GateUpLayout::separate), p.glu_fp32 = true;
    p.w_up = bu.data(), p.w_up_scales = su.data();
    reference::moe_gemm(p);
    for (int row = 0; row < x.m; ++row)
      for (int i = 0; i < x.n; ++i) {
        const std::size_t at = (static_cast<std::size_t>(row) * x.ldc + i) * elem;
        std::uint32_t gb = 0, wb = 0;
        std::memcpy(&gb, c.data() + at, elem), std::memcpy(&wb, want.data() + at, elem);
        ++r.elements;
        const std::uint32_t sign = elem == 2 ? 0x8000u : 0x80000000u;
        if (gb == wb || ((gb | wb) & ~sign) == 0) continue;
        if (r.mismatches++ == 0) {
          std::ostringstream os;
          os << "group " << g << " [" << row << ", " << i << "]: bits 0x" << std::hex << gb << ", expected 0x" << wb;
          r.first = os.str();
        }
      }
  }
  return r;
}

}  // namespace

int run_dual(const DualCommandOptions& o) {
  const RunSettings s = resolve_settings(o);
  const ProblemShape shape = gemm_shape(o, s.data.format);
  if (shape.n % 8 != 0)
    throw Error("--mnkl", -1, "the dual GEMM's N must be a multiple of 8 (got " + std::to_string(shape.n) + ")");
  const Epilogue epilogue = o.activation == "swigluoai" ? Epilogue::swigluoai : Epilogue::silu;
  if (o.check && o.values != "gpumode")
    throw Error("--check", -1, "--check compares bits and needs --values gpumode (exact FP32 sums)");
  check_dual_backend(s.backend);
  const DeviceInfo device = require_device();
  require_writable(s.json_path);
  Stream stream;
  const DualProblem problem(shape, s.data, o.values == "full", epilogue, s.tuning, stream.get());
  const ProblemData &gate = problem.gate(), &up = problem.up();
  const Plan& plan = problem.fused();

  std::cout << "fp4gemm dual: " << shape.describe() << ", " << to_string(epilogue) << ", " << to_string(s.data.format)
            << " " << to_string(s.data.layout) << " scales -> " << to_string(s.data.out) << ", " << o.values << " data\n";
  std::cout << "plan: " << plan.describe() << "\n";
  DualCheck report;
  if (o.check) {
    gate.poison_outputs(stream.get());
    plan.run(stream.get());
    CLI_CUDA_CHECK(cudaStreamSynchronize(stream.get()), "check (run)");
    progress("[dual] checking against the host reference (FP32 epilogue)...");
    report = check_dual(gate, up, s.data, epilogue);
    std::cout << "check: " << (report.mismatches == 0 ? "PASS" : "FAIL") << ", " << report.elements << " elements, "
              << report.mismatches << " differ from the reference's bits" << (report.first.empty() ? "" : " (first: ")
              << report.first << (report.first.empty() ? "" : ")") << "\n";
  }
  const Ceilings ceilings = measure_ceilings(stream.get());
  const L2Flusher flusher(device.l2_bytes);
  const TimingStats t = time_region(stream.get(), &flusher, s.timing, [&](cudaStream_t st) { plan.run(st); });
  // a trace build's per-CTA cycle counters of the fused kernel's last launch ("" otherwise)
  const std::string trace = detail::sm90::trace_report(s.data.format);
  const TimingStats tu = time_region(stream.get(), &flusher, s.timing, [&](cudaStream_t st) { problem.run_plain(st); });
  const double floor_us = plan.flops() / (ceilings.bf16_tflops * 1e12) * 1e6;
  std::cout << time_line(t, plan.flops(), plan.min_bytes()) << "\n";
  std::cout << trace;
  std::cout << "bf16 floor " << floor_us << " us (cuBLAS bf16 " << ceilings.bf16_tflops << " TFLOP/s in this run): "
            << floor_us / t.median_us << " of the floor\n";
  std::cout << "unfused (two plain fp4gemm GEMMs, no elementwise kernel): " << tu.median_us << " us, fused is "
            << tu.median_us / t.median_us << "x faster\n";
  if (!s.json_path.empty()) {
    Json doc;
    doc["tool"] = "fp4gemm dual";
    doc["version"] = FP4GEMM_VERSION;
    doc["date"] = utc_now();
    doc["gpu"] = device_json(device);
    doc["settings"] = settings_json(s);
    doc["shape"] = Json{{"m", shape.m}, {"n", shape.n}, {"k", shape.k}, {"l", shape.l}};
    doc["activation"] = to_string(epilogue);
    doc["values"] = o.values;
    doc["plan"] = plan.describe();
    doc["flops"] = plan.flops();
    doc["time_us"] = stats_json(t);
    doc["unfused_time_us"] = stats_json(tu);
    doc["bf16_tflops"] = ceilings.bf16_tflops;
    doc["floor_us"] = floor_us;
    doc["fraction_of_floor"] = floor_us / t.median_us;
    doc["check"] = o.check ? Json{{"elements", report.elements}, {"mismatches", report.mismatches}} : Json();
    write_json(s.json_path, doc);
  }
  return o.check && report.mismatches != 0 ? 1 : 0;
}

}  // namespace fp4gemm::cli
