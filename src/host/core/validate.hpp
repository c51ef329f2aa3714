// Validation of a grouped-GEMM description (SPEC §6); every failure names argument and group.
#pragma once

#include <span>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail {

// Checks everything that can be checked on the host: shapes, strides, alignment, scale sizes,
// overflow, overlapping outputs, and (when `check_pointers`) that every pointer is a device
// pointer of `device`. Throws fp4gemm::Error naming e.g. "groups[3].ldb".
void validate_groups(std::span<const GroupDesc> groups, const Options& options,
                     bool check_pointers);

}  // namespace fp4gemm::detail
