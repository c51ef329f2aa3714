// Microbenchmark 5 (for the next session): the decode kernels' chunk math (e2m1 -> bf16, one multiply per pair, 8
// mma.sync per chunk) fed by (R) today's 3-deep register ring (8 rows x 64 B per load) or (T) a per-warp TMA ring in
// shared memory: stages of 16 rows x 128 B (two 8 x 128 B boxes, SWIZZLE_128B), lane 0 issues, an mbarrier per stage,
// LDS.128 in fragment order. 132 CTAs x 16 warps, each warp 16 rows; L2 flushed by a memset before each rep.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <vector>
#include <algorithm>

__device__ __forceinline__ uint4 ldw(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void quad(uint32_t w, uint32_t (&o)[4]) {
  constexpr uint32_t kP = 0x81C081C0u;
  const uint32_t v = w >> 8;
  o[0] = ((w & 0x000F000Fu) * 0x1040u) & kP; o[1] = ((w & 0x00F000F0u) * 0x0104u) & kP;
  o[2] = ((v & 0x000F000Fu) * 0x1040u) & kP; o[3] = ((v & 0x00F000F0u) * 0x0104u) & kP;
}
__device__ __forceinline__ uint32_t mul2(uint32_t a, uint32_t b) {
  uint32_t r; asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r;
}
// one chunk: rows g / g + 8 (16 B each), scale multipliers s0 / s1, activations x (4 words per q: constant here)
__device__ __forceinline__ void chunk(const uint4& wg, const uint4& wh, uint32_t s0, uint32_t s1, const uint4 (&x)[4], float (&acc)[2][4]) {
  const uint32_t g4[4] = {wg.x, wg.y, wg.z, wg.w}, h4[4] = {wh.x, wh.y, wh.z, wh.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t ag[4], ah[4];
    quad(g4[q], ag); quad(h4[q], ah);
#pragma unroll
    for (int p = 0; p < 4; ++p) ag[p] = mul2(ag[p], s0), ah[p] = mul2(ah[p], s1);
    mma(acc[0], ag[0], ah[0], ag[1], ah[1], x[q].x, x[q].y);
    mma(acc[1], ag[2], ah[2], ag[3], ah[3], x[q].z, x[q].w);
  }
}

template <int D>
__global__ void __launch_bounds__(512, 1) reg_ring(const uint8_t* w, int rs, int chunks, float* out, uint32_t seed) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const long warp = (blockIdx.x * (long)blockDim.x + threadIdx.x) / 32;
  const uint8_t* base = w + warp * 16L * rs;
  uint4 x[4];
  for (int q = 0; q < 4; ++q) x[q] = make_uint4(seed * (q + 1), seed ^ q, seed + q, seed * 3 + q);
  const uint32_t s0 = 0x3F803F80u, s1 = 0x3F803F80u;
  float acc[2][4] = {};
  uint4 a[D], b[D];
  auto ld = [&](int ch, uint4& p, uint4& q) {  // (past the row: zeros, as the TMA box's fill)
    const bool live = 64 * ch + 16 * c < rs;
    p = live ? ldw(base + (long)g * rs + 64 * ch + 16 * c) : make_uint4(0, 0, 0, 0);
    q = live ? ldw(base + (long)(g + 8) * rs + 64 * ch + 16 * c) : make_uint4(0, 0, 0, 0);
  };
#pragma unroll
  for (int d = 0; d < D; ++d) ld(d, a[d], b[d]);
#pragma unroll 1
  for (int c0 = 0; c0 < chunks; c0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (c0 + d < chunks) {
        chunk(a[d], b[d], s0, s1, x, acc);
        if (c0 + d + D < chunks) ld(c0 + d + D, a[d], b[d]);
      }
    }
  }
  float v = 0; for (int i = 0; i < 4; ++i) v += acc[0][i] + acc[1][i];
  out[blockIdx.x * (size_t)blockDim.x + threadIdx.x] = v;  // (compared between the rings)
}

__device__ __forceinline__ void bar_init(uint64_t* b, int n) { asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"((unsigned)__cvta_generic_to_shared(b)), "r"(n)); }
__device__ __forceinline__ void bar_expect(uint64_t* b, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"((unsigned)__cvta_generic_to_shared(b)), "r"(bytes));
}
__device__ __forceinline__ void bar_wait(uint64_t* b, int parity) {
  asm volatile("{ .reg .pred p; W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1; @!p bra W; }" :: "r"((unsigned)__cvta_generic_to_shared(b)), "r"(parity));
}
__device__ __forceinline__ void tma2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(map), "r"(x), "r"(y), "r"((unsigned)__cvta_generic_to_shared(bar)) : "memory");
}

