// Microbenchmark: the decode path's weight stream in today's layout against a repacked one.
//
// The decode kernels (src/device/decode_stream.cuh) give each warp 16 weight rows x 128 k per
// chunk: every lane copies 16 bytes of row g and 16 of row g + 8, so one warp instruction touches
// 8 rows x 64 bytes of the row-major [N, K / 2] weights. Repacked at load time into the order the
// warps consume ("fragment order": a chunk's 1 KB contiguous, lane L's bytes at 16 L and 512 + 16 L),
// every warp instruction reads 512 contiguous bytes. This measures what that is worth, with and
// without the chunk's math (e2m1 -> bf16 by the kernels' 13-op decode, one bf16 multiply per pair,
// 8 mma.sync per chunk: the kernels' own e2m1_quad_bf16_raw, bf16x2_mul and mma_16816), fed two ways:
//   reg  a 3-deep register ring (ld.global.nc.L1::no_allocate, 16 B per lane per row)
//   cpa  the kernels' ring: cp.async.cg 16 B per lane per row into 3 shared-memory stages per warp,
//        read back with ld.shared (no barrier: each lane reads only its own bytes)
// 132 CTAs x 16 warps; the (row block, chunk) items are split evenly over the warps in order, as the
// kernels' stream-K does. L2 dirtied by a 256 MiB memset before each rep (the layer benchmark's
// flush). Each variant's per-thread sums must be identical between the two layouts (the repacked
// buffer holds the same bytes, moved).
//
//   nvcc -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -Isrc -Iinclude bench/micro/decode_layout.cu -o decode_layout && ./decode_layout
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "device/decode_stream.cuh"
#include "device/dequant.cuh"

namespace {

using fp4gemm::detail::e2m1_quad_bf16_raw;
using fp4gemm::detail::decode::bf16x2_mul;
using fp4gemm::detail::decode::mma_16816;

__device__ __forceinline__ uint4 ldw(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ void cp16(uint32_t dst, const uint8_t* src) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ uint4 lds(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}
struct Acc {
  float f[2][4] = {};
  uint32_t x = 0;
};
template <bool kMath>
__device__ __forceinline__ void chunk(const uint4& wg, const uint4& wh, const uint4 (&xv)[4], Acc& acc) {
  if constexpr (!kMath) {
    acc.x ^= wg.x ^ wg.y ^ wg.z ^ wg.w ^ wh.x ^ wh.y ^ wh.z ^ wh.w;
  } else {
    const uint32_t g4[4] = {wg.x, wg.y, wg.z, wg.w}, h4[4] = {wh.x, wh.y, wh.z, wh.w};
    const uint32_t s = 0x3F803F80u;  // (a runtime-looking multiplier: the kernels multiply each pair once)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t ag[4], ah[4];
      e2m1_quad_bf16_raw(g4[q], ag), e2m1_quad_bf16_raw(h4[q], ah);
#pragma unroll
      for (int p = 0; p < 4; ++p) ag[p] = bf16x2_mul(ag[p], s), ah[p] = bf16x2_mul(ah[p], s);
      mma_16816(acc.f[0], ag[0], ah[0], ag[1], ah[1], xv[q].x, xv[q].y);
      mma_16816(acc.f[1], ag[2], ah[2], ag[3], ah[3], xv[q].z, xv[q].w);
    }
  }
}

// Where the next item's bytes for this lane are: rows g / g + 8 (strided: row-major [rows, rs]) or
// the chunk's 1 KB in fragment order (contiguous). A cursor, advanced by constant steps as the
// kernels' is (one division at the start).
struct Layout {
  const uint8_t* w;
  int rs, chunks;  // row bytes, 64-byte chunks per row
  bool contig;
};
struct Cursor {
  const uint8_t* p;  // this lane's row-g bytes of the current item
  int ch, chunks;
  long row_step;     // strided: to the next row block's first chunk; contiguous: unused
  bool contig;
  int second;        // offset of row g + 8's bytes
  __device__ __forceinline__ Cursor(const Layout& L, long i, int lane) : chunks(L.chunks), contig(L.contig) {
    if (contig) {
      p = L.w + i * 1024 + 16 * lane, second = 512, ch = 0, row_step = 0;
    } else {
      const long b = i / chunks;
      ch = static_cast<int>(i - b * chunks);
      p = L.w + (16 * b + lane / 4) * static_cast<long>(L.rs) + 64 * ch + 16 * (lane % 4);
      second = 8 * L.rs, row_step = 16L * L.rs - 64L * chunks;
    }
  }
  __device__ __forceinline__ void next() {
    if (contig) {
      p += 1024;
    } else {
      p += 64;
      if (++ch == chunks) ch = 0, p += row_step;
    }
  }
};

constexpr int kD = 3;

template <bool kMath>
__global__ void __launch_bounds__(512, 1) reg_ring(Layout L, long items, float* out, uint32_t seed) {
  const int lane = threadIdx.x % 32;
  const long warp = (blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x) / 32, warps = gridDim.x * (blockDim.x / 32L);
  const long i0 = items * warp / warps, i1 = items * (warp + 1) / warps;
  uint4 xv[4];
  for (int q = 0; q < 4; ++q) xv[q] = make_uint4(seed * (q + 1), seed ^ q, seed + q, seed * 3 + q);
  Acc acc;
  uint4 a[kD], b[kD];
  Cursor cur(L, i0, lane);
  auto ld = [&](uint4& p, uint4& q) {
    p = ldw(cur.p), q = ldw(cur.p + cur.second);
    cur.next();
  };
#pragma unroll
  for (int d = 0; d < kD; ++d)
    if (i0 + d < i1) ld(a[d], b[d]);
#pragma unroll 1
  for (long i = i0; i < i1; i += kD) {
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      if (i + d < i1) {
        chunk<kMath>(a[d], b[d], xv, acc);
        if (i + d + kD < i1) ld(a[d], b[d]);
      }
    }
  }
  float v = static_cast<float>(acc.x & 0xFFFF);
  for (int i = 0; i < 4; ++i) v += acc.f[0][i] + acc.f[1][i];
  out[blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x] = v;
}

