// Options of the fp4gemm commands, their validation, and helpers every command shares.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "data.hpp"
#include "fp4gemm/fp4gemm.hpp"
#include "timing.hpp"

#ifndef FP4GEMM_VERSION  // set by tools/CMakeLists.txt from the project version
#define FP4GEMM_VERSION "unknown"
#endif

namespace fp4gemm::cli {

// ---- options as parsed by CLI11 (strings are checked against their choices there) -------------
struct CommonOptions {
  std::string format = "nvfp4";
  std::string layout = "linear";
  std::string out = "f16";
  std::string backend = "auto";
  int iters = 100;
  int warmup = 10;
  std::uint64_t seed = 1111;
  std::string json;  // output file, empty: none
};

struct BenchOptions : CommonOptions {
  std::string suite = "seed";
  std::string act;  // moe suite: nvfp4 | mxfp4 | bf16; empty: W4A4 in --format
  std::string values;  // dual suite: gpumode | full; empty: gpumode
  std::string cases;  // "1,3": 1-based indices into the selected suite; empty: all
  bool no_peers = false;
  int settle_ms = 500;  // idle time before each case's timing (see bench.cpp)
  int decode_tokens = -1;  // layer suite: MoeLayerOptions::decode_tokens (-1: by the layer)
  std::string weight_layout = "rows";  // moe / layer suites: rows | pieces (MoeOptions::weight_layout)
};

struct GroupedOptions : CommonOptions {
  std::string m;  // "80,176,..."
  int n = 0, k = 0;
  bool check = false;
};

struct GemmOptions : CommonOptions {
  std::string mnkl;  // "M,N,K,L"
  bool check = false;
};

// `fp4gemm dual`: the dual GEMM (SwiGLU) with batch L.
struct DualCommandOptions : GemmOptions {
  std::string activation = "silu";  // silu | swigluoai
  std::string values = "gpumode";   // gpumode | full
};

struct InfoOptions {
  std::string json;
};

// `fp4gemm moe`: one MoE layer GEMM with a random top-k routing (its own --layout: the row layout).
struct MoeCommandOptions {
  int experts = 0, n = 0, k = 0, tokens = 0, topk = 1;
  std::string act = "nvfp4";       // nvfp4 | mxfp4 (W4A4) | bf16 (W4A16 on mxfp4 weights)
  std::string scales = "blocked";  // weight scale layout
  std::string out = "bf16";
  std::string layout = "contiguous";
  std::string routing = "uniform";
  std::string values = "full";  // full | gpumode
  std::string weight_layout = "rows";  // rows | pieces (MoeOptions::weight_layout; packed on the GPU)
  bool check = false, dynamic = false;
  int iters = 100, warmup = 10;
  std::uint64_t seed = 1111;
  std::string json;
};

// `fp4gemm layer`: the whole expert layer (fp4gemm::MoeLayer) on a random top-k routing.
struct LayerCommandOptions {
  int experts = 0, hidden = 0, inter = 0, tokens = 0, topk = 8;
  std::string act = "nvfp4";        // nvfp4 | mxfp4 (W4A4) | bf16 (W4A16 on mxfp4 weights)
  std::string activation = "silu";  // silu | swigluoai
  int iters = 100, warmup = 10;
  std::uint64_t seed = 1111;
  std::string json;
  bool batch_invariant = false;  // layer: MoeLayerOptions::batch_invariant (no stream-K; A/B)
  int decode_tokens = -1;  // layer: MoeLayerOptions::decode_tokens (-1: by the layer; 0: the general path; A/B)
  bool fuse_quantise = false;  // W4A4: the intermediate quantised in GEMM1's epilogue (A/B; off by default)
  std::string values = "gpumode";  // gpumode | checkpoint (MXFP4 weight scale codes 117..127)
  std::string scales = "blocked";  // layer: the weight scales' layout, blocked | linear
  std::string weight_layout = "rows";  // layer: rows | pieces (packed on the GPU; MoeLayerOptions::weight_layout)
};

// `fp4gemm quantize`: the GPU activation quantiser on a bf16 [rows, k] matrix vs a device copy.
struct QuantizeCommandOptions {
  std::int64_t rows = 4096, k = 7168;
  std::string format = "nvfp4";
  std::string scales = "linear";
  int iters = 100, warmup = 10;
  std::string json;
};

// ---- resolved settings ------------------------------------------------------------------------
struct RunSettings {
  DataSettings data;
  Backend backend = Backend::automatic;
  Tuning tuning;  // the plan's measurement knobs, from FP4GEMM_* variables (tuning_env.hpp)
  TimingConfig timing;
  std::string json_path;
};

// Maps the option strings to enums and checks the counts (fp4gemm::Error naming the option);
// reads the tuning knobs from the environment (fp4gemm::Error naming the variable).
RunSettings resolve_settings(const CommonOptions& o);
// The option strings of --format, --layout, --out, --backend (fp4gemm::Error naming the option).
Format parse_format(const std::string& s);
ScaleLayout parse_layout(const std::string& s);
OutType parse_out(const std::string& s);
Backend parse_backend(const std::string& s);

// "80,176,128" -> values; each must be an integer in [min_value, INT_MAX]. Throws fp4gemm::Error
// naming `option` on an empty list, a non-integer or a value out of range.
std::vector<int> parse_int_list(const std::string& text, const char* option, int min_value);

// --cases of a suite of `count` cases: the 1-based case numbers listed ("1,3"; empty: all of them),
// each checked to exist (fp4gemm::Error naming --cases).
std::vector<int> pick_cases(const std::string& cases, std::size_t count, const std::string& suite);

// Shapes from the command lines, validated on the host (K a multiple of the scale block, ...).
ProblemShape grouped_shape(const GroupedOptions& o, Format format);
ProblemShape gemm_shape(const GemmOptions& o, Format format);
void validate_shape(const ProblemShape& shape, Format format, const char* m_option,
                    const char* n_option, const char* k_option);

// ---- GPU presence ---------------------------------------------------------------------------------
// Thrown when there is no GPU; main prints exactly "fp4gemm: <message>".
class NoDeviceError : public std::runtime_error {
 public:
  NoDeviceError() : std::runtime_error("no CUDA device is available (no GPU or no driver)") {}
};
// Checks fp4gemm::device_count() first, then makes the device current; returns its info.
DeviceInfo require_device();

// ---- plan with fallback ---------------------------------------------------------------------------
// A plan for the requested backend (s.backend, with s.data's formats and s.tuning); when
// `automatic` cannot plan (no fast kernel yet, or not on this GPU), one line goes to stderr and the
// reference kernel is planned instead, labelled.
struct PlanChoice {
  std::unique_ptr<Plan> plan;
  Backend requested = Backend::automatic;
  bool fell_back = false;
  std::string fallback_reason;
  std::string label() const;  // "fast", "reference", "reference*" (after a fallback)
};
PlanChoice make_plan(std::span<const GroupDesc> groups, const RunSettings& s);

// Writes a progress line to stderr ("[bench] case 2/4: timing peers...").
void progress(const std::string& line);
// e.what() of an fp4gemm::Error without the leading "fp4gemm: ".
std::string strip_prefix(const std::string& what);
// "2026-11-22T10:00:00Z"
std::string utc_now();

// ---- MoE --------------------------------------------------------------------------------------------
// --act (nvfp4 / mxfp4: W4A4 in that format; bf16: W4A16 on mxfp4 weights), --scales, --out,
// --layout (contiguous / masked), --routing, --values into the problem settings.
struct MoeSettings;
MoeSettings moe_settings(const std::string& act, const std::string& scales, const std::string& out,
                         const std::string& layout, const std::string& routing, const std::string& values,
                         std::uint64_t seed);

// ---- commands -----------------------------------------------------------------------------------
int run_info(const InfoOptions& o);
int run_bench(const BenchOptions& o);
int run_grouped(const GroupedOptions& o);
int run_gemm(const GemmOptions& o);
int run_dual(const DualCommandOptions& o);
int run_moe(const MoeCommandOptions& o);
int run_layer(const LayerCommandOptions& o);
int run_quantize(const QuantizeCommandOptions& o);
int run_moe_suite(const BenchOptions& o);   // bench --suite moe (moe_bench.cpp)
int run_dual_suite(const BenchOptions& o);  // bench --suite dual (dual_bench.cpp)
int run_layer_suite(const BenchOptions& o);  // bench --suite layer (layer_bench.cpp)

}  // namespace fp4gemm::cli
