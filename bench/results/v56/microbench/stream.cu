// Microbenchmark: HBM streaming rate of the decode kernel's load pattern vs alternatives (no math).
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include <vector>
#include <algorithm>

__device__ __forceinline__ uint4 ldw(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ldw128(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// mode 0: ours (lane (g,c): rows g, g+8, 16 B at 64*ch + 16c; 16 rows per warp; row stride rs)
// mode 1: ours with L2::128B
// mode 2: rows g only, 128 B per row per chunk (second load = next 64 B)
// mode 3: coalesced: warp's region contiguous; chunk = 1 KB = two 512 B loads
template <int D>
__global__ void __launch_bounds__(512, 1) stream(const uint8_t* w, int rs, int chunks_per_warp, int mode, unsigned* out, int spin) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const long warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32;
  // each warp: 16 rows x (chunks_per_warp * 64) bytes (= rs), contiguous block of 16 rows
  const uint8_t* base = w + warp * 16L * rs;
  unsigned acc = 0;
  uint4 a[D], b[D];
  auto ld = [&](int ch, uint4& x, uint4& y) {
    if (mode == 0) { x = ldw(base + (long)g * rs + 64 * ch + 16 * c); y = ldw(base + (long)(g + 8) * rs + 64 * ch + 16 * c); }
    else if (mode == 1) { x = ldw128(base + (long)g * rs + 64 * ch + 16 * c); y = ldw128(base + (long)(g + 8) * rs + 64 * ch + 16 * c); }
    else if (mode == 2) { const int r = ch % 2 ? g + 8 : g; const int cc = ch / 2; x = ldw(base + (long)r * rs + 128 * cc + 16 * c); y = ldw(base + (long)r * rs + 128 * cc + 64 + 16 * c); }
    else { x = ldw(base + 1024L * ch + 16 * lane); y = ldw(base + 1024L * ch + 512 + 16 * lane); }
  };
#pragma unroll
  for (int d = 0; d < D; ++d) ld(d, a[d], b[d]);
  for (int ch0 = 0; ch0 < chunks_per_warp; ch0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      acc ^= a[d].x ^ a[d].y ^ a[d].z ^ a[d].w ^ b[d].x ^ b[d].y ^ b[d].z ^ b[d].w;
      for (int s = 0; s < spin; ++s) acc = acc * 1664525u + 1013904223u;
      const int nx = ch0 + d + D;
      if (nx < chunks_per_warp) ld(nx, a[d], b[d]);
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}

int main() {
  const int sms = 132, warps = 16, W = sms * warps;
  for (int rs : {1440, 5760}) {
  const int cpw = rs / 64;
  const size_t bytes = (size_t)W * 16 * rs;
  uint8_t* w; cudaMalloc(&w, bytes + (1 << 20)); cudaMemset(w, 1, bytes);
  uint8_t* fl; size_t flb = 256u << 20; cudaMalloc(&fl, flb);
  unsigned* out; cudaMalloc(&out, 4);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  const char* names[] = {"ours L2::256B", "ours L2::128B", "row g 128B/instr pair", "coalesced 512B"};
  for (int spin : {0, 8}) for (int mode = 0; mode < 4; ++mode) for (int D : {3, 6}) {
    std::vector<float> ts;
    for (int r = 0; r < 30; ++r) {
      cudaMemsetAsync(fl, 0, flb);
      cudaEventRecord(e0);
      if (D == 3) stream<3><<<sms, 512>>>(w, rs, cpw, mode, out, spin);
      else stream<6><<<sms, 512>>>(w, rs, cpw, mode, out, spin);
      cudaEventRecord(e1); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms * 1000);
    }
    std::sort(ts.begin(), ts.end());
    const double moved = (double)W * 16 * cpw * 64;
    printf("rs %d spin %d mode %-24s D %d: %.1f us  %.2f TB/s  (%.1f MB)\n", rs, spin, names[mode], D, ts[15], moved / (ts[15] * 1e-6) / 1e12, moved / 1e6);
  }
  cudaFree(w); cudaFree(fl); }
  cudaError_t err = cudaGetLastError(); printf("err %s\n", cudaGetErrorString(err));
}
