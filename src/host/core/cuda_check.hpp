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

// Makes `s` wait for the work enqueued so far on `after` (an event recorded there), so that
// plan-time reads of the caller's arrays see what the caller's stream wrote into them (weights
// quantised on the GPU just before the plan is built, in-place updates before a reload). When
// `after` is being captured into a graph nothing can be waited for: its captured work has not run
// and its earlier work has (torch.cuda.graph synchronises before capturing); nothing is done then.
inline void order_after(cudaStream_t s, cudaStream_t after, const char* argument) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const cudaError_t q = cudaStreamIsCapturing(after, &capture);
  if (q == cudaErrorStreamCaptureImplicit) {  // the legacy stream while another stream captures
    (void)cudaGetLastError();
    return;
  }
  FP4GEMM_CUDA_CHECK(q, argument);
  if (capture != cudaStreamCaptureStatusNone) return;
  cudaEvent_t ev = nullptr;
  FP4GEMM_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), argument);
  cudaError_t e = cudaEventRecord(ev, after);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(s, ev, 0);
  cudaEventDestroy(ev);
  FP4GEMM_CUDA_CHECK(e, argument);
}

// Plan-time device work (scale conversions, scans of the caller's scales): `enqueue(stream)` ->
// cudaError_t on a private non-blocking stream, ordered after the work enqueued so far on `after`
// (order_after), waited for, the stream destroyed on every path. Private, because a plan may be
// built while another stream of the thread is being captured. Throws fp4gemm::Error naming
// `argument` on a failure.
template <class F>
void run_on_private_stream(const char* argument, cudaStream_t after, F&& enqueue) {
  cudaStream_t s = nullptr;
  FP4GEMM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), argument);
  struct Owner {
    cudaStream_t s;
    ~Owner() { cudaStreamDestroy(s); }
  } owner{s};
  order_after(s, after, argument);
  const cudaError_t e = enqueue(s);
  FP4GEMM_CUDA_CHECK(e == cudaSuccess ? cudaStreamSynchronize(s) : e, argument);
}

}  // namespace fp4gemm::detail
