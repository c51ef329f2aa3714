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
  std::int64_t outside_writes = 0;      // poisoned elements outside C (padding columns, unrouted rows) that changed
  std::int64_t bound_failures = 0;      // (fp32_bound) elements outside SPEC 3's FP32 bound
  double max_abs = 0, max_rel = 0;
  // GPU MODE values ({0, +-0.5, +-1, +-1.5} x {1, 2}) make every sum exact: bits must match.
  bool require_bit_identical = true;
  // Full-range data: cancellation makes the GPU MODE rule unreachable for any FP32-accumulating
  // kernel; the contract is SPEC 3's FP32 bound instead (tolerance failures are then reported only).
  bool fp32_bound = false;

  bool pass() const {
    const bool values_ok = fp32_bound ? bound_failures == 0 : tolerance_failures == 0;
    return values_ok && nan_mismatches == 0 && outside_writes == 0 && (!require_bit_identical || bit_mismatches == 0);
  }
  std::string summary() const;
};

// The bytes of a device buffer (as requested, without the padding), copied to the host.
std::vector<std::uint8_t> download(const DeviceBuffer& buffer);

// Compares rows [0, rows) of a device output `out` with the reference `ref` (both row-major, row
// stride ldc elements of `type`): the n columns per SPEC 3, and the padding columns [n, ldc), which
// must still hold the 0xFF poison. With `fp32_bound` (the report's mode), `exact` holds the
// reference in float64 (row stride n) and `slack` 2 K 2^-24 sum_k |a_k b_k| per element: an
// element passes when |out - exact| <= u |exact| + slack (u: the output type's unit roundoff), or
// when both overflow to the same infinity.
void compare_rows(const std::uint8_t* out, const std::uint8_t* ref, std::int64_t rows, int n, std::int64_t ldc,
                  OutType type, CheckReport& r, const double* exact = nullptr, const double* slack = nullptr);
// Rows whose every byte must still be the 0xFF poison (rows no expert owns).
void count_outside_writes(const std::uint8_t* out, std::int64_t rows, std::int64_t ldc, OutType type, CheckReport& r);

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
