// GPU tier: the CLI's --check paths run on the device (fp4gemm dual / moe --check): the command
// exits 0 and prints its PASS, on GPU MODE values (bit-exact) and on full-range data (the FP32
// bound), so the checks the results files quote are themselves tested. The host tier's test_cli.cpp
// covers the CLI's argument errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

const std::string kCli = FP4GEMM_CLI_PATH;

struct CliRun {
  int code = -1;
  std::string out;
};

CliRun run_cli(const std::string& args) {
  CliRun r;
  FILE* pipe = popen(("'" + kCli + "' " + args + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool fast_kernel_available() { return device_count() > 0 && device_info().has_fast_kernel; }

TEST(CliGpu, DualCheckPasses) {
  if (kCli.empty()) GTEST_SKIP() << "the CLI was not built (FP4GEMM_BUILD_CLI off)";
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the dual GEMM needs H100/H200";
  for (const char* act : {"silu", "swigluoai"}) {
    const CliRun r = run_cli(std::string("dual --mnkl 128,256,512,2 --check --iters 2 --warmup 1 --activation ") + act);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("check: PASS"), std::string::npos) << r.out;
  }
}

TEST(CliGpu, MoeCheckPasses) {
  if (kCli.empty()) GTEST_SKIP() << "the CLI was not built (FP4GEMM_BUILD_CLI off)";
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE GEMM needs H100/H200";
  for (const std::string act : {"nvfp4 --values gpumode", "mxfp4 --routing skewed", "bf16 --routing one-hot"}) {
    const CliRun r =
        run_cli("moe --experts 16 --n 256 --k 512 --tokens 40 --topk 4 --check --iters 2 --warmup 1 --act " + act);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(": PASS"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("writes outside C 0"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace fp4gemm::test
