// Microbenchmark 2: row-segment widths per load instruction; cp.async into a per-warp smem ring.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include <vector>
#include <algorithm>

template <int HINT>
__device__ __forceinline__ uint4 ldw(const uint8_t* p) {
  uint4 v;
  if (HINT == 256) asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else if (HINT == 128) asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  else asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// A warp streams its 16 rows (stride rs) in "steps" of 16 rows x SEG bytes... per step: 16*SEG bytes,
// loaded with instructions covering (512/SEG) rows x SEG bytes each. SEG = 64 (ours), 128, 256, 512.
template <int SEG, int D, int HINT>
__global__ void __launch_bounds__(512, 1) rows(const uint8_t* w, int rs, int steps, unsigned* out) {
  constexpr int L = 16 * SEG / 512;  // loads per step
  constexpr int RPI = 512 / SEG;     // rows per instruction
  const int lane = threadIdx.x % 32;
  const long warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32;
  const uint8_t* base = w + warp * 16L * rs + (long)(lane / (SEG / 16)) * rs + 16 * (lane % (SEG / 16));
  unsigned acc = 0;
  uint4 a[D][L];
  auto ld = [&](int st, uint4 (&x)[L]) {
#pragma unroll
    for (int i = 0; i < L; ++i) x[i] = ldw<HINT>(base + (long)(i * RPI) * rs + (long)SEG * st);
  };
#pragma unroll
  for (int d = 0; d < D; ++d) ld(d, a[d]);
  for (int s0 = 0; s0 < steps; s0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
#pragma unroll
      for (int i = 0; i < L; ++i) acc ^= a[d][i].x ^ a[d][i].y ^ a[d][i].z ^ a[d][i].w;
      const int nx = s0 + d + D;
      if (nx < steps) ld(nx, a[d]);
    }
  }
  if (acc == 0x12345678u) out[0] = acc;
}

// cp.async ring in shared memory: step = 16 rows x 128 B (2 KB per warp), 4 cp.async per lane (4 rows x 128 B each),
// then the lane reads its fragment (rows g, g+8: 2 x 32 B) with LDS.128 x 4.
template <int D>
__global__ void __launch_bounds__(512, 1) cpasync(const uint8_t* w, int rs, int steps, unsigned* out) {
  extern __shared__ uint4 sm[];
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const long warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32;
  uint4* ring = sm + wid * D * 128;  // D slots x 2 KB (128 uint4)
  const uint8_t* base = w + warp * 16L * rs + (long)(lane / 8) * rs + 16 * (lane % 8);
  const unsigned sbase = (unsigned)__cvta_generic_to_shared(ring);
  auto issue = [&](int st, int slot) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = i * 4 + lane / 8, p = lane % 8;
      const unsigned dst = sbase + slot * 2048 + r * 128 + ((p ^ (r & 7)) * 16);
      asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" :: "r"(dst), "l"(base + (long)(4 * i) * rs + 128L * st));
    }
    asm volatile("cp.async.commit_group;");
  };
  unsigned acc = 0;
#pragma unroll
  for (int d = 0; d < D - 1; ++d) issue(d, d);
  for (int s = 0; s < steps; ++s) {
    if (s + D - 1 < steps) issue(s + D - 1, (s + D - 1) % D); else asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group %0;" :: "n"(D - 1));
    __syncwarp();
    const int slot = s % D;
#pragma unroll
    for (int h = 0; h < 2; ++h) for (int q = 0; q < 2; ++q) {
      const int r = g + 8 * h, p = 2 * c + q;
      const uint4 v = ring[slot * 128 + r * 8 + (p ^ (r & 7))];
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    __syncwarp();
  }
  if (acc == 0x12345678u) out[0] = acc;
}

int main() {
  const int sms = 132, W = sms * 16;
  unsigned* out; cudaMalloc(&out, 4);
  uint8_t* fl; size_t flb = 256u << 20; cudaMalloc(&fl, flb);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int rs : {1536, 6144}) {
    const size_t bytes = (size_t)W * 16 * rs;
    uint8_t* w; cudaMalloc(&w, bytes); cudaMemset(w, 1, bytes);
    auto run = [&](const char* name, auto launch, int seg) {
      std::vector<float> ts;
      for (int r = 0; r < 30; ++r) {
        cudaMemsetAsync(fl, 0, flb);
        cudaEventRecord(e0); launch(); cudaEventRecord(e1); cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms * 1000);
      }
      std::sort(ts.begin(), ts.end());
      printf("rs %d %-28s: %.1f us %.2f TB/s\n", rs, name, ts[15], bytes / (ts[15] * 1e-6) / 1e12);
    };
#define R(SEG, D, H) run(#SEG "B rows D" #D " L2::" #H, [&] { rows<SEG, D, H><<<sms, 512>>>(w, rs, rs / SEG, out); }, SEG)
    R(64, 3, 256); R(64, 3, 128); R(64, 6, 128);
    R(128, 2, 128); R(128, 3, 128); R(128, 3, 256); R(128, 3, 0);
    R(256, 1, 128); R(256, 2, 128); R(256, 3, 128);
    R(512, 1, 128); R(512, 2, 128);
    for (int D : {3, 4, 6}) {
      const int smem = 16 * D * 2048;
      auto k = D == 3 ? cpasync<3> : D == 4 ? cpasync<4> : cpasync<6>;
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      char nm[64]; snprintf(nm, 64, "cp.async 4x128B D%d", D);
      run(nm, [&] { k<<<sms, 512, smem>>>(w, rs, rs / 128, out); }, 128);
    }
    cudaFree(w);
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
