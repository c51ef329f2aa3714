// The CLI's measurement knobs: fp4gemm::Tuning filled from FP4GEMM_* environment variables.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "fp4gemm/tuning.hpp"

namespace fp4gemm::cli {

// Reads the FP4GEMM_* knob variables (docs/DESIGN.md "Measurement knobs"; each field of
// fp4gemm::Tuning names its variable); an unset or empty variable leaves the field to the plan.
// Throws fp4gemm::Error naming the variable when a value does not parse (an integer, a number,
// "F" or "F:T", or 0|1). Ranges are checked by the library when the plan is built (Error
// "options.tuning.<field>").
Tuning tuning_from_environment();

// The knob variables that are set (non-empty), as (name, value), in a fixed order: for reports.
std::vector<std::pair<std::string, std::string>> tuning_environment();

}  // namespace fp4gemm::cli
