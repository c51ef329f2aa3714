// Validation of a grouped-GEMM description (SPEC §6); every failure names argument and group.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail {

// Checks everything that can be checked on the host: shapes, strides, alignment, scale sizes,
// overflow, overlapping outputs, and (when `check_pointers`) that every pointer is a device
// pointer of `device`. Throws fp4gemm::Error naming e.g. "groups[3].ldb".
void validate_groups(std::span<const GroupDesc> groups, const Options& options,
                     bool check_pointers);

// Requires `p` to be device memory of `device` (or managed memory) with the `bytes` bytes from p
// on inside its allocation; throws fp4gemm::Error(name, group, ...) mentioning `note` otherwise.
void check_device_buffer(const std::string& name, int group, const void* p, std::int64_t bytes, int device,
                         const std::string& note = "");

// The knobs of a tuning struct (fp4gemm/tuning.hpp): throws fp4gemm::Error("options.tuning.<field>").
void validate_tuning(const Tuning& tuning);

}  // namespace fp4gemm::detail
