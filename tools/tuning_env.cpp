// The CLI's measurement knobs: fp4gemm::Tuning filled from FP4GEMM_* environment variables, so
// that scripts/ab.sh and the A/B tables of docs/PERF.md keep their spelling; the library reads no
// environment.
#include "tuning_env.hpp"

#include <charconv>
#include <cstdlib>
#include <optional>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::cli {

namespace {

// Every knob variable, in the order of fp4gemm::Tuning.
constexpr const char* kKnobs[] = {
    "FP4GEMM_WIDE_COST",     "FP4GEMM_NARROW_COST",    "FP4GEMM_EPILOGUE_COST", "FP4GEMM_CLASS_ROUND",
    "FP4GEMM_SPLIT_K",       "FP4GEMM_HANDOFF_COST",   "FP4GEMM_OWNER_COST",    "FP4GEMM_SHARE_EPILOGUE",
    "FP4GEMM_TILE_TOKENS",   "FP4GEMM_NARROW_ROWS",    "FP4GEMM_MAX_CTAS",      "FP4GEMM_RING_KB",
    "FP4GEMM_TMA_STORE",     "FP4GEMM_CONVERT_SCALES", "FP4GEMM_MOE_SPLIT_GAIN"};

// Variables of removed knobs (ablations of past decisions): refused by name, so that a script
// written for them does not silently time the default.
constexpr const char* kRemoved[] = {"FP4GEMM_BALANCE_HANDOFFS", "FP4GEMM_PREPASS_INLINE", "FP4GEMM_META_PREFETCH",
                                    "FP4GEMM_EARLY_WEIGHTS",    "FP4GEMM_NO_PDL",         "FP4GEMM_MOE_EARLY_KBLOCKS"};

std::optional<std::string> variable(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

[[noreturn]] void bad(const char* name, const std::string& value, const char* expected) {
  throw Error(name, -1, std::string("must be ") + expected + " (got '" + value + "')");
}

int parse_int(const char* name, const std::string& v) {
  int x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size()) bad(name, v, "an integer");
  return x;
}

double parse_double(const char* name, const std::string& text, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) bad(name, v, "a number");
  return x;
}

bool parse_01(const char* name, const std::string& v) {
  if (v != "0" && v != "1") bad(name, v, "0 or 1");
  return v == "1";
}

std::optional<int> int_knob(const char* name) {
  const auto v = variable(name);
  return v ? std::optional<int>(parse_int(name, *v)) : std::nullopt;
}
std::optional<double> number_knob(const char* name) {
  const auto v = variable(name);
  return v ? std::optional<double>(parse_double(name, *v, *v)) : std::nullopt;
}
std::optional<bool> bool_knob(const char* name) {
  const auto v = variable(name);
  return v ? std::optional<bool>(parse_01(name, *v)) : std::nullopt;
}
// "F" or "F:T": a k-block cost, fixed part and (optionally) per token.
void cost_knob(const char* name, std::optional<double>& fixed, std::optional<double>& per_token) {
  const auto v = variable(name);
  if (!v) return;
  const std::size_t colon = v->find(':');
  fixed = parse_double(name, v->substr(0, colon), *v);
  if (colon != std::string::npos) per_token = parse_double(name, v->substr(colon + 1), *v);
}

}  // namespace

Tuning tuning_from_environment() {
  for (const char* name : kRemoved)
    if (const auto v = variable(name))
      throw Error(name, -1, "is no longer a knob (an ablation of a past decision, removed; its measurements are in "
                            "docs/perf-history.md): unset it (got '" + *v + "')");
  Tuning t;
  cost_knob("FP4GEMM_WIDE_COST", t.wide_fixed, t.wide_per_token);
  cost_knob("FP4GEMM_NARROW_COST", t.narrow_fixed, t.narrow_per_token);
  t.epilogue_cost = number_knob("FP4GEMM_EPILOGUE_COST");
  t.class_round = int_knob("FP4GEMM_CLASS_ROUND");
  t.split_k = bool_knob("FP4GEMM_SPLIT_K");
  t.handoff_cost = number_knob("FP4GEMM_HANDOFF_COST");
  t.owner_cost = number_knob("FP4GEMM_OWNER_COST");
  t.share_epilogue = bool_knob("FP4GEMM_SHARE_EPILOGUE").value_or(t.share_epilogue);
  t.tile_tokens = int_knob("FP4GEMM_TILE_TOKENS");
  t.narrow_rows = int_knob("FP4GEMM_NARROW_ROWS");
  t.max_ctas = int_knob("FP4GEMM_MAX_CTAS");
  t.ring_kb = int_knob("FP4GEMM_RING_KB");
  t.tma_store = bool_knob("FP4GEMM_TMA_STORE");
  t.convert_scales = bool_knob("FP4GEMM_CONVERT_SCALES").value_or(t.convert_scales);
  cost_knob("FP4GEMM_MOE_SPLIT_GAIN", t.moe_split_gain16, t.moe_split_gain32);
  if (t.moe_split_gain16 && !t.moe_split_gain32) t.moe_split_gain32 = t.moe_split_gain16;  // (G16 alone: both)
  return t;
}

std::vector<std::pair<std::string, std::string>> tuning_environment() {
  std::vector<std::pair<std::string, std::string>> set;
  for (const char* name : kKnobs)
    if (const auto v = variable(name)) set.emplace_back(name, *v);
  return set;
}

}  // namespace fp4gemm::cli
