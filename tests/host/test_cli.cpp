// The fp4gemm CLI as a user meets it: exit codes and one-line messages (runs the built binary).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace {

using fp4gemm::test::CliResult;

const std::string kCliPath = fp4gemm::test::cli_path(FP4GEMM_CLI_PATH);

CliResult run_cli(const std::string& args, const std::string& env = "") {
  return fp4gemm::test::run_cli_at(kCliPath, args, env);
}

int count_lines(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

#define REQUIRE_CLI()                                                         \
  do {                                                                        \
    if (kCliPath.empty()) GTEST_SKIP() << "the fp4gemm CLI was not built";    \
  } while (0)

TEST(Cli, HelpWorksWithoutGpu) {
  REQUIRE_CLI();
  const CliResult r = run_cli("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* command : {"info", "bench", "grouped", "gemm", "moe"})
    EXPECT_NE(r.output.find(command), std::string::npos) << command << " missing from:\n" << r.output;
}

TEST(Cli, SubcommandHelpListsOptions) {
  REQUIRE_CLI();
  const CliResult bench = run_cli("bench --help");
  EXPECT_EQ(bench.exit_code, 0);
  for (const char* option : {"--suite", "--cases", "--json", "--iters", "--warmup", "--no-peers", "--settle-ms",
                             "--decode-tokens", "--backend", "--format", "--layout", "--out", "--seed"})
    EXPECT_NE(bench.output.find(option), std::string::npos) << option;
  const CliResult gemm = run_cli("gemm --help");
  EXPECT_EQ(gemm.exit_code, 0);
  EXPECT_NE(gemm.output.find("--mnkl"), std::string::npos);
  EXPECT_NE(gemm.output.find("--check"), std::string::npos);
  const CliResult grouped = run_cli("grouped --help");
  EXPECT_EQ(grouped.exit_code, 0);
  EXPECT_NE(grouped.output.find("--m "), std::string::npos);
  const CliResult moe = run_cli("moe --help");
  EXPECT_EQ(moe.exit_code, 0);
  for (const char* option : {"--experts", "--n", "--k", "--tokens", "--topk", "--act", "--routing", "--layout",
                             "--scales", "--out", "--values", "--check", "--dynamic", "--iters", "--warmup", "--seed",
                             "--json", "uniform", "skewed", "balanced", "one-hot", "contiguous", "masked"})
    EXPECT_NE(moe.output.find(option), std::string::npos) << option;
  EXPECT_NE(bench.output.find("moe"), std::string::npos);
  EXPECT_NE(bench.output.find("--act"), std::string::npos);
  EXPECT_NE(bench.output.find("dual"), std::string::npos);
  EXPECT_NE(bench.output.find("--values"), std::string::npos);
  const CliResult layer = run_cli("layer --help");
  EXPECT_EQ(layer.exit_code, 0);
  for (const char* option : {"--experts", "--hidden", "--inter", "--tokens", "--topk", "--act", "--activation",
                             "--scales", "--iters", "--warmup", "--seed", "--json", "swigluoai"})
    EXPECT_NE(layer.output.find(option), std::string::npos) << option;
  const CliResult dual = run_cli("dual --help");
  EXPECT_EQ(dual.exit_code, 0);
  for (const char* option : {"--mnkl", "--activation", "--values", "--check", "--format", "--layout", "--out", "--iters",
                             "--json", "swigluoai", "gpumode"})
    EXPECT_NE(dual.output.find(option), std::string::npos) << option;
  const CliResult quantize = run_cli("quantize --help");
  EXPECT_EQ(quantize.exit_code, 0);
  for (const char* option : {"--rows", "--k", "--format", "--scales", "--iters", "--json"})
    EXPECT_NE(quantize.output.find(option), std::string::npos) << option;
}

TEST(Cli, VersionWorksWithoutGpu) {
  REQUIRE_CLI();
  const CliResult r = run_cli("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output.rfind("fp4gemm ", 0), 0u) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
}

TEST(Cli, MissingCommandFails) {
  REQUIRE_CLI();
  const CliResult r = run_cli("");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.output.rfind("fp4gemm: ", 0), 0u) << r.output;
}

// Bad arguments are rejected before any GPU work, with one line naming the option.
TEST(Cli, BadArgumentsGiveOneLineNamingTheOption) {
  REQUIRE_CLI();
  struct Case {
    const char* args;
    std::vector<const char*> expected;
  };
  const std::vector<Case> cases = {
      {"grouped --m 80,abc --n 4096 --k 7168", {"--m", "abc"}},
      {"grouped --m 80,-1 --n 4096 --k 7168", {"--m", "-1"}},
      {"grouped --m 80, --n 4096 --k 7168", {"--m"}},
      {"grouped --m 80 --n -5 --k 7168", {"--n", "-5"}},
      {"grouped --m 80 --n 0 --k 7168", {"--n"}},
      {"grouped --m 80 --n abc --k 7168", {"--n"}},
      {"grouped --m 80 --n 4096 --k 100", {"--k", "multiple", "16"}},
      {"grouped --m 80 --n 4096 --k -32", {"--k"}},
      {"grouped --m 80 --n 4096 --k 48 --format mxfp4", {"--k", "mxfp4", "32"}},
      {"grouped --m 80 --n 4096 --k 7168 --format nvfp5", {"--format", "nvfp5"}},
      {"grouped --m 80 --n 4096 --k 7168 --layout diagonal", {"--layout"}},
      {"grouped --m 80 --n 4096 --k 7168 --out f8", {"--out"}},
      {"grouped --m 80 --n 4096 --k 7168 --backend turbo", {"--backend"}},
      {"grouped --n 4096 --k 7168", {"--m"}},
      {"gemm --mnkl 1,2", {"--mnkl", "4"}},
      {"gemm --mnkl 128,128,128,1,7", {"--mnkl"}},
      {"gemm --mnkl 128,-128,128,1", {"--mnkl", "-128"}},
      {"gemm --mnkl 128,128,40,1", {"--mnkl", "multiple"}},
      {"gemm --mnkl 128,x,128,1", {"--mnkl", "x"}},
      {"gemm --mnkl 128,128,128,1 --iters 0", {"--iters"}},
      {"gemm --mnkl 128,128,128,1 --warmup -1", {"--warmup"}},
      {"bench --suite nope", {"--suite"}},
      {"bench --cases 9", {"--cases", "9"}},
      {"bench --cases 1,x", {"--cases"}},
      {"bench --settle-ms -5", {"--settle-ms"}},
      {"bench --settle-ms 20000", {"--settle-ms"}},
      {"bench --suite layer --decode-tokens 513", {"--decode-tokens"}},
      {"layer --decode-tokens 513", {"--decode-tokens"}},
      {"bench --suite layer --decode-tokens -2", {"--decode-tokens"}},
      {"bench --bogus", {"--bogus"}},
      {"bench --suite moe --cases 57", {"--cases", "57", "56"}},
      {"bench --suite moe --act fp8", {"--act", "fp8"}},
      {"bench --suite seed --act bf16", {"--act", "moe and layer suites"}},
      {"bench --suite dual --cases 5", {"--cases", "5", "4"}},
      {"bench --suite dual --values random", {"--values", "random"}},
      {"bench --suite dual --backend reference", {"--backend", "fast kernel"}},
      {"bench --suite dual --act bf16", {"--act", "moe and layer suites"}},
      {"bench --suite layer --cases 37", {"--cases", "37", "36"}},
      {"bench --suite layer --cases 0", {"--cases", "0"}},
      {"bench --suite layer --act fp8", {"--act", "fp8"}},
      {"bench --suite layer --values full", {"--values", "layer suite", "gpumode or checkpoint"}},
      {"bench --suite seed --values full", {"--values", "dual suite"}},
      {"bench --suite moe --values gpumode", {"--values", "moe suite"}},
      {"bench --suite dual --values checkpoint", {"--values", "checkpoint", "dual suite"}},
      {"moe --n 64 --k 64 --tokens 4", {"--experts"}},
      {"moe --experts 8 --k 64 --tokens 4", {"--n"}},
      {"moe --experts 8 --n 64 --tokens 4", {"--k"}},
      {"moe --experts 8 --n 64 --k 64", {"--tokens"}},
      {"moe --experts 0 --n 64 --k 64 --tokens 4", {"--experts", "1..512"}},
      {"moe --experts 513 --n 64 --k 64 --tokens 4", {"--experts", "513"}},
      {"moe --experts x --n 64 --k 64 --tokens 4", {"--experts"}},
      {"moe --experts 8 --n 0 --k 64 --tokens 4", {"--n"}},
      {"moe --experts 8 --n 64 --k 100 --tokens 4", {"--k", "multiple", "16"}},
      {"moe --experts 8 --n 64 --k 48 --tokens 4 --act bf16", {"--k", "mxfp4", "32"}},
      {"moe --experts 8 --n 64 --k 48 --tokens 4 --act mxfp4", {"--k", "mxfp4", "32"}},
      {"moe --experts 8 --n 64 --k 64 --tokens 0", {"--tokens"}},
      {"moe --experts 8 --n 64 --k 64 --tokens -3", {"--tokens", "-3"}},
      {"moe --experts 8 --n 64 --k 64 --tokens 4 --topk 9", {"--topk", "9"}},
      {"moe --experts 8 --n 64 --k 64 --tokens 4 --topk 0", {"--topk"}},
      {"moe --experts 8 --n 64 --k 64 --tokens 1073741824 --topk 8", {"--tokens", "2^31"}},
      {"moe --experts 8 --n 64 --k 64 --tokens 4 --act fp8", {"--act", "fp8"}},
      {"moe --experts 8 --n 64 --k 64 --tokens 4 --routing zipf", {"--routing", "zipf"}},
      {"moe --experts 8 --n 64 --k 64 --tokens 4 --layout ragged", {"--layout", "ragged"}},
      {"moe --experts 8 --n 64 --k 64 --tokens 4 --scales swizzled", {"--scales"}},
      {"moe --experts 8 --n 64 --k 64 --tokens 4 --out f8", {"--out"}},
      {"moe --experts 8 --n 64 --k 64 --tokens 4 --values random", {"--values"}},
      {"moe --experts 8 --n 64 --k 64 --tokens 4 --iters 0", {"--iters"}},
      {"layer --hidden 64 --inter 32 --tokens 4", {"--experts"}},
      {"layer --experts 8 --inter 32 --tokens 4", {"--hidden"}},
      {"layer --experts 8 --hidden 64 --tokens 4", {"--inter"}},
      {"layer --experts 8 --hidden 64 --inter 32", {"--tokens"}},
      {"layer --experts 8 --hidden 64 --inter 32 --tokens 4 --values full", {"--values", "full"}},
      {"layer --experts 8 --hidden 64 --inter 32 --tokens 4 --scales swizzled", {"--scales", "swizzled"}},
      {"layer --experts 600 --hidden 64 --inter 32 --tokens 4", {"--experts", "1..512"}},
      {"layer --experts 8 --hidden 48 --inter 32 --tokens 4", {"--hidden", "32"}},
      {"layer --experts 8 --hidden 64 --inter 40 --tokens 4", {"--inter", "32"}},
      {"layer --experts 8 --hidden 64 --inter 32 --tokens 0", {"--tokens"}},
      {"layer --experts 8 --hidden 64 --inter 32 --tokens 4 --topk 9", {"--topk"}},
      {"layer --experts 8 --hidden 64 --inter 32 --tokens 4 --act fp8", {"--act", "fp8"}},
      {"layer --experts 8 --hidden 64 --inter 32 --tokens 4 --activation gelu", {"--activation", "gelu"}},
      {"dual", {"--mnkl"}},
      {"dual --mnkl 256,4096,7168", {"--mnkl", "4"}},
      {"dual --mnkl 256,100,7168,1", {"--mnkl", "multiple of 8"}},
      {"dual --mnkl 256,4096,7000,1", {"--mnkl", "16"}},
      {"dual --mnkl 256,4096,7168,1 --activation gelu", {"--activation", "gelu"}},
      {"dual --mnkl 256,4096,7168,1 --values random", {"--values"}},
      {"dual --mnkl 256,4096,7168,1 --values full --check", {"--check", "gpumode"}},
      {"dual --mnkl 256,4096,7168,1 --backend reference", {"--backend", "fast kernel"}},
      {"quantize --format fp8", {"--format", "fp8"}},
      {"quantize --rows 0", {"--rows"}},
      {"quantize --k 24", {"--k", "16"}},
      {"quantize --k 48 --format mxfp4", {"--k", "32"}},
      {"quantize --scales swizzled", {"--scales"}},
  };
  for (const Case& c : cases) {
    const CliResult r = run_cli(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_EQ(count_lines(r.output), 1) << c.args << ":\n" << r.output;
    EXPECT_EQ(r.output.rfind("fp4gemm: ", 0), 0u) << c.args << ":\n" << r.output;
    for (const char* word : c.expected)
      EXPECT_NE(r.output.find(word), std::string::npos) << c.args << ": '" << word << "' missing from:\n" << r.output;
  }
}

// The measurement knobs (fp4gemm::Tuning) come from FP4GEMM_* variables, read by the CLI only: a
// value that does not parse is one line naming the variable, before any device work.
TEST(Cli, BadTuningVariablesGiveOneLineNamingTheVariable) {
  REQUIRE_CLI();
  struct Case {
    const char* env;
    std::vector<const char*> expected;
  };
  const std::vector<Case> cases = {
      {"FP4GEMM_CLASS_ROUND=abc", {"FP4GEMM_CLASS_ROUND", "abc", "integer"}},
      {"FP4GEMM_MAX_CTAS=12x", {"FP4GEMM_MAX_CTAS", "12x"}},
      {"FP4GEMM_SPLIT_K=2", {"FP4GEMM_SPLIT_K", "0 or 1"}},
      {"FP4GEMM_NO_PDL=1", {"FP4GEMM_NO_PDL", "no longer a knob"}},  // (removed ablations: refused by name)
      {"FP4GEMM_MOE_EARLY_KBLOCKS=4", {"FP4GEMM_MOE_EARLY_KBLOCKS", "no longer a knob"}},
      {"FP4GEMM_SHARE_EPILOGUE=on", {"FP4GEMM_SHARE_EPILOGUE", "0 or 1"}},
      {"FP4GEMM_WIDE_COST=165:x", {"FP4GEMM_WIDE_COST", "165:x", "number"}},
      {"FP4GEMM_EPILOGUE_COST=0.05.1", {"FP4GEMM_EPILOGUE_COST", "number"}},
      {"FP4GEMM_MOE_SPLIT_GAIN=16:x", {"FP4GEMM_MOE_SPLIT_GAIN", "16:x", "number"}},
  };
  for (const Case& c : cases)
    for (const char* args : {"grouped --m 80 --n 4096 --k 7168", "bench --cases 1 --no-peers",
                             "moe --experts 8 --n 256 --k 256 --tokens 16 --topk 2"}) {
      const CliResult r = run_cli(args, c.env);
      EXPECT_NE(r.exit_code, 0) << c.env << " " << args;
      EXPECT_EQ(count_lines(r.output), 1) << c.env << " " << args << ":\n" << r.output;
      EXPECT_EQ(r.output.rfind("fp4gemm: ", 0), 0u) << c.env << ":\n" << r.output;
      for (const char* word : c.expected)
        EXPECT_NE(r.output.find(word), std::string::npos) << c.env << ": '" << word << "' missing from:\n" << r.output;
    }
}

TEST(Cli, GpuCommandsWithoutGpuGiveOneClearLine) {
  REQUIRE_CLI();
  if (fp4gemm::device_count() != 0) GTEST_SKIP() << "a GPU is present; the no-GPU messages cannot be seen here";
  const std::string expected = "fp4gemm: no CUDA device is available (no GPU or no driver)\n";
  for (const char* args : {"info", "bench", "bench --suite dense --cases 2 --no-peers", "grouped --m 80,176 --n 4096 --k 7168",
                           "grouped --m 80 --n 256 --k 256 --check", "gemm --mnkl 2048,2048,512,1",
                           "moe --experts 128 --n 1536 --k 2048 --tokens 256 --topk 8",
                           "moe --experts 8 --n 256 --k 256 --tokens 16 --topk 2 --act bf16 --layout masked --check --dynamic",
                           "bench --suite moe --cases 1,2",
                           "bench --suite dual", "bench --suite dual --cases 2,4 --values full --no-peers",
                           "bench --suite layer", "bench --suite layer --cases 8,9 --act bf16",
                           "layer --experts 128 --hidden 2048 --inter 768 --tokens 16 --topk 8",
                           "layer --experts 8 --hidden 256 --inter 128 --tokens 4 --topk 2 --act bf16 --activation swigluoai",
                           "quantize", "quantize --rows 128 --k 256 --format mxfp4 --scales blocked"}) {
    const CliResult r = run_cli(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_EQ(r.output, expected) << args;
  }
}

}  // namespace
