// fp4gemm command-line tool: `info`, `bench`, `grouped`, `gemm`, `dual`, `moe` (CLI11 subcommands).
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

#include "cli.hpp"
#include "fp4gemm/moe_layer.hpp"

namespace {

using namespace fp4gemm::cli;

void add_data_options(CLI::App* cmd, CommonOptions& o) {
  cmd->add_option("--format", o.format, "FP4 format: nvfp4 (E4M3 scale per 16) or mxfp4 (UE8M0 per 32)")
      ->check(CLI::IsMember({"nvfp4", "mxfp4"}))->capture_default_str();
  cmd->add_option("--layout", o.layout, "scale-factor layout: linear or blocked (128x4 atoms)")
      ->check(CLI::IsMember({"linear", "blocked"}))->capture_default_str();
  cmd->add_option("--out", o.out, "output type")->check(CLI::IsMember({"f16", "bf16", "f32"}))->capture_default_str();
  cmd->add_option("--backend", o.backend, "kernel: auto (fast, else falls back to reference, labelled), fast, reference")
      ->check(CLI::IsMember({"auto", "fast", "reference"}))->capture_default_str();
  cmd->add_option("--iters", o.iters, "timed repetitions (median reported)")->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "untimed warm-up repetitions")->check(CLI::Range(0, 1000000))->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of the random inputs")->capture_default_str();
  cmd->add_option("--json", o.json, "also write every number to this JSON file");
}

CLI::App* add_bench(CLI::App& app, BenchOptions& o) {
  CLI::App* cmd = app.add_subcommand("bench", "benchmark suites (SPEC 4) with floors and peers; table on stdout");
  cmd->add_option("--suite", o.suite,
                  "seed (4 GPU MODE cases), dense (--mnkl 8192,8192,1024,1 and 2048,2048,512,1), all (both), moe "
                  "(MoE layer shapes of four models at 1..16384 tokens), or dual (GPU MODE's 4 dual-GEMM shapes: "
                  "fused vs two fp4gemm GEMMs + silu*mul vs cuBLAS bf16, and the bf16 floor), or layer (the whole MoE expert "
                  "layer of four models at 1..4096 tokens, with floors; torch peers: bench/layer_vs_torch.py)")
      ->check(CLI::IsMember({"seed", "dense", "all", "moe", "dual", "layer"}))->capture_default_str();
  cmd->add_option("--act", o.act, "moe and layer suites: activations nvfp4 / mxfp4 (W4A4) or bf16 (W4A16); default: "
                                  "--format (moe), nvfp4 (layer)")
      ->check(CLI::IsMember({"nvfp4", "mxfp4", "bf16"}));
  cmd->add_option("--values", o.values, "dual suite: data gpumode (default; {0, +-0.5, +-1, +-1.5} x {1, 2}) or full "
                                        "(random nibbles, scales over the normal range); moe suite: full (default) or "
                                        "checkpoint (full with MXFP4 weight scale codes 117..127, as trained weights have); layer "
                                        "suite: gpumode (default; weight scales 1 and 2) or checkpoint (MXFP4 weight scale "
                                        "codes 117..127)")
      ->check(CLI::IsMember({"gpumode", "full", "checkpoint"}));
  cmd->add_option("--cases", o.cases, "comma-separated 1-based case numbers within the suite, e.g. 1,3");
  cmd->add_flag("--no-peers", o.no_peers, "skip the peers (dequant+cuBLAS, cuBLAS bf16, per-group streams; dual "
                                          "suite: cuBLAS bf16)");
  cmd->add_option("--settle-ms", o.settle_ms,
                  "idle milliseconds before timing each case, so it does not inherit the clock/power state of "
                  "the cuBLAS runs before it")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  cmd->add_option("--decode-tokens", o.decode_tokens,
                  "layer suite: runs of at most this many tokens take the decode path (MoeLayerOptions::"
                  "decode_tokens, at most 512 / top-k; 0: never, the general path everywhere; -1: by the layer)")
      ->check(CLI::Range(-1, fp4gemm::kDecodeTokensMax))
      ->capture_default_str();
  cmd->add_option("--weight-layout", o.weight_layout,
                  "moe and layer suites: the experts' weights as rows or packed into pieces (fp4gemm::pack_pieces, "
                  "MoeOptions / MoeLayerOptions::weight_layout; the layer suite with --act bf16 or nvfp4)")
      ->check(CLI::IsMember({"rows", "pieces"}))
      ->capture_default_str();
  add_data_options(cmd, o);
  return cmd;
}

