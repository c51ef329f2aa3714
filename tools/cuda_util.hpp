// RAII wrappers and error checks for the CUDA runtime and cuBLAS calls the CLI makes.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::cli {

// Turns a failed call into fp4gemm::Error naming the call; `where` says what the CLI was doing.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* where);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* where);
const char* cublas_status_name(cublasStatus_t status);

}  // namespace fp4gemm::cli

#define CLI_CUDA_CHECK(call, where)                                                    \
  do {                                                                                 \
    const cudaError_t cli_err_ = (call);                                               \
    if (cli_err_ != cudaSuccess) ::fp4gemm::cli::throw_cuda_error(cli_err_, #call, where); \
  } while (0)

#define CLI_CUBLAS_CHECK(call, where)                                                          \
  do {                                                                                         \
    const cublasStatus_t cli_status_ = (call);                                                 \
    if (cli_status_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::fp4gemm::cli::throw_cublas_error(cli_status_, #call, where);                           \
  } while (0)

namespace fp4gemm::cli {

// Device memory owned by one object; size rounded up to 16 bytes so fill kernels can write
// whole 16-byte vectors.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes, const char* what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    DeviceBuffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  std::size_t bytes() const { return bytes_; }           // as requested
  std::size_t padded_bytes() const { return padded_; }   // as allocated (multiple of 16)

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(padded_, o.padded_);
  }
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0, padded_ = 0;
};

class Stream {
 public:
  Stream();  // non-blocking with respect to the legacy default stream
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = true);
  ~Event();
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class CublasHandle {
 public:
  CublasHandle();
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// Throws a clear fp4gemm::Error when `bytes` more device memory is not free.
void require_free_memory(std::size_t bytes, const std::string& what);

}  // namespace fp4gemm::cli
