// Shared by the micro-benchmarks in bench/micro/: event timing of a launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

// Best of `runs` timed launches (CUDA events, launch(false)) after one warm-up launch(true), in ms;
// prints the first CUDA error, if any.
template <typename Launch>
float best_ms(Launch launch, int runs = 7) {
  launch(true);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best = 1e30f;
  for (int r = 0; r < runs; ++r) {
    cudaEventRecord(e0);
    launch(false);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    best = ms < best ? ms : best;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) std::printf("error: %s\n", cudaGetErrorString(err));
  return best;
}
