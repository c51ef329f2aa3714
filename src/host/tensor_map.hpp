// TMA descriptors (cuTensorMapEncodeTiled through the runtime's driver entry point).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fp4gemm::detail {

// A 2D map over [outer rows][inner elements] with a row pitch of `row_bytes`; throws
// fp4gemm::Error naming `what` / `group` when the driver rejects it.
CUtensorMap make_map_2d(const void* base, CUtensorMapDataType type, std::uint64_t inner, std::uint64_t outer,
                        std::uint64_t row_bytes, std::uint32_t box_inner, std::uint32_t box_outer,
                        CUtensorMapSwizzle swizzle, const char* what, int group);

// A map of `rank` (1..5) dimensions, dims innermost first, strides_bytes[i] of dimension i + 1
// (any order: the GLU's gate/up maps step back and forth), element strides 1.
CUtensorMap make_map(const void* base, CUtensorMapDataType type, int rank, const std::uint64_t* dims,
                     const std::uint64_t* strides_bytes, const std::uint32_t* box, CUtensorMapSwizzle swizzle,
                     const char* what, int group);

}  // namespace fp4gemm::detail