CLI::App* add_grouped(CLI::App& app, GroupedOptions& o) {
  CLI::App* cmd = app.add_subcommand("grouped", "time one grouped GEMM: groups of (M_g, N, K)");
  cmd->add_option("--m", o.m, "comma-separated M of each group, e.g. 80,176,128 (0 allowed)")->required();
  cmd->add_option("--n", o.n, "N, shared by all groups")->required();
  cmd->add_option("--k", o.k, "K, shared by all groups (a multiple of 16 / 32)")->required();
  cmd->add_flag("--check", o.check, "compare with the exact CPU reference (SPEC 3)");
  add_data_options(cmd, o);
  return cmd;
}

CLI::App* add_gemm(CLI::App& app, GemmOptions& o) {
  CLI::App* cmd = app.add_subcommand("gemm", "time a dense GEMM with batch L, run as L groups of (M, N, K)");
  cmd->add_option("--mnkl", o.mnkl, "M,N,K,L")->required();
  cmd->add_flag("--check", o.check, "compare with the exact CPU reference (SPEC 3)");
  add_data_options(cmd, o);
  return cmd;
}

CLI::App* add_dual(CLI::App& app, DualCommandOptions& o) {
  CLI::App* cmd = app.add_subcommand("dual", "time the dual GEMM C = silu(A B1^T) * (A B2^T) (SwiGLU) with batch L, "
                                             "against the two plain GEMMs it replaces and the bf16 floor");
  cmd->add_option("--mnkl", o.mnkl, "M,N,K,L (N a multiple of 8)")->required();
  cmd->add_option("--activation", o.activation, "silu, or swigluoai (gpt-oss: clamped gate / up, alpha 1.702, limit 7)")
      ->check(CLI::IsMember({"silu", "swigluoai"}))->capture_default_str();
  cmd->add_option("--values", o.values, "data: gpumode ({0, +-0.5, +-1, +-1.5} x {1, 2}: --check is bit-exact) or full "
                                        "(random nibbles, scales over the normal range: realistic power and clocks)")
      ->check(CLI::IsMember({"gpumode", "full"}))->capture_default_str();
  cmd->add_flag("--check", o.check, "compare with the host reference's FP32 epilogue, bit for bit (gpumode values)");
  add_data_options(cmd, o);
  return cmd;
}

