// Microbenchmark: the decode path's memory stream without its math (docs/PERF.md v77). A build of the decode kernels
// with the dequantisation and mma removed ran only 9-12 % faster than the real one, and every change that put more
// bytes in flight (deeper rings, L2 bulk prefetch) was slower: the loop is bound by its stream. This program measures
// that stream alone -- the HBM read rate of one CTA per SM, W warps each walking its own D-deep ring of 1 KB chunks --
// against the choices a redesign could make:
//   ORDER  0 "warp": each warp one contiguous range (the decode kernels' stream-K: 2,112 independent 1 KB streams)
//          1 "cta":  the CTA's warps take interleaved chunks of the CTA's contiguous range (one stream per SM)
//          2 "grid": chunk i to global warp i % warps (the whole GPU one interleaved stream)
//   COPY   0 cp.async, 16 bytes per lane, two per lane (the kernels' LDGSTS)
//          1 one cp.async.bulk per chunk by lane 0, completing on the stage's mbarrier (the TMA unit copies)
//   D      ring stages per warp (the kernels: 3)
//   C      a synthetic per-chunk compute: C dependent IMADs per lane in 4 independent chains, standing in for the
//          dequantisation and mma (the kernels: ~176 instructions per chunk and warp, ~110 of them math)
// Bytes: 54 MB (gpt-oss-120b's four experts at T 1) and 436 MB (~33 experts, T 8); L2 (60 MB on the H200) flushed
// before every timed launch by a 256 MB memset; median of 15 launches. Also a plain grid-stride ld.global.v4 read and
// cudaMemcpy device-to-device (read + write counted) for reference.
//
// Build and run (sm_90a):
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude --expt-relaxed-constexpr \
//        bench/micro/stream_pattern.cu -o build/stream_pattern
//   build/stream_pattern            (the sweep below; QUICK=1: ring depth 3 only)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "device/decode_stream.cuh"
#include "device/ptx/ptx.cuh"

#define CHECK(x)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);        \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

namespace {

constexpr int kChunk = 1024;
// (the decode ring's own copy, wait and load wrappers, and the project's mbarrier / bulk-copy ones)
using fp4gemm::detail::decode::cp_async_16_at;
using fp4gemm::detail::decode::cp_async_commit;
using fp4gemm::detail::decode::cp_async_wait;
using fp4gemm::detail::decode::lds_128;
namespace ptx = fp4gemm::ptx;

// The chunk index of step j of this warp, and how many steps it has.
template <int ORDER>
struct Walk {
  long long first, stride, count;
  __device__ Walk(long long chunks) {
    const long long W = blockDim.x / 32, w = threadIdx.x / 32, b = blockIdx.x, G = gridDim.x;
    if (ORDER == 0) {
      const long long gw = b * W + w, TW = G * W;
      first = gw * chunks / TW, stride = 1, count = (gw + 1) * chunks / TW - first;
    } else if (ORDER == 1) {
      const long long c0 = b * chunks / G, c1 = (b + 1) * chunks / G;
      first = c0 + w, stride = W, count = w < c1 - c0 ? (c1 - c0 - w + W - 1) / W : 0;
    } else {
      const long long gw = b * W + w, TW = G * W;
      first = gw, stride = TW, count = gw < chunks ? (chunks - gw + TW - 1) / TW : 0;
    }
  }
  __device__ long long at(long long j) const { return first + j * stride; }
};

// C dependent IMADs per lane in 4 independent chains over the chunk's words (kept alive through `acc`).
__device__ __forceinline__ void compute(uint4 a, uint4 b, int C, std::uint32_t (&acc)[4]) {
  acc[0] ^= a.x ^ b.x, acc[1] ^= a.y ^ b.y, acc[2] ^= a.z ^ b.z, acc[3] ^= a.w ^ b.w;
#pragma unroll 1
  for (int i = 0; i < C; i += 4) {
    acc[0] = acc[0] * 0x9E3779B1u + a.x;
    acc[1] = acc[1] * 0x85EBCA77u + a.y;
    acc[2] = acc[2] * 0xC2B2AE3Du + b.x;
    acc[3] = acc[3] * 0x27D4EB2Fu + b.y;
  }
}

template <int D, int ORDER, int COPY>
__global__ void __launch_bounds__(1024, 1) stream(const std::uint8_t* __restrict__ src, long long chunks, int C,
                                                  std::uint32_t* __restrict__ out) {
  extern __shared__ __align__(1024) std::uint8_t ring_all[];
  __shared__ __align__(8) unsigned long long bars[32][D];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  std::uint8_t* ring = ring_all + static_cast<long long>(w) * D * kChunk;
  const std::uint32_t r0 = ptx::smem_addr(ring);
  const Walk<ORDER> walk(chunks);
  std::uint32_t acc[4] = {0u, 0u, 0u, 0u};
  if constexpr (COPY == 0) {
    auto issue = [&](int stage, long long j) {
      if (j < walk.count) {
        const std::uint8_t* p = src + walk.at(j) * kChunk + 16 * lane;
        cp_async_16_at(r0 + stage * kChunk + 16 * lane, p, true);
        cp_async_16_at(r0 + stage * kChunk + 512 + 16 * lane, p + 512, true);
      }
      cp_async_commit();
    };
#pragma unroll 1
    for (int d = 0; d < D; ++d) issue(d, d);
    int stage = 0;
#pragma unroll 1
    for (long long j = 0; j < walk.count; ++j) {
      cp_async_wait<D - 1>();
      const uint4 a = lds_128(r0 + stage * kChunk + 16 * lane), b = lds_128(r0 + stage * kChunk + 512 + 16 * lane);
      compute(a, b, C, acc);
      issue(stage, j + D);
      stage = stage + 1 == D ? 0 : stage + 1;
    }
  } else {
    std::uint64_t* bar = reinterpret_cast<std::uint64_t*>(&bars[w][0]);
    if (lane == 0)
      for (int d = 0; d < D; ++d) ptx::mbarrier_init(bar + d, 1);
    ptx::fence_barrier_init();
    __syncwarp();
    auto issue = [&](int stage, long long j) {
      if (lane == 0 && j < walk.count) {
        ptx::mbarrier_arrive_expect_tx(bar + stage, kChunk);
        ptx::bulk_load(ring + stage * kChunk, src + walk.at(j) * kChunk, kChunk, bar + stage);
      }
    };
#pragma unroll 1
    for (int d = 0; d < D; ++d) issue(d, d);
    int stage = 0;
    std::uint32_t phase = 0;
#pragma unroll 1
    for (long long j = 0; j < walk.count; ++j) {
      ptx::mbarrier_wait(bar + stage, phase);
      const uint4 a = lds_128(r0 + stage * kChunk + 16 * lane), b = lds_128(r0 + stage * kChunk + 512 + 16 * lane);
      compute(a, b, C, acc);
      __syncwarp();  // (every lane has read the stage before lane 0 refills it)
      issue(stage, j + D);
      if (++stage == D) stage = 0, phase ^= 1u;
    }
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc[0] ^ acc[1] ^ acc[2] ^ acc[3];
}

__global__ void plain_read(const uint4* __restrict__ src, long long n, std::uint32_t* __restrict__ out) {
  std::uint32_t a = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(src + i);
    a ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}

struct Ctx {
  std::uint8_t* src;
  void* flush;
  std::uint32_t* out;
  int sms;
  cudaEvent_t e0, e1;
};

template <class F>
float median_us(Ctx& c, F launch, int reps = 15) {
  launch();
  CHECK(cudaGetLastError());
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaMemsetAsync(c.flush, r & 0xFF, 256ull << 20));
    CHECK(cudaEventRecord(c.e0));
    launch();
    CHECK(cudaEventRecord(c.e1));
    CHECK(cudaEventSynchronize(c.e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, c.e0, c.e1));
    t.push_back(ms * 1e3f);
  }
  CHECK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <int D, int ORDER, int COPY>
void run(Ctx& c, long long bytes, int warps, int C) {
  const int smem_bytes = warps * D * kChunk;
  if (smem_bytes > 227 * 1024 - 32 * D * 8) return;  // (does not fit)
  auto k = stream<D, ORDER, COPY>;
  CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  const long long chunks = bytes / kChunk;
  const float us = median_us(c, [&] { k<<<c.sms, 32 * warps, smem_bytes>>>(c.src, chunks, C, c.out); });
  static const char* kOrder[3] = {"warp", "cta", "grid"};
  static const char* kCopy[2] = {"cp.async", "bulk"};
  std::printf("%6.0f MB  warps %2d  D %d  %-4s  %-8s  C %3d  %8.1f us  %5.2f TB/s\n", bytes / 1e6, warps, D,
              kOrder[ORDER], kCopy[COPY], C, us, bytes / us * 1e-6);
}

template <int D>
void sweep_depth(Ctx& c, long long bytes, int warps, int C) {
  run<D, 0, 0>(c, bytes, warps, C);
  run<D, 1, 0>(c, bytes, warps, C);
  run<D, 2, 0>(c, bytes, warps, C);
  run<D, 0, 1>(c, bytes, warps, C);
  run<D, 1, 1>(c, bytes, warps, C);
}

}  // namespace

