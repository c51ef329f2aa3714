// fp4gemm::align_routing and the layer's routing launches (fp4gemm/moe.hpp): the checks, then the
// kernel (kernels/routing.cu, through the registry).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "fp4gemm/moe.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/moe_validate.hpp"
#include "host/core/validate.hpp"
#include "host/kernel_registry.hpp"  // (kernels/routing.hpp)

namespace fp4gemm {

namespace {

void validate_routing_args(const void* topk_ids, std::int64_t count, int k, int experts, const int* offsets,
                           const int* gather) {
  if (experts < 1 || experts > detail::kMaxMoeExperts)
    throw Error("experts", -1, "must be in 1.." + std::to_string(detail::kMaxMoeExperts) + ", got " +
                                   std::to_string(experts));
  if (count < 0 || count > INT32_MAX)
    throw Error("topk_ids", -1, "count must be in 0..2^31 - 1 (gather indices are int32), got " + std::to_string(count));
  if (k < 1) throw Error("k", -1, "ids per token must be >= 1, got " + std::to_string(k));
  if (count % k != 0)
    throw Error("topk_ids", -1, "count " + std::to_string(count) + " is not a multiple of k = " + std::to_string(k) +
                                    " (T tokens x k ids)");
  if (offsets == nullptr) throw Error("offsets", -1, "null pointer; it must point to E + 1 int32 in device memory");
  if (count > 0 && topk_ids == nullptr) throw Error("topk_ids", -1, "null pointer with count > 0");
  if (count > 0 && gather == nullptr) throw Error("gather", -1, "null pointer with count > 0");
}

void launch(const void* topk_ids, bool ids_int64, std::int64_t count, int k, int experts, int* offsets, int* gather,
            std::int64_t* order, cudaStream_t stream, int* row_of = nullptr, const int* token_count = nullptr,
            int* grid_scratch = nullptr) {
  FP4GEMM_CUDA_CHECK(detail::launch_align_routing_kernel(topk_ids, ids_int64, count, k, experts, offsets, gather, order,
                                                         row_of, token_count, stream, grid_scratch),
                     "align_routing");
}

}  // namespace

namespace detail {

void launch_align_routing(const void* topk_ids, bool ids_int64, std::int64_t count, int k, int experts, int* offsets,
                          int* gather, std::int64_t* order, cudaStream_t stream) {
  validate_routing_args(topk_ids, count, k, experts, offsets, gather);
  launch(topk_ids, ids_int64, count, k, experts, offsets, gather, order, stream);
}

void launch_align_routing_rows(const void* topk_ids, bool ids_int64, std::int64_t count, int k, int experts,
                               int* offsets, int* gather, int* row_of, cudaStream_t stream, const int* token_count,
                               int* grid_scratch) {
  validate_routing_args(topk_ids, count, k, experts, offsets, gather);
  launch(topk_ids, ids_int64, count, k, experts, offsets, gather, nullptr, stream, row_of, token_count, grid_scratch);
}

std::int64_t align_routing_grid_scratch_ints(int experts) { return routing_grid_scratch_ints(experts); }
std::int64_t align_routing_grid_min_ids() { return kRoutingGridMinIds; }

}  // namespace detail

void align_routing(const void* topk_ids, bool ids_int64, std::int64_t count, int k, int experts, int* offsets,
                   int* gather, std::int64_t* order, cudaStream_t stream) {
  validate_routing_args(topk_ids, count, k, experts, offsets, gather);
  int device = 0;
  FP4GEMM_CUDA_CHECK(cudaGetDevice(&device), "align_routing");
  if (count > 0) {
    detail::check_device_buffer("topk_ids", -1, topk_ids, count * (ids_int64 ? 8 : 4), device);
    detail::check_device_buffer("gather", -1, gather, count * 4, device);
    if (order != nullptr) detail::check_device_buffer("order", -1, order, count * 8, device);
  }
  detail::check_device_buffer("offsets", -1, offsets, (std::int64_t{experts} + 1) * 4, device);
  launch(topk_ids, ids_int64, count, k, experts, offsets, gather, order, stream);
}

}  // namespace fp4gemm
