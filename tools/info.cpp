// `fp4gemm info`: the device, whether the fused kernel can be planned, and the measured ceilings.
#include <cstdio>
#include <iostream>

#include "cli.hpp"
#include "report.hpp"

namespace fp4gemm::cli {

namespace {

struct KernelProbe {
  bool available = false;
  std::string text;  // kernel name, or why not
};

// Plans a small problem with Backend::fast: the library says whether the fused kernel exists
// for this GPU (and this build) better than the compute capability alone.
KernelProbe probe_fast_kernel() {
  const ProblemShape shape{"probe", {128}, 256, 256, 0};
  const ProblemData data(shape, DataSettings{});
  const std::vector<GroupDesc> descs = data.descs();
  Options options;
  options.backend = Backend::fast;
  KernelProbe probe;
  try {
    const Plan plan(descs, options);
    probe.available = true;
    probe.text = plan.kernel_name();
  } catch (const Error& e) {
    probe.text = strip_prefix(e.what());
  }
  return probe;
}

}  // namespace

int run_info(const InfoOptions& o) {
  const DeviceInfo d = require_device();
  require_writable(o.json);
  char line[256];
  std::snprintf(line, sizeof line, "device %d: %s (sm_%d%d)\n  SMs: %d   L2: %.1f MiB   shared memory per block (opt-in): %zu KiB\n",
                d.index, d.name.c_str(), d.sm_major, d.sm_minor, d.multiprocessors, d.l2_bytes / 1048576.0,
                d.smem_per_block_optin / 1024);
  std::cout << "fp4gemm " << FP4GEMM_VERSION << "\n" << line;
  const KernelProbe probe = probe_fast_kernel();
  std::cout << "  fused kernel: " << (probe.available ? "available (" + probe.text + ")" : "not available: " + probe.text)
            << "\n  reference kernel: available (Backend::reference)\n" << std::flush;

  progress("[info] measuring ceilings (cuBLAS bf16 8192^3, device-to-device copy)...");
  Stream stream;
  const Ceilings c = measure_ceilings(stream.get());
  std::snprintf(line, sizeof line,
                "  bf16 cuBLAS %d^3: %.1f TFLOP/s (%.1f us; cublasGemmEx, CUBLAS_COMPUTE_32F, median)\n"
                "  device-to-device copy: %.3f TB/s (%.2f GiB each way, read+write bytes, median)\n",
                kCeilingGemmSize, c.bf16_tflops, c.bf16_gemm_us, c.copy_tbps, c.copy_bytes / 1073741824.0);
  std::cout << line;
  if (!o.json.empty()) {
    Json doc;
    doc["tool"] = "fp4gemm info";
    doc["version"] = FP4GEMM_VERSION;
    doc["date"] = utc_now();
    doc["gpu"] = device_json(d);
    doc["fused_kernel"] = Json{{"available", probe.available}, {"detail", probe.text}};
    doc["ceilings"] = ceilings_json(c);
    write_json(o.json, doc);
  }
  return 0;
}

}  // namespace fp4gemm::cli
