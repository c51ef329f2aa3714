// The one owner type of the library's device allocations: plans, layers and exchanges keep their
// workspaces in a DeviceAllocations and never call cudaFree themselves.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "host/core/cuda_check.hpp"

namespace fp4gemm::detail {

// Device allocations freed together when the owner goes (on whatever device is current then, as
// cudaFree allows). Move-only. bytes(): the sum of the sizes asked for.
class DeviceAllocations {
 public:
  DeviceAllocations() = default;
  ~DeviceAllocations() { release(); }
  DeviceAllocations(DeviceAllocations&& o) noexcept : ptrs_(std::move(o.ptrs_)), bytes_(std::exchange(o.bytes_, 0)) {
    o.ptrs_.clear();
  }
  DeviceAllocations& operator=(DeviceAllocations&& o) noexcept {
    if (this != &o) {
      release();
      ptrs_ = std::move(o.ptrs_), bytes_ = std::exchange(o.bytes_, 0);
      o.ptrs_.clear();
    }
    return *this;
  }
  DeviceAllocations(const DeviceAllocations&) = delete;
  DeviceAllocations& operator=(const DeviceAllocations&) = delete;

  // cudaMalloc of max(bytes, at_least) bytes on the current device (fp4gemm::Error naming `what`
  // when it fails). at_least > 0 gives every part, even an empty one, its own aligned address.
  template <typename T>
  T* allocate(std::size_t bytes, const char* what, std::size_t at_least = 16) {
    void* p = nullptr;
    FP4GEMM_CUDA_CHECK(cudaMalloc(&p, std::max(bytes, at_least)), what);
    ptrs_.push_back(p);
    bytes_ += bytes;
    return static_cast<T*>(p);
  }
  // A device copy of v's elements (allocated as above).
  template <typename T>
  T* upload(const std::vector<T>& v, const char* what) {
    T* d = allocate<T>(v.size() * sizeof(T), what);
    if (!v.empty()) FP4GEMM_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), what);
    return d;
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept {
    for (void* p : ptrs_) cudaFree(p);
    ptrs_.clear();
  }
  std::vector<void*> ptrs_;
  std::size_t bytes_ = 0;
};

}  // namespace fp4gemm::detail
