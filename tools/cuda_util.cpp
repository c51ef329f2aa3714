// Error checks and RAII wrappers for the CLI's CUDA runtime and cuBLAS calls.
#include "cuda_util.hpp"

#include <cstdio>

namespace fp4gemm::cli {

void throw_cuda_error(cudaError_t err, const char* call, const char* where) {
  throw Error(where, -1, std::string(call) + " failed: " + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ")");
}

const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_<unknown>";
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* where) {
  throw Error(where, -1, std::string(call) + " failed: " + cublas_status_name(status));
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, const char* what) : bytes_(bytes) {
  padded_ = (bytes + 15) / 16 * 16;
  if (padded_ == 0) return;
  CLI_CUDA_CHECK(cudaMalloc(&ptr_, padded_), what);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

Stream::Stream() { CLI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream"); }
Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}

Event::Event(bool timing) {
  CLI_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming),
                 "event");
}
Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

CublasHandle::CublasHandle() { CLI_CUBLAS_CHECK(cublasCreate(&handle_), "cublas"); }
CublasHandle::~CublasHandle() {
  if (handle_) cublasDestroy(handle_);
}

void require_free_memory(std::size_t bytes, const std::string& what) {
  std::size_t free_bytes = 0, total_bytes = 0;
  CLI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes), "memory");
  if (bytes <= free_bytes) return;
  char text[160];
  std::snprintf(text, sizeof text, "needs %.2f GiB of device memory but only %.2f GiB is free",
                bytes / 1073741824.0, free_bytes / 1073741824.0);
  throw Error(what, -1, text);
}

}  // namespace fp4gemm::cli
