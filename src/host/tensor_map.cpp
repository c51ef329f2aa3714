// TMA descriptors (see tensor_map.hpp).
#include "host/tensor_map.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <string>

#include "host/core/cuda_check.hpp"

namespace fp4gemm::detail {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    FP4GEMM_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                        cudaEnableDefault, &status),
                       "plan");
    if (status != cudaDriverEntryPointSuccess || ptr == nullptr)
      throw Error("plan", -1, "the CUDA driver has no cuTensorMapEncodeTiled (driver too old?)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

}  // namespace

CUtensorMap make_map_2d(const void* base, CUtensorMapDataType type, std::uint64_t inner,
                        std::uint64_t outer, std::uint64_t row_bytes, std::uint32_t box_inner,
                        std::uint32_t box_outer, CUtensorMapSwizzle swizzle, const char* what, int group) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&map, type, 2, const_cast<void*>(base), dims, strides, box,
                                          elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(what, group, "cuTensorMapEncodeTiled failed (error " + std::to_string(static_cast<int>(r)) + ")");
  return map;
}

CUtensorMap make_map(const void* base, CUtensorMapDataType type, int rank, const std::uint64_t* dims,
                     const std::uint64_t* strides_bytes, const std::uint32_t* box, CUtensorMapSwizzle swizzle,
                     const char* what, int group) {
  CUtensorMap map;
  cuuint64_t d[5];
  cuuint64_t st[4];
  cuuint32_t b[5], es[5];
  for (int i = 0; i < rank; ++i) d[i] = dims[i], b[i] = box[i], es[i] = 1;
  for (int i = 0; i + 1 < rank; ++i) st[i] = strides_bytes[i];
  const CUresult r = tensor_map_encoder()(&map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), d, st, b,
                                          es, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(what, group, "cuTensorMapEncodeTiled failed (error " + std::to_string(static_cast<int>(r)) + ")");
  return map;
}

}  // namespace fp4gemm::detail