CLI::App* add_moe(CLI::App& app, MoeCommandOptions& o) {
  CLI::App* cmd = app.add_subcommand("moe", "time one MoE layer GEMM (device-driven routing) on a random top-k routing");
  cmd->add_option("--experts", o.experts, "experts E (1..512)")->required();
  cmd->add_option("--n", o.n, "N: output columns of every expert (rows of its weight)")->required();
  cmd->add_option("--k", o.k, "K (a multiple of 16 for nvfp4, 32 for mxfp4 / bf16)")->required();
  cmd->add_option("--tokens", o.tokens, "tokens T; each is routed to --topk experts")->required();
  cmd->add_option("--topk", o.topk, "experts per token")->capture_default_str();
  cmd->add_option("--act", o.act, "activations: nvfp4 / mxfp4 (W4A4 in that format) or bf16 (W4A16, mxfp4 weights)")
      ->check(CLI::IsMember({"nvfp4", "mxfp4", "bf16"}))->capture_default_str();
  cmd->add_option("--routing", o.routing, "routing distribution: uniform, skewed (Zipf-like), balanced, one-hot")
      ->check(CLI::IsMember({"uniform", "skewed", "balanced", "one-hot"}))->capture_default_str();
  cmd->add_option("--layout", o.layout, "row layout: contiguous (offsets + gather index) or masked ([E, capacity] slots)")
      ->check(CLI::IsMember({"contiguous", "masked"}))->capture_default_str();
  cmd->add_option("--scales", o.scales, "layout of the weight scales: blocked (fast path) or linear (converted at plan time)")
      ->check(CLI::IsMember({"blocked", "linear"}))->capture_default_str();
  cmd->add_option("--out", o.out, "output type")->check(CLI::IsMember({"f16", "bf16", "f32"}))->capture_default_str();
  cmd->add_option("--values", o.values, "data: full (random nibbles, scales over the normal range), gpumode "
                                        "({0, +-0.5, +-1, +-1.5} x {1, 2}: --check must be bit-identical) or checkpoint "
                                        "(full, MXFP4 weight scale codes 117..127 as trained weights have)")
      ->check(CLI::IsMember({"full", "gpumode", "checkpoint"}))->capture_default_str();
  cmd->add_option("--weight-layout", o.weight_layout,
                  "the experts' weights as rows or packed into pieces (fp4gemm::pack_pieces; MoeOptions::weight_layout)")
      ->check(CLI::IsMember({"rows", "pieces"}))->capture_default_str();
  cmd->add_flag("--check", o.check, "compare with reference::moe_gemm (bit-identical on gpumode values, else SPEC 3's FP32 bound)");
  cmd->add_flag("--dynamic", o.dynamic, "also time a loop of --iters steps, each uploading a new routing and running");
  cmd->add_option("--iters", o.iters, "timed repetitions (median reported); steps of --dynamic")
      ->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "untimed warm-up repetitions")->check(CLI::Range(0, 1000000))->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of the data and the routing")->capture_default_str();
  cmd->add_option("--json", o.json, "also write every number to this JSON file");
  return cmd;
}

CLI::App* add_layer(CLI::App& app, LayerCommandOptions& o) {
  CLI::App* cmd = app.add_subcommand("layer", "time the whole MoE expert layer (routing, quantisation, GEMM1 + SwiGLU, GEMM2, top-k combine) on a random top-k routing");
  cmd->add_option("--experts", o.experts, "experts E (1..512)")->required();
  cmd->add_option("--hidden", o.hidden, "hidden size H (a multiple of 32)")->required();
  cmd->add_option("--inter", o.inter, "intermediate size I per expert (a multiple of 32; w13 has 2I rows)")->required();
  cmd->add_option("--tokens", o.tokens, "tokens T")->required();
  cmd->add_option("--topk", o.topk, "experts per token")->capture_default_str();
  cmd->add_option("--act", o.act, "activations: nvfp4 / mxfp4 (W4A4) or bf16 (W4A16, mxfp4 weights)")
      ->check(CLI::IsMember({"nvfp4", "mxfp4", "bf16"}))->capture_default_str();
  cmd->add_option("--activation", o.activation, "silu (w13 stacked gate then up) or swigluoai (gpt-oss, interleaved)")
      ->check(CLI::IsMember({"silu", "swigluoai"}))->capture_default_str();
  cmd->add_flag("--fuse-quantise", o.fuse_quantise,
                "W4A4: quantise the intermediate in GEMM1's epilogue instead of with its own kernel (measured slower; for A/B)");
  cmd->add_flag("--batch-invariant", o.batch_invariant,
                "every row independent of its batch (MoeLayerOptions::batch_invariant: no stream-K split); for A/B");
  cmd->add_option("--decode-tokens", o.decode_tokens,
                  "runs of at most this many tokens take the decode path (MoeLayerOptions::decode_tokens, at most 512 / top-k; 0: never; "
                  "-1: by the layer)")
      ->check(CLI::Range(-1, fp4gemm::kDecodeTokensMax))->capture_default_str();
  cmd->add_option("--weight-layout", o.weight_layout,
                  "the experts' weights as rows or packed into pieces (fp4gemm::pack_pieces; --act bf16 or nvfp4; "
                  "MoeLayerOptions::weight_layout)")
      ->check(CLI::IsMember({"rows", "pieces"}))->capture_default_str();
  cmd->add_option("--values", o.values,
                  "weight scales: gpumode (1 and 2, as GPU MODE's data) or checkpoint (MXFP4 codes 117..127, as trained "
                  "weights have; NVFP4 keeps gpumode)")
      ->check(CLI::IsMember({"gpumode", "checkpoint"}))->capture_default_str();
  cmd->add_option("--scales", o.scales,
                  "layout of the weight scales: blocked (the library's own) or linear (row-major per expert, as "
                  "checkpoints store them)")
      ->check(CLI::IsMember({"blocked", "linear"}))->capture_default_str();
  cmd->add_option("--iters", o.iters, "timed repetitions (median reported)")->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "untimed warm-up repetitions")->check(CLI::Range(0, 1000000))->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of the data and the routing")->capture_default_str();
  cmd->add_option("--json", o.json, "also write every number to this JSON file");
  return cmd;
}