template <bool kMath>
__global__ void __launch_bounds__(512, 1) cpa_ring(Layout L, long items, float* out, uint32_t seed) {
  __shared__ __align__(16) uint8_t ring[16][kD][1024];
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
  const long warp = (blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x) / 32, warps = gridDim.x * (blockDim.x / 32L);
  const long i0 = items * warp / warps, i1 = items * (warp + 1) / warps;
  uint4 xv[4];
  for (int q = 0; q < 4; ++q) xv[q] = make_uint4(seed * (q + 1), seed ^ q, seed + q, seed * 3 + q);
  Acc acc;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(&ring[wid][0][0])) + 16 * lane;
  long next = i0;
  Cursor cur(L, i0, lane);
  auto issue = [&](int d) {
    if (next < i1) {
      cp16(base + 1024 * d, cur.p), cp16(base + 1024 * d + 512, cur.p + cur.second);
      cur.next();
      ++next;
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  for (int d = 0; d < kD; ++d) issue(d);
  int d = 0;
#pragma unroll 1
  for (long i = i0; i < i1; ++i) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kD - 1) : "memory");
    const uint4 wg = lds(base + 1024 * d), wh = lds(base + 1024 * d + 512);
    chunk<kMath>(wg, wh, xv, acc);
    issue(d);
    d = d + 1 == kD ? 0 : d + 1;
  }
  float v = static_cast<float>(acc.x & 0xFFFF);
  for (int i = 0; i < 4; ++i) v += acc.f[0][i] + acc.f[1][i];
  out[blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x] = v;
}

