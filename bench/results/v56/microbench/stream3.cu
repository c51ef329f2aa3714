// Microbenchmark 3: today's decode load pattern (8 rows x 64 B per load) vs 4 rows x 128 B per load with the
// lane exchange that rebuilds the mma fragments (16 SEL + 16 SHFL per 2 KB step), on real row strides.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include <vector>
#include <algorithm>

__device__ __forceinline__ uint4 ldw(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 sel4(bool p, uint4 a, uint4 b) { return p ? a : b; }
__device__ __forceinline__ uint4 shfl4(uint4 v, int s) {
  return make_uint4(__shfl_sync(~0u, v.x, s), __shfl_sync(~0u, v.y, s), __shfl_sync(~0u, v.z, s), __shfl_sync(~0u, v.w, s));
}

// today's: per 128-k chunk lane (g,c) loads row g and g+8 at 64*ch + 16c. D-deep ring of chunks.
template <int D>
__global__ void __launch_bounds__(512, 1) ours(const uint8_t* w, int rs, int chunks, int nrows_warp, unsigned* out) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const long warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32;
  const uint8_t* base = w + warp * 16L * rs;
  unsigned acc = 0;
  uint4 a[D], b[D];
  auto ld = [&](int ch, uint4& x, uint4& y) { x = ldw(base + (long)g * rs + 64 * ch + 16 * c); y = ldw(base + (long)(g + 8) * rs + 64 * ch + 16 * c); };
#pragma unroll
  for (int d = 0; d < D; ++d) ld(d, a[d], b[d]);
  for (int c0 = 0; c0 < chunks; c0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      acc ^= a[d].x ^ a[d].y ^ a[d].z ^ a[d].w ^ b[d].x ^ b[d].y ^ b[d].z ^ b[d].w;
      if (c0 + d + D < chunks) ld(c0 + d + D, a[d], b[d]);
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// 4 rows x 128 B per load; step = 256 k (2 KB per warp); D-deep ring of steps; X = exchange on/off.
template <int D, bool X>
__global__ void __launch_bounds__(512, 1) wide(const uint8_t* w, int rs, int steps, unsigned* out) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const long warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32;
  const uint8_t* base = w + warp * 16L * rs;
  // instr i: rows 4i + lane/8; instr 1, 3 rotate the pieces by 4
  const int r8 = lane / 8, p8 = lane % 8;
  const uint8_t* pa[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) pa[i] = base + (long)(4 * i + r8) * rs + 16 * ((i & 1) ? (p8 + 4) % 8 : p8);
  const bool lo = p8 < 4;
  const int s0 = 8 * (g % 4) + c + (g >= 4 ? 4 : 0), s1 = 8 * (g % 4) + c + (g < 4 ? 4 : 0);
  unsigned acc = 0;
  uint4 v[D][4];
  auto ld = [&](int st, uint4 (&x)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = ldw(pa[i] + 128L * st);
  };
#pragma unroll
  for (int d = 0; d < D; ++d) ld(d, v[d]);
  for (int s = 0; s < steps; s += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (X) {
        const uint4 x0 = shfl4(sel4(lo, v[d][0], v[d][1]), s0), x1 = shfl4(sel4(lo, v[d][1], v[d][0]), s1);
        const uint4 x2 = shfl4(sel4(lo, v[d][2], v[d][3]), s0), x3 = shfl4(sel4(lo, v[d][3], v[d][2]), s1);
        acc ^= x0.x ^ x0.y ^ x0.z ^ x0.w ^ x1.x ^ x1.y ^ x1.z ^ x1.w ^ x2.x ^ x2.y ^ x2.z ^ x2.w ^ x3.x ^ x3.y ^ x3.z ^ x3.w;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc ^= v[d][i].x ^ v[d][i].y ^ v[d][i].z ^ v[d][i].w;
      }
      if (s + d + D < steps) ld(s + d + D, v[d]);
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}

int main() {
  const int sms = 132, W = sms * 16;
  unsigned* out; cudaMalloc(&out, 4);
  uint8_t* fl; size_t flb = 256u << 20; cudaMalloc(&fl, flb);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  // rs: gpt-oss K1/K2 rows (1440 B), Qwen3 K1 (1024 B), Qwen3 K2 (384 B), aligned 1536
  for (int rs : {1440, 1024, 384, 1536}) for (int rep : {1, 4}) {
    const int len = rs * rep;  // a warp's 16 rows are rep x longer (more data per warp)
    const size_t bytes = (size_t)W * 16 * len;
    uint8_t* w; cudaMalloc(&w, bytes + 4096); cudaMemset(w, 1, bytes);
    auto run = [&](const char* name, auto launch, double moved) {
      std::vector<float> ts;
      for (int r = 0; r < 30; ++r) {
        cudaMemsetAsync(fl, 0, flb);
        cudaEventRecord(e0); launch(); cudaEventRecord(e1); cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms * 1000);
      }
      std::sort(ts.begin(), ts.end());
      printf("row %4d B x%d (%6.1f MB) %-22s: %6.1f us %.2f TB/s\n", rs, rep, moved / 1e6, name, ts[15], moved / (ts[15] * 1e-6) / 1e12);
    };
    const int chunks = len / 64, steps = len / 128;
    run("ours 64B D3", [&] { ours<3><<<sms, 512>>>(w, len, chunks, 16, out); }, (double)W * 16 * chunks * 64);
    run("wide 128B D2", [&] { wide<2, false><<<sms, 512>>>(w, len, steps, out); }, (double)W * 16 * steps * 128);
    run("wide 128B D2 + exch", [&] { wide<2, true><<<sms, 512>>>(w, len, steps, out); }, (double)W * 16 * steps * 128);
    run("wide 128B D1 + exch", [&] { wide<1, true><<<sms, 512>>>(w, len, steps, out); }, (double)W * 16 * steps * 128);
    cudaFree(w);
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
