// The timing harness's own floor (docs/PERF.md v13): what `fp4gemm bench` / `grouped` would report
// for kernels that do (almost) nothing. Same method as tools/timing.cpp: a memset of 2 x L2 (the
// flush, outside the events), event, body, event; median of 300 repetitions enqueued back to back.
// Bodies: nothing; one or two empty kernels; kernels with one or four dependent DRAM reads and a
// write per thread (after the flush every line of L2 is dirty, so each miss also evicts).
// (The source buffer is zero, so chain_k's three re-reads hit the line its first read brought in.)
//
// Build and run (sm_90a):
//   nvcc -O2 -gencode=arch=compute_90a,code=sm_90a bench/micro/harness_overhead.cu -o build/harness_overhead \
//     && build/harness_overhead
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
__global__ void empty_k() {}
__global__ void touch_k(const int* src, int* dst) {  // one dependent DRAM read + write per block
  int v = src[blockIdx.x * 4096 + threadIdx.x];
  dst[blockIdx.x * 4096 + threadIdx.x] = v + 1;
}
__global__ void chain_k(const int* src, int* dst) {  // 4 dependent reads of one line (1 miss, 3 hits), a write
  int i = blockIdx.x * 4096 + threadIdx.x;
  for (int r = 0; r < 4; ++r) i = src[i] + blockIdx.x * 4096 + threadIdx.x;
  dst[blockIdx.x * 4096 + threadIdx.x] = i;
}
int main() {
  int dev = 0; cudaDeviceProp p; cudaGetDeviceProperties(&p, dev);
  size_t fb = std::max<size_t>(2 * (size_t)p.l2CacheSize, 32u << 20);
  void* flush; cudaMalloc(&flush, fb);
  int *src, *dst; cudaMalloc(&src, 64 << 20); cudaMalloc(&dst, 64 << 20); cudaMemset(src, 0, 64 << 20);
  cudaStream_t s; cudaStreamCreate(&s);
  auto run = [&](const char* name, auto body) {
    const int reps = 300; std::vector<cudaEvent_t> a(reps), b(reps);
    for (int i = 0; i < reps; ++i) { cudaEventCreate(&a[i]); cudaEventCreate(&b[i]); }
    for (int i = 0; i < 20; ++i) { cudaMemsetAsync(flush, 0, fb, s); body(); }
    for (int i = 0; i < reps; ++i) { cudaMemsetAsync(flush, 0, fb, s); cudaEventRecord(a[i], s); body(); cudaEventRecord(b[i], s); }
    cudaStreamSynchronize(s);
    std::vector<float> t(reps); for (int i = 0; i < reps; ++i) cudaEventElapsedTime(&t[i], a[i], b[i]);
    std::sort(t.begin(), t.end());
    printf("%-44s median %6.2f us  min %6.2f\n", name, t[reps / 2] * 1e3, t[0] * 1e3);
  };
  run("nothing between the events", [&] {});
  run("1 empty kernel", [&] { empty_k<<<1, 32, 0, s>>>(); });
  run("2 empty kernels", [&] { empty_k<<<1, 32, 0, s>>>(); empty_k<<<1, 32, 0, s>>>(); });
  run("132 x 384 empty kernel", [&] { empty_k<<<132, 384, 0, s>>>(); });
  run("1 DRAM read + write (1 block)", [&] { touch_k<<<1, 128, 0, s>>>(src, dst); });
  run("1 DRAM read + write (132 blocks)", [&] { touch_k<<<132, 128, 0, s>>>(src, dst); });
  run("1 read + 3 dependent re-reads + write (132)", [&] { chain_k<<<132, 128, 0, s>>>(src, dst); });
  run("2 kernels, each 1 read + write (132 blocks)", [&] { touch_k<<<132, 128, 0, s>>>(src, dst); touch_k<<<132, 128, 0, s>>>(dst, src); });
  printf("L2 %d bytes, flush %zu bytes, %s\n", p.l2CacheSize, fb, p.name);
}