// stage s of warp: rows [16 warp, +16) x bytes [128 s, +128): two 1 KB boxes (rows 0-7, 8-15), SWIZZLE_128B.
template <int D>
__global__ void __launch_bounds__(512, 1) tma_ring(const __grid_constant__ CUtensorMap map, int steps, float* out, uint32_t seed) {
  extern __shared__ __align__(1024) uint8_t sm[];
  __shared__ uint64_t bars[16][D];
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const int row0 = (blockIdx.x * 16 + wid) * 16;
  uint8_t* ring = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(sm) + 1023) & ~uintptr_t{1023}) + wid * D * 2048;
  if (lane == 0) for (int d = 0; d < D; ++d) bar_init(&bars[wid][d], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncwarp();
  auto issue = [&](int s, int d) {
    if (lane == 0) {
      bar_expect(&bars[wid][d], 2048);
      tma2d(ring + d * 2048, &map, 128 * s, row0, &bars[wid][d]);
      tma2d(ring + d * 2048 + 1024, &map, 128 * s, row0 + 8, &bars[wid][d]);
    }
  };
  uint4 x[4];
  for (int q = 0; q < 4; ++q) x[q] = make_uint4(seed * (q + 1), seed ^ q, seed + q, seed * 3 + q);
  const uint32_t s0 = 0x3F803F80u, s1 = 0x3F803F80u;
  float acc[2][4] = {};
  for (int d = 0; d < D && d < steps; ++d) issue(d, d);
#pragma unroll 1
  for (int s = 0; s < steps; ++s) {
    const int d = s % D;
    bar_wait(&bars[wid][d], (s / D) & 1);
    const uint8_t* st = ring + d * 2048;
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // chunk h: 16-byte unit j = 4h + c of rows g (box 0) and g (box 1)
      const int j = 4 * h + c;
      const uint4 wg = *reinterpret_cast<const uint4*>(st + g * 128 + ((j ^ g) * 16));
      const uint4 wh = *reinterpret_cast<const uint4*>(st + 1024 + g * 128 + ((j ^ g) * 16));
      chunk(wg, wh, s0, s1, x, acc);
    }
    __syncwarp();
    if (s + D < steps) issue(s + D, d);
  }
  float v = 0; for (int i = 0; i < 4; ++i) v += acc[0][i] + acc[1][i];
  out[blockIdx.x * (size_t)blockDim.x + threadIdx.x] = v;  // (compared between the rings)
}


// stage = one chunk: rows [16 warp, +16) x bytes [64 s, +64): two 512-byte boxes (rows 0-7, 8-15), no swizzle (lanes
// (g, c) read 16-byte unit c of row g: 512 contiguous bytes, no bank conflict). Maps onto walk_share's chunks as they are.
template <int D>
__global__ void __launch_bounds__(512, 1) tma_ring64(const __grid_constant__ CUtensorMap map, int chunks, float* out, uint32_t seed) {
  extern __shared__ __align__(1024) uint8_t sm[];
  __shared__ uint64_t bars[16][D];
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const int row0 = (blockIdx.x * 16 + wid) * 16;
  uint8_t* ring = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(sm) + 127) & ~uintptr_t{127}) + wid * D * 1024;
  if (lane == 0) for (int d = 0; d < D; ++d) bar_init(&bars[wid][d], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncwarp();
  auto issue = [&](int s, int d) {
    if (lane == 0) {
      bar_expect(&bars[wid][d], 1024);
      tma2d(ring + d * 1024, &map, 64 * s, row0, &bars[wid][d]);
      tma2d(ring + d * 1024 + 512, &map, 64 * s, row0 + 8, &bars[wid][d]);
    }
  };
  uint4 x[4];
  for (int q = 0; q < 4; ++q) x[q] = make_uint4(seed * (q + 1), seed ^ q, seed + q, seed * 3 + q);
  const uint32_t s0 = 0x3F803F80u, s1 = 0x3F803F80u;
  float acc[2][4] = {};
  for (int d = 0; d < D && d < chunks; ++d) issue(d, d);
#pragma unroll 1
  for (int s = 0; s < chunks; ++s) {
    const int d = s % D;
    bar_wait(&bars[wid][d], (s / D) & 1);
    const uint8_t* st = ring + d * 1024;
    const uint4 wg = *reinterpret_cast<const uint4*>(st + g * 64 + c * 16);
    const uint4 wh = *reinterpret_cast<const uint4*>(st + 512 + g * 64 + c * 16);
    chunk(wg, wh, s0, s1, x, acc);
    __syncwarp();
    if (s + D < chunks) issue(s + D, d);
  }
  float v = 0; for (int i = 0; i < 4; ++i) v += acc[0][i] + acc[1][i];
  out[blockIdx.x * (size_t)blockDim.x + threadIdx.x] = v;  // (compared between the rings)
}

