// The run preconditions shared by Plan and MoeGemm (run_serializer.hpp).
#include "host/run_serializer.hpp"

#include <string>

namespace fp4gemm::detail {

bool check_run_preconditions(int device, cudaStream_t stream) {
  if (const cudaError_t pending = cudaGetLastError(); pending != cudaSuccess)
    throw Error("run", -1, std::string("a CUDA error from an earlier call (not fp4gemm's) was pending: ") +
                               cudaGetErrorName(pending) + " (" + cudaGetErrorString(pending) +
                               "); fp4gemm launched nothing");
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (const cudaError_t e = cudaStreamIsCapturing(stream, &capture); e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error("stream", -1, std::string("not a usable CUDA stream: ") + cudaGetErrorName(e) + " (" +
                                  cudaGetErrorString(e) + ")");
  }
  if (capture != cudaStreamCaptureStatusNone) return true;  // (cudaStreamGetDevice would end a capture)
  int stream_device = -1;
  if (const cudaError_t e = cudaStreamGetDevice(stream, &stream_device); e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error("stream", -1, std::string("not a usable CUDA stream: ") + cudaGetErrorName(e) + " (" +
                                  cudaGetErrorString(e) + ")");
  }
  if (stream_device != device)
    throw Error("stream", -1, "the stream belongs to device " + std::to_string(stream_device) +
                                  ", but the plan was built for device " + std::to_string(device));
  return false;
}

}  // namespace fp4gemm::detail
