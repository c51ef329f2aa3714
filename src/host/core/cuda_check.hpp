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

namespace fp4gemm::detail {

// Plan-time device work (scale conversions): `enqueue(stream)` -> cudaError_t on a private
// non-blocking stream, waited for, the stream destroyed on every path. Private, because a plan may
// be built while another stream of the thread is being captured. Throws fp4gemm::Error naming
// `argument` on a failure.
template <class F>
void run_on_private_stream(const char* argument, F&& enqueue) {
  cudaStream_t s = nullptr;
  FP4GEMM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), argument);
  const cudaError_t e = enqueue(s);
  const cudaError_t sync = e == cudaSuccess ? cudaStreamSynchronize(s) : e;
  cudaStreamDestroy(s);
  FP4GEMM_CUDA_CHECK(sync, argument);
}

}  // namespace fp4gemm::detail
