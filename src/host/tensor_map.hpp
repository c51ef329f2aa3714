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

}  // namespace fp4gemm::detail