__global__ void fill(uint8_t* w, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    w[i] = static_cast<uint8_t>(h);
  }
}
// The same bytes in fragment order: item i = (row block b, chunk ch) -> 1 KB at i * 1024.
__global__ void repack(const uint8_t* w, uint8_t* r, int rs, int chunks, long items) {
  for (long t = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; t < items * 64; t += static_cast<long>(gridDim.x) * blockDim.x) {
    const long i = t / 64;
    const int part = static_cast<int>(t % 64), half = part / 32, lane = part % 32, g = lane / 4 + 8 * half, c = lane % 4;
    const long b = i / chunks;
    const int ch = static_cast<int>(i - b * chunks);
    *reinterpret_cast<uint4*>(r + i * 1024 + 512 * half + 16 * lane) =
        *reinterpret_cast<const uint4*>(w + (16 * b + g) * static_cast<long>(rs) + 64 * ch + 16 * c);
  }
}

}  // namespace

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs; L2 dirtied by a 256 MiB memset before each rep; median of 30 reps\n", prop.name, sms);
  float* out;
  cudaMalloc(&out, 4 * static_cast<size_t>(sms) * 512);
  std::vector<float> a(static_cast<size_t>(sms) * 512), b(a.size());
  uint8_t* fl;
  const size_t flb = 256u << 20;
  cudaMalloc(&fl, flb);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  struct Shape { const char* name; int rows, rs; };
  // The decode kernels' streams at T 1: gpt-oss-120b (4 experts) gate/up 4 x 5760 rows x 1440 B, down 4 x 2880 x 1440;
  // Qwen3-30B-A3B (8 experts) gate/up 8 x 1536 x 1024, down 8 x 2048 x 384; and 4x gpt-oss's gate/up (a long stream).
  const Shape shapes[] = {{"gpt-oss gate/up", 4 * 5760, 1440}, {"gpt-oss down", 4 * 2880, 1440},
                          {"Qwen3 gate/up", 8 * 1536, 1024},   {"Qwen3 down", 8 * 2048, 384},
                          {"gpt-oss gate/up x4", 16 * 5760, 1440}};
  for (const Shape& s : shapes) {
    const int chunks = s.rs / 64;
    const long items = static_cast<long>(s.rows / 16) * chunks;
    const size_t bytes = static_cast<size_t>(s.rows) * s.rs;
    uint8_t *w, *r;
    cudaMalloc(&w, bytes), cudaMalloc(&r, bytes);
    fill<<<1024, 256>>>(w, bytes);
    repack<<<1024, 256>>>(w, r, s.rs, chunks, items);
    const Layout strided{w, s.rs, chunks, false}, contig{r, s.rs, chunks, true};
    auto time = [&](auto launch) {
      std::vector<float> ts;
      for (int i = 0; i < 30; ++i) {
        cudaMemsetAsync(fl, 0, flb);
        cudaEventRecord(e0);
        launch();
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        ts.push_back(ms * 1000);
      }
      std::sort(ts.begin(), ts.end());
      return ts[15];
    };
    auto pair = [&](const char* name, auto kernel) {
      const float ts = time([&] { kernel<<<sms, 512>>>(strided, items, out, 7u); });
      cudaMemcpy(a.data(), out, 4 * a.size(), cudaMemcpyDeviceToHost);
      const float tc = time([&] { kernel<<<sms, 512>>>(contig, items, out, 7u); });
      cudaMemcpy(b.data(), out, 4 * b.size(), cudaMemcpyDeviceToHost);
      const bool same = std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) { return x == y || (x != x && y != y); });
      std::printf("%-19s %6.1f MB  %-10s strided %6.2f us (%.2f TB/s)  repacked %6.2f us (%.2f TB/s)  %+.1f%%  [%s, sums %s]\n", s.name,
                  bytes / 1e6, name, ts, bytes / (ts * 1e-6) / 1e12, tc, bytes / (tc * 1e-6) / 1e12, (tc / ts - 1) * 100,
                  cudaGetErrorString(cudaGetLastError()), same ? "identical" : "DIFFER");
    };
    pair("reg load", reg_ring<false>);
    pair("reg math", reg_ring<true>);
    pair("cpa load", cpa_ring<false>);
    pair("cpa math", cpa_ring<true>);
    cudaFree(w), cudaFree(r);
  }
  return 0;
}
