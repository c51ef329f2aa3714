// Error type, enum names and device queries shared by every layer.
#include <cuda_runtime_api.h>

#include <string>

#include "fp4gemm/fp4gemm.hpp"
#include "host/core/cuda_check.hpp"

namespace fp4gemm {

namespace {
std::string error_text(const std::string& argument, int group, const std::string& message) {
  std::string where = argument;
  if (group >= 0 && argument.find('[') == std::string::npos) where += " (group " + std::to_string(group) + ")";
  return "fp4gemm: " + where + ": " + message;
}
}  // namespace

Error::Error(std::string argument, int group, const std::string& message)
    : std::runtime_error(error_text(argument, group, message)),
      argument_(std::move(argument)),
      group_(group) {}

const char* to_string(Format f) { return f == Format::nvfp4 ? "nvfp4" : "mxfp4"; }
const char* to_string(ScaleLayout l) { return l == ScaleLayout::linear ? "linear" : "blocked"; }
const char* to_string(OutType t) {
  switch (t) {
    case OutType::f16: return "f16";
    case OutType::bf16: return "bf16";
    case OutType::f32: return "f32";
  }
  return "?";
}
const char* to_string(Backend b) {
  switch (b) {
    case Backend::automatic: return "auto";
    case Backend::fast: return "fast";
    case Backend::reference: return "reference";
  }
  return "?";
}
const char* to_string(Epilogue e) {
  return e == Epilogue::none ? "none" : e == Epilogue::silu ? "silu" : "swigluoai";
}
int scale_block_size(Format f) { return f == Format::nvfp4 ? 16 : 32; }
std::size_t out_type_size(OutType t) { return t == OutType::f32 ? 4 : 2; }

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device / no driver" error
    return 0;
  }
  return n;
}

DeviceInfo device_info(int device) {
  const int count = device_count();
  if (count == 0) throw Error("device", -1, "no CUDA device is available (no GPU or no driver)");
  if (device < 0) FP4GEMM_CUDA_CHECK(cudaGetDevice(&device), "device");
  if (device >= count)
    throw Error("device", -1, "device " + std::to_string(device) + " does not exist (" +
                                  std::to_string(count) + " visible)");
  cudaDeviceProp prop{};
  FP4GEMM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "device");
  DeviceInfo info;
  info.index = device;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  info.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  info.has_fast_kernel = (prop.major == 9 && prop.minor == 0);
  return info;
}

}  // namespace fp4gemm