CLI::App* add_quantize(CLI::App& app, QuantizeCommandOptions& o) {
  CLI::App* cmd = app.add_subcommand("quantize", "time the GPU activation quantiser (bf16 -> nvfp4 / mxfp4) against a device copy");
  cmd->add_option("--rows", o.rows, "rows T")->capture_default_str();
  cmd->add_option("--k", o.k, "columns K (a multiple of 16 / 32)")->capture_default_str();
  cmd->add_option("--format", o.format, "nvfp4 or mxfp4")->check(CLI::IsMember({"nvfp4", "mxfp4"}))->capture_default_str();
  cmd->add_option("--scales", o.scales, "scale layout written: linear or blocked")
      ->check(CLI::IsMember({"linear", "blocked"}))->capture_default_str();
  cmd->add_option("--iters", o.iters, "timed repetitions (median reported)")->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "untimed warm-up repetitions")->check(CLI::Range(0, 1000000))->capture_default_str();
  cmd->add_option("--json", o.json, "also write every number to this JSON file");
  return cmd;
}

// One line on stderr for every failure; "fp4gemm: " once.
int report_failure(const std::string& what) {
  std::cerr << "fp4gemm: " << strip_prefix(what) << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp4gemm: block-scaled FP4 (NVFP4 / MXFP4) grouped GEMM for Hopper", "fp4gemm"};
  app.set_version_flag("--version", std::string("fp4gemm ") + FP4GEMM_VERSION);
  app.require_subcommand(1);
  InfoOptions info_options;
  BenchOptions bench_options;
  GroupedOptions grouped_options;
  GemmOptions gemm_options;
  MoeCommandOptions moe_options;
  LayerCommandOptions layer_options;
  QuantizeCommandOptions quantize_options;
  CLI::App* info = app.add_subcommand("info", "device, kernels and the measured ceilings of this GPU");
  info->add_option("--json", info_options.json, "also write the numbers to this JSON file");
  CLI::App* bench = add_bench(app, bench_options);
  CLI::App* grouped = add_grouped(app, grouped_options);
  CLI::App* gemm = add_gemm(app, gemm_options);
  DualCommandOptions dual_options;
  CLI::App* dual = add_dual(app, dual_options);
  CLI::App* moe = add_moe(app, moe_options);
  CLI::App* layer = add_layer(app, layer_options);
  CLI::App* quantize = add_quantize(app, quantize_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "fp4gemm: " << e.what() << std::endl;
    return e.get_exit_code();
  }

  try {
    if (info->parsed()) return run_info(info_options);
    if (bench->parsed()) return run_bench(bench_options);
    if (grouped->parsed()) return run_grouped(grouped_options);
    if (gemm->parsed()) return run_gemm(gemm_options);
    if (dual->parsed()) return run_dual(dual_options);
    if (moe->parsed()) return run_moe(moe_options);
    if (layer->parsed()) return run_layer(layer_options);
    if (quantize->parsed()) return run_quantize(quantize_options);
    return report_failure("no command given (try --help)");
  } catch (const NoDeviceError& e) {
    return report_failure(e.what());
  } catch (const fp4gemm::Error& e) {
    return report_failure(e.what());
  } catch (const std::exception& e) {
    return report_failure(e.what());
  }
}