__global__ void fill(uint8_t* w, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    w[i] = static_cast<uint8_t>(h);
  }
}

int main() {
  const int sms = 132, W = sms * 16;
  float* out; cudaMalloc(&out, 4 * sms * 512);
  std::vector<float> ref(sms * 512), got(sms * 512);
  uint8_t* fl; size_t flb = 256u << 20; cudaMalloc(&fl, flb);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  void* fn = nullptr; cudaDriverEntryPointQueryResult qr;
  cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &qr);
  auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  for (int rs : {1440, 1024, 384}) for (int rep : {1, 4}) {
    const int len = rs * rep;
    const size_t rows = (size_t)W * 16, bytes = rows * len;
    uint8_t* w; cudaMalloc(&w, bytes + 4096); fill<<<1024, 256>>>(w, bytes);
    CUtensorMap map, map64;
    const cuuint64_t dims[2] = {(cuuint64_t)len, rows}; const cuuint64_t strides[1] = {(cuuint64_t)len};
    const cuuint32_t box[2] = {128, 8}, es[2] = {1, 1};
    CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    const cuuint32_t box64[2] = {64, 8};
    const CUresult r64 = encode(&map64, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, w, dims, strides, box64, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS || r64 != CUDA_SUCCESS) { printf("encode failed %d %d (len %d)\n", (int)r, (int)r64, len); continue; }
    auto run = [&](const char* name, auto launch, double moved) {
      std::vector<float> ts;
      for (int i = 0; i < 30; ++i) {
        cudaMemsetAsync(fl, 0, flb);
        cudaEventRecord(e0); launch(); cudaEventRecord(e1); cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms * 1000);
      }
      std::sort(ts.begin(), ts.end());
      cudaMemcpy(got.data(), out, 4 * got.size(), cudaMemcpyDeviceToHost);
      const bool first = name[0] == 'r' && name[15] == '3';  // "register ring D3": the reference
      if (first) ref = got;
      const bool same = std::equal(ref.begin(), ref.end(), got.begin(), [](float a, float b) { return a == b || (a != a && b != b); });
      printf("row %4d x%d (%6.1f MB) %-22s: %6.1f us %.2f TB/s  [%s, sums %s]\n", rs, rep, moved / 1e6, name, ts[15], moved / (ts[15] * 1e-6) / 1e12,
             cudaGetErrorString(cudaGetLastError()), first ? "reference" : same ? "identical" : "DIFFER");
    };
    const int chunks = (len + 63) / 64, steps = (len + 127) / 128;
    const double moved = (double)bytes;
    run("register ring D3", [&] { reg_ring<3><<<sms, 512>>>(w, len, chunks, out, 7); }, moved);
    run("register ring D4", [&] { reg_ring<4><<<sms, 512>>>(w, len, chunks, out, 7); }, moved);
#define T(D) { auto k = tma_ring<D>; const int smem = 16 * D * 2048 + 1024; cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem); \
      run("TMA ring " #D " x 2 KB", [&] { k<<<sms, 512, smem>>>(map, steps, out, 7); }, moved); }
    T(2) T(3) T(4) T(6)
#define T64(D) { auto k = tma_ring64<D>; const int smem = 16 * D * 1024 + 128; cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem); \
      run("TMA ring " #D " x 1 KB (64 B)", [&] { k<<<sms, 512, smem>>>(map64, chunks, out, 7); }, moved); }
    T64(3) T64(6) T64(8) T64(12)
    cudaFree(w);
  }
}
