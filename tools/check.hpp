// --check: the exact CPU reference (fp4gemm::reference) against the GPU output, SPEC 3 rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data.hpp"

namespace fp4gemm::cli {

struct CheckReport {
  std::int64_t elements = 0;            // output elements compared
  std::int64_t tolerance_failures = 0;  // |out - ref| > 1e-3 + 1e-3 |ref|
  std::int64_t nan_mismatches = 0;      // NaN in one of out / ref only
  std::int64_t bit_mismatches = 0;      // elements whose bits differ from the reference's
  std::int64_t outside_writes = 0;      // poisoned padding columns (N <= col < ldc) that changed
  double max_abs = 0, max_rel = 0;
  // GPU MODE values ({0, +-0.5, +-1, +-1.5} x {1, 2}) make every sum exact: bits must match.
  bool require_bit_identical = true;

  bool pass() const {
    return tolerance_failures == 0 && nan_mismatches == 0 && outside_writes == 0 &&
           (!require_bit_identical || bit_mismatches == 0);
  }
  std::string summary() const;
};

// Copies the inputs and the current outputs of `data` to the host, runs
// reference::grouped_gemm (float64 accumulation) and compares every element of every group.
// The outputs must have been poisoned before the run being checked.
CheckReport check_against_reference(const ProblemData& data);

// ---- cross-checks of the benchmark rows (no CPU reference: cheap enough for every case) -----------
using OutputSnapshot = std::vector<std::vector<std::uint8_t>>;  // per group, C bytes as on device
OutputSnapshot snapshot_outputs(const ProblemData& data);

struct Agreement {
  std::int64_t elements = 0, mismatches = 0;
  double max_rel = 0;
  bool ok() const { return mismatches == 0; }
};
// Bitwise comparison of two snapshots of the same problem (e.g. fp4gemm vs per-group streams).
Agreement compare_identical(const ProblemData& data, const OutputSnapshot& x, const OutputSnapshot& y);
// fp4gemm's outputs against bf16 outputs [M, ldc] of the same problem (the cuBLAS peers): with
// GPU MODE values both are the exact result, rounded once each, so they differ by at most half an
// ulp of bf16 plus half an ulp of the output type (tolerance 2^-7 relative).
Agreement compare_with_bf16(const ProblemData& data, const OutputSnapshot& ours, const OutputSnapshot& bf16);

}  // namespace fp4gemm::cli
