// A kernel launch's configuration for cudaLaunchKernelEx / cudaLaunchKernelExC, by default as a programmatic
// dependent of the stream's previous launch (programmatic dependent launch): the kernel may start while that one
// still runs, so it must griddepcontrol.wait (ptx::wait_prerequisites) before it reads what that one writes, and
// every launch after it may rely on its completion only if it waited. Internal.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace fp4gemm::detail {

struct LaunchConfig {
  cudaLaunchAttribute attr[1] = {};
  cudaLaunchConfig_t config{};  // (config.attrs points at attr: not copyable)

  LaunchConfig(dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream, bool dependent = true) {
    config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = smem, config.stream = stream;
    config.attrs = attr;
    if (dependent) {
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
      config.numAttrs = 1;
    }
  }
  // Every CTA resident at once instead (a grid barrier's launch); not a programmatic dependent.
  void cooperative() {
    attr[0] = cudaLaunchAttribute{};
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    config.numAttrs = 1;
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

}  // namespace fp4gemm::detail
