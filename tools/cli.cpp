// Option parsing and validation shared by the commands; device check; plan with fallback.
#include "cli.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <set>

#include "tuning_env.hpp"

namespace fp4gemm::cli {

Format parse_format(const std::string& s) {
  if (s == "nvfp4") return Format::nvfp4;
  if (s == "mxfp4") return Format::mxfp4;
  throw Error("--format", -1, "unknown format '" + s + "' (expected nvfp4 or mxfp4)");
}

ScaleLayout parse_layout(const std::string& s) {
  if (s == "linear") return ScaleLayout::linear;
  if (s == "blocked") return ScaleLayout::blocked;
  throw Error("--layout", -1, "unknown scale layout '" + s + "' (expected linear or blocked)");
}

OutType parse_out(const std::string& s) {
  if (s == "f16") return OutType::f16;
  if (s == "bf16") return OutType::bf16;
  if (s == "f32") return OutType::f32;
  throw Error("--out", -1, "unknown output type '" + s + "' (expected f16, bf16 or f32)");
}

Backend parse_backend(const std::string& s) {
  if (s == "auto") return Backend::automatic;
  if (s == "fast") return Backend::fast;
  if (s == "reference") return Backend::reference;
  throw Error("--backend", -1, "unknown backend '" + s + "' (expected auto, fast or reference)");
}

namespace {

// One integer of a comma-separated list, whole token only.
long long parse_integer(const std::string& token, const char* option) {
  if (token.empty()) throw Error(option, -1, "empty value in the list (expected e.g. 80,176,128)");
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(token.c_str(), &end, 10);
  if (end != token.c_str() + token.size())
    throw Error(option, -1, "'" + token + "' is not an integer");
  if (errno == ERANGE || v > INT_MAX || v < INT_MIN) throw Error(option, -1, "'" + token + "' is out of range");
  return v;
}

}  // namespace

std::vector<int> parse_int_list(const std::string& text, const char* option, int min_value) {
  if (text.empty()) throw Error(option, -1, "an empty list (expected comma-separated integers)");
  std::vector<int> values;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string token = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const long long v = parse_integer(token, option);
    if (v < min_value)
      throw Error(option, -1, "value " + token + " is below the minimum " + std::to_string(min_value));
    values.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return values;
}

std::vector<int> pick_cases(const std::string& cases, std::size_t count, const std::string& suite) {
  std::vector<int> picked;
  if (cases.empty()) {
    for (std::size_t i = 0; i < count; ++i) picked.push_back(static_cast<int>(i) + 1);
    return picked;
  }
  for (int index : parse_int_list(cases, "--cases", 1)) {
    if (static_cast<std::size_t>(index) > count)
      throw Error("--cases", -1, "case " + std::to_string(index) + " does not exist (suite '" + suite + "' has " +
                                     std::to_string(count) + " cases)");
    picked.push_back(index);
  }
  return picked;
}

RunSettings resolve_settings(const CommonOptions& o) {
  RunSettings s;
  s.data.format = parse_format(o.format);
  s.data.layout = parse_layout(o.layout);
  s.data.out = parse_out(o.out);
  s.data.seed = o.seed;
  s.backend = parse_backend(o.backend);
  if (o.iters < 1) throw Error("--iters", -1, "must be at least 1 (got " + std::to_string(o.iters) + ")");
  if (o.warmup < 0) throw Error("--warmup", -1, "must be >= 0 (got " + std::to_string(o.warmup) + ")");
  s.timing.iters = o.iters;
  s.timing.warmup = o.warmup;
  s.json_path = o.json;
  s.tuning = tuning_from_environment();
  return s;
}

void validate_shape(const ProblemShape& shape, Format format, const char* m_option,
                    const char* n_option, const char* k_option) {
  constexpr std::size_t kMaxGroups = 1 << 16;
  if (shape.m.empty()) throw Error(m_option, -1, "at least one group is needed");
  if (shape.m.size() > kMaxGroups)
    throw Error(m_option, -1, "too many groups (" + std::to_string(shape.m.size()) + ", at most 65536)");
  for (std::size_t g = 0; g < shape.m.size(); ++g)
    if (shape.m[g] < 0)
      throw Error(m_option, static_cast<int>(g), "M must be >= 0 (got " + std::to_string(shape.m[g]) + ")");
  if (shape.n < 1) throw Error(n_option, -1, "N must be positive (got " + std::to_string(shape.n) + ")");
  if (shape.k < 1) throw Error(k_option, -1, "K must be positive (got " + std::to_string(shape.k) + ")");
  const int block = scale_block_size(format);
  if (shape.k % block != 0)
    throw Error(k_option, -1, "K = " + std::to_string(shape.k) + " is not a multiple of the " +
                                  to_string(format) + " scale block (" + std::to_string(block) + ")");
}

ProblemShape grouped_shape(const GroupedOptions& o, Format format) {
  ProblemShape s;
  s.name = "grouped";
  s.m = parse_int_list(o.m, "--m", 0);
  s.n = o.n;
  s.k = o.k;
  validate_shape(s, format, "--m", "--n", "--k");
  return s;
}

ProblemShape gemm_shape(const GemmOptions& o, Format format) {
  const std::vector<int> v = parse_int_list(o.mnkl, "--mnkl", 1);
  if (v.size() != 4)
    throw Error("--mnkl", -1, "expected 4 comma-separated values M,N,K,L (got " + std::to_string(v.size()) + ")");
  if (v[3] > (1 << 16)) throw Error("--mnkl", -1, "L = " + std::to_string(v[3]) + " is too large (at most 65536)");
  ProblemShape s;
  s.name = "gemm";
  s.m.assign(static_cast<std::size_t>(v[3]), v[0]);
  s.n = v[1];
  s.k = v[2];
  s.l = v[3];
  validate_shape(s, format, "--mnkl", "--mnkl", "--mnkl");
  return s;
}

DeviceInfo require_device() {
  if (device_count() == 0) throw NoDeviceError();
  DeviceInfo info = device_info(-1);
  CLI_CUDA_CHECK(cudaSetDevice(info.index), "device");
  return info;
}

std::string strip_prefix(const std::string& what) {
  const std::string prefix = "fp4gemm: ";
  return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
}

std::string PlanChoice::label() const {
  const std::string name = plan ? plan->kernel_name() : "none";
  const std::string base = name == "reference" ? "reference" : "fast";
  return fell_back ? base + "*" : base;
}

PlanChoice make_plan(std::span<const GroupDesc> groups, const RunSettings& s) {
  static std::set<std::string> reported;  // one line per distinct reason
  const Backend backend = s.backend;
  Options options;
  options.format = s.data.format;
  options.scale_layout = s.data.layout;
  options.out_type = s.data.out;
  options.backend = backend;
  options.tuning = s.tuning;
  PlanChoice choice;
  choice.requested = backend;
  try {
    choice.plan = std::make_unique<Plan>(groups, options);
    return choice;
  } catch (const Error& e) {
    // A measurement knob out of range is the caller's mistake, not a reason to fall back.
    if (backend != Backend::automatic || e.argument().rfind("options.tuning.", 0) == 0) throw;
    choice.fell_back = true;
    choice.fallback_reason = strip_prefix(e.what());
  }
  if (reported.insert(choice.fallback_reason).second)
    std::cerr << "fp4gemm: backend auto cannot plan (" << choice.fallback_reason
              << "); using the reference kernel instead, labelled 'reference*'\n";
  options.backend = Backend::reference;
  choice.plan = std::make_unique<Plan>(groups, options);
  return choice;
}

void progress(const std::string& line) { std::cerr << line << std::endl; }

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace fp4gemm::cli
