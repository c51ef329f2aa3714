// Runs the built fp4gemm CLI (FP4GEMM_CLI_PATH, or $FP4GEMM_CLI) and collects its exit code and output: shared by the
// host tier's argument tests (host/test_cli.cpp) and the GPU tier's --check tests (gpu/test_cli_gpu.cpp).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fp4gemm::test {

// The CLI to run: $FP4GEMM_CLI where set (a binary carried to another machine without its build
// tree), else the build's own (`built`, FP4GEMM_CLI_PATH; empty when the CLI was not built).
inline std::string cli_path(const char* built) {
  const char* env = std::getenv("FP4GEMM_CLI");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(built);
}

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// `env` ("NAME=value ..."): environment variables for this run only.
inline CliResult run_cli_at(const std::string& cli, const std::string& args, const std::string& env = "") {
  const std::string command = (env.empty() ? "" : "env " + env + " ") + "'" + cli + "' " + args + " 2>&1";
  CliResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace fp4gemm::test
