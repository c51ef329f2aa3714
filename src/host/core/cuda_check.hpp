// Turns CUDA runtime / driver failures into fp4gemm::Error with the call that failed.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail {

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* what, const char* argument) {
  throw Error(argument, -1, std::string(what) + " failed: " + cudaGetErrorName(err) + " (" +
                                cudaGetErrorString(err) + ")");
}

}  // namespace fp4gemm::detail

#define FP4GEMM_CUDA_CHECK(call, argument)                                             \
  do {                                                                                 \
    cudaError_t fp4gemm_err_ = (call);                                                 \
    if (fp4gemm_err_ != cudaSuccess) ::fp4gemm::detail::throw_cuda(fp4gemm_err_, #call, argument); \
  } while (0)
