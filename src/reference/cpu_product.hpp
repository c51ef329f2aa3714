// Internal pieces of the CPU reference shared by its operations (grouped GEMM, dual GEMM), so
// that every one of them computes its products through the same exact code path.
#pragma once

#include <cstdint>
#include <string>

#include "fp4gemm/reference.hpp"

namespace fp4gemm::reference::detail {

// Checks one group; errors name "groups[index].<field>", the B operand's fields being
// <b>, ld<b> and sf<b> (so a dual GEMM's operands can be told apart: "b1", "ldb2", "sfb2").
void validate(const HostGroup& g, int index, Format format, const std::string& b = "b");

// out[row * n + col] = the exact products of row `row` of A and row `col` of B added in float64
// in K order (block sums exact, one float64 addition per scale block); alpha is NOT applied.
// g must have been validated and have m, n > 0.
void exact_products(const HostGroup& g, Format format, ScaleLayout layout, int threads, double* out);

// Rounds `value` once (nearest even) to `type` and stores it as element `index` of c.
void store(void* c, OutType type, std::int64_t index, double value);

// threads <= 0: the hardware concurrency.
int resolve_threads(int threads);

}  // namespace fp4gemm::reference::detail
