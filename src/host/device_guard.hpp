// Makes a device current for a scope and restores the caller's afterwards.
#pragma once

#include <cuda_runtime_api.h>

#include "host/core/cuda_check.hpp"

namespace fp4gemm::detail {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) FP4GEMM_CUDA_CHECK(cudaSetDevice(device), "options.device");
  }
  ~DeviceGuard() {
    int now = -1;
    if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace fp4gemm::detail