int main() {
  Ctx c{};
  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, dev));
  c.sms = prop.multiProcessorCount;
  std::printf("stream_pattern on %s (%d SMs, L2 %.0f MiB)\n", prop.name, c.sms, prop.l2CacheSize / 1048576.0);
  const long long big = 436ll << 20;
  CHECK(cudaMalloc(&c.src, big));
  CHECK(cudaMemset(c.src, 0x5A, big));
  CHECK(cudaMalloc(&c.flush, 256ull << 20));
  CHECK(cudaMalloc(&c.out, 1 << 20));
  CHECK(cudaEventCreate(&c.e0));
  CHECK(cudaEventCreate(&c.e1));
  {  // references
    void* dst;
    CHECK(cudaMalloc(&dst, big));
    const float us = median_us(c, [&] { CHECK(cudaMemcpyAsync(dst, c.src, big, cudaMemcpyDeviceToDevice)); });
    std::printf("cudaMemcpy d2d %.0f MB: %.1f us, %.2f TB/s (read + write)\n", big / 1e6, us, 2 * big / us * 1e-6);
    CHECK(cudaFree(dst));
    for (long long bytes : {54ll << 20, big}) {
      const float r = median_us(c, [&] { plain_read<<<4 * c.sms, 512>>>(reinterpret_cast<const uint4*>(c.src), bytes / 16, c.out); });
      std::printf("plain ld.global.v4 read %.0f MB: %.1f us, %.2f TB/s\n", bytes / 1e6, r, bytes / r * 1e-6);
    }
  }
  const bool quick = std::getenv("QUICK") != nullptr;
  for (long long bytes : {54ll << 20, big})
    for (int C : {0, 112}) {
      sweep_depth<3>(c, bytes, 16, C);
      if (quick) continue;
      sweep_depth<2>(c, bytes, 16, C);
      sweep_depth<4>(c, bytes, 16, C);
      sweep_depth<6>(c, bytes, 16, C);
      sweep_depth<8>(c, bytes, 16, C);
      sweep_depth<3>(c, bytes, 8, C);
      sweep_depth<6>(c, bytes, 8, C);
      sweep_depth<3>(c, bytes, 32, C);
    }
  return 0;
}
