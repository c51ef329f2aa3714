// GPU tier entry: exits 77 (CTest "skipped") with one clear line when there is no GPU.
#include <gtest/gtest.h>

#include <cstdio>

#include "fp4gemm/fp4gemm.hpp"

int main(int argc, char** argv) {
  if (fp4gemm::device_count() == 0) {
    std::printf("GPU tier SKIPPED: no CUDA device visible (no GPU or no driver)\n");
    return 77;
  }
  const fp4gemm::DeviceInfo dev = fp4gemm::device_info();
  std::printf("GPU tier on %s (sm_%d%d, %d SMs)\n", dev.name.c_str(), dev.sm_major, dev.sm_minor,
              dev.multiprocessors);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
