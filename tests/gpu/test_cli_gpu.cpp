// GPU tier: the CLI's --check paths run on the device (fp4gemm dual / moe --check): the command
// exits 0 and prints its PASS, on GPU MODE values (bit-exact) and on full-range data (the FP32
// bound), so the checks the results files quote are themselves tested. The host tier's test_cli.cpp
// covers the CLI's argument errors.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cli_run.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

const std::string kCli = cli_path(FP4GEMM_CLI_PATH);

CliResult run_cli(const std::string& args) { return run_cli_at(kCli, args); }

// The built CLI's path is compiled in; a test binary copied to another machine without its build tree has none there.
bool cli_present() { return std::ifstream(kCli).good(); }

bool fast_kernel_available() { return device_count() > 0 && device_info().has_fast_kernel; }

TEST(CliGpu, DualCheckPasses) {
  if (kCli.empty()) GTEST_SKIP() << "the CLI was not built (FP4GEMM_BUILD_CLI off)";
  if (!cli_present()) GTEST_SKIP() << "no CLI at " << kCli << " (a test binary carried without its build: set FP4GEMM_CLI)";
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the dual GEMM needs H100/H200";
  for (const char* act : {"silu", "swigluoai"}) {
    const CliResult r = run_cli(std::string("dual --mnkl 128,256,512,2 --check --iters 2 --warmup 1 --activation ") + act);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("check: PASS"), std::string::npos) << r.output;
  }
}

TEST(CliGpu, MoeCheckPasses) {
  if (kCli.empty()) GTEST_SKIP() << "the CLI was not built (FP4GEMM_BUILD_CLI off)";
  if (!cli_present()) GTEST_SKIP() << "no CLI at " << kCli << " (a test binary carried without its build: set FP4GEMM_CLI)";
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE GEMM needs H100/H200";
  for (const std::string act : {"nvfp4 --values gpumode", "mxfp4 --routing skewed", "bf16 --routing one-hot"}) {
    const CliResult r =
        run_cli("moe --experts 16 --n 256 --k 512 --tokens 40 --topk 4 --check --iters 2 --warmup 1 --act " + act);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(": PASS"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("writes outside C 0"), std::string::npos) << r.output;
  }
}

// The layer command on both weight-scale sets (checkpoint: MXFP4 codes 117..127; gpumode: codes
// 127 / 128), decode path (T 2) and general path (T 40).
TEST(CliGpu, LayerRunsOnBothScaleSets) {
  if (kCli.empty()) GTEST_SKIP() << "the CLI was not built (FP4GEMM_BUILD_CLI off)";
  if (!cli_present()) GTEST_SKIP() << "no CLI at " << kCli << " (a test binary carried without its build: set FP4GEMM_CLI)";
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the layer needs H100/H200";
  for (const std::string values : {"gpumode", "checkpoint"})
    for (const std::string tokens : {"2", "40"}) {
      const CliResult r = run_cli("layer --experts 12 --hidden 256 --inter 128 --topk 4 --act bf16 --iters 2 --warmup 1 --tokens " +
                                  tokens + " --values " + values);
      EXPECT_EQ(r.exit_code, 0) << r.output;
      EXPECT_NE(r.output.find(values + " weight scales"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("time:"), std::string::npos) << r.output;
    }
  // linear weight scales (as checkpoints store them), the decode path and the general path
  for (const std::string tokens : {"2", "40"}) {
    const CliResult r = run_cli("layer --experts 12 --hidden 256 --inter 128 --topk 4 --act bf16 --iters 2 --warmup 1 "
                                "--values checkpoint --scales linear --tokens " + tokens);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("checkpoint weight scales (linear)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("time:"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace fp4gemm::test
