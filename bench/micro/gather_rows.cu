// Microbenchmark: the W4A16 general path's activation pre-pass (`dequant_activations<mxfp4, routed_bf16>`,
// src/device/prepass.cuh) -- the routed token rows gathered into GEMM1's stacked workspace, each 64-element k-block
// reordered into wgmma k order (chunk c, pair i = elements 8 (2i + c % 2) + c / 2 and that + 4). ncu (v87 call P, one
// H200): 58 µs at Qwen3-30B-A3B T 4096 (134 MB written, 2.3 TB/s), 45 µs at gpt-oss-120b T 4096, ~11 µs at T 512 of
// either (1.1-1.7 TB/s): 17 % issue active, 47 % warps active -- latency, not instructions.
//
// Variants (every one checked element by element against the host's reordering, the output poisoned before each):
//   0: the library's kernel today -- one thread per (row, k-block) unit, 128 bytes loaded by the thread, reordered in
//      registers, staged per warp in shared memory (32 KB per CTA) for coalesced stores; 4 CTAs per SM, grid-stride;
//   1: the same with 2 units per thread per iteration, both units' loads issued first;
//   2: warp-cooperative, no shared memory: 8 lanes per unit, each lane loads one 16-byte granule (coalesced) and
//      builds its output chunk by 4 shuffles (round r: a lane offers its granule's pair (r + i) % 4, the lane whose
//      chunk needs granule 2 i + c % 2 takes it in the round that brings its pair c / 2); U units per lane in flight;
//      B CTAs per SM of 256 threads.
// Timing: an L2 flush (256 MiB written) before each rep, as the layer harness does, events around the kernel alone;
// median of REPS (default 100).
//
// Build and run (sm_90a):
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a bench/micro/gather_rows.cu -o build/gather_rows &&
//   build/gather_rows [reps]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "micro_check.cuh"

struct Args {
  const std::uint16_t* x;  // [T][H] bf16
  const int* gather;       // [M]: the source token of workspace row m
  std::uint16_t* out;      // [M][H] (H % 64 == 0 here)
  int M, H, T;
};

// ---- variant 0 / 1: the library's unit (routed_bf16, full k-blocks) --------------------------------------------
__device__ __forceinline__ void load_unit(const Args& a, int u, int kblocks, std::uint32_t (&v)[32], uint4*& dst) {
  const int m = u / kblocks, kb = u - m * kblocks;
  dst = nullptr;
  if (m >= a.M) return;
  const int src_m = __ldg(a.gather + m);
  const std::uint16_t* src = a.x + static_cast<std::int64_t>(src_m) * a.H + kb * 64;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(src) + i);
    v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
  }
  dst = reinterpret_cast<uint4*>(a.out + static_cast<std::int64_t>(m) * a.H + kb * 64);
}

__device__ __forceinline__ void put_unit(const std::uint32_t (&v)[32], uint4* dst, uint4* buf, int lane) {
  auto elem = [&](int e) { return (v[e / 2] >> (16 * (e % 2))) & 0xFFFFu; };
  if (dst != nullptr) {
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      std::uint32_t p[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int e0 = 8 * (2 * i + (c & 1)) + (c >> 1);
        p[i] = elem(e0) | (elem(e0 + 4) << 16);
      }
      buf[lane * 8 + (c ^ (lane & 7))] = make_uint4(p[0], p[1], p[2], p[3]);
    }
  }
  __syncwarp();
  const int cc = lane % 8;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int unit = 4 * j + lane / 8;
    uint4* d = reinterpret_cast<uint4*>(__shfl_sync(0xFFFFFFFFu, reinterpret_cast<std::uintptr_t>(dst), unit));
    if (d != nullptr) d[cc] = buf[unit * 8 + (cc ^ (unit & 7))];
  }
  __syncwarp();
}

template <int kPer>
__global__ void __launch_bounds__(256) gather_v0(const Args a) {
  __shared__ uint4 staging[8][32 * 8];
  const int lane = threadIdx.x % 32;
  uint4* buf = staging[threadIdx.x / 32];
  const int kblocks = a.H / 64, units = a.M * kblocks;
  const int stride = gridDim.x * blockDim.x;
  for (int base = blockIdx.x * blockDim.x; base < units; base += kPer * stride) {  // block-uniform
    std::uint32_t v[kPer][32];
    uint4* dst[kPer];
#pragma unroll
    for (int p = 0; p < kPer; ++p) load_unit(a, base + p * stride + threadIdx.x, kblocks, v[p], dst[p]);
#pragma unroll
    for (int p = 0; p < kPer; ++p) put_unit(v[p], dst[p], buf, lane);
  }
}

// ---- variant 2: 8 lanes per unit, shuffles, no shared memory ------------------------------------------------------
template <int U>
__global__ void __launch_bounds__(256) gather_v2(const Args a) {
  const int lane = threadIdx.x % 32, q = lane / 8, c = lane % 8;
  const int kblocks = a.H / 64, units = a.M * kblocks;
  const int warps = gridDim.x * (blockDim.x / 32), warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  // this lane's granule c of its unit is granule 2 i_s + h_s with i_s = c / 2, h_s = c % 2
  const int i_s = c >> 1, j = c >> 1, h = c & 1;
  for (int base = 4 * warp; base < units; base += 4 * U * warps) {  // warp-uniform
    uint4 g[U];
    uint4* dst[U];
#pragma unroll
    for (int p = 0; p < U; ++p) {
      const int u = base + p * 4 * warps + q;
      dst[p] = nullptr;
      g[p] = make_uint4(0, 0, 0, 0);
      if (u < units) {
        const int m = u / kblocks, kb = u - m * kblocks;
        const int src_m = __ldg(a.gather + m);
        g[p] = __ldg(reinterpret_cast<const uint4*>(a.x + static_cast<std::int64_t>(src_m) * a.H + kb * 64) + c);
        dst[p] = reinterpret_cast<uint4*>(a.out + static_cast<std::int64_t>(m) * a.H + kb * 64) + c;
      }
    }
#pragma unroll
    for (int p = 0; p < U; ++p) {
      // pair jj of this granule: elements jj and jj + 4 (words jj / 2 and 2 + jj / 2, half jj % 2)
      const uint4 e = g[p];
      std::uint32_t pr[4];
      pr[0] = __byte_perm(e.x, e.z, 0x5410u);  // (0, 4)
      pr[1] = __byte_perm(e.x, e.z, 0x7632u);  // (1, 5)
      pr[2] = __byte_perm(e.y, e.w, 0x5410u);  // (2, 6)
      pr[3] = __byte_perm(e.y, e.w, 0x7632u);  // (3, 7)
      std::uint32_t out[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        // offer pair (r + i_s) % 4; take from the lane of granule 2 i + h with (r + i) % 4 == j, i.e. i = (j - r) & 3
        const int off = (r + i_s) & 3;
        const std::uint32_t mine = off == 0 ? pr[0] : off == 1 ? pr[1] : off == 2 ? pr[2] : pr[3];
        const int i = (j - r) & 3;
        const std::uint32_t got = __shfl_sync(0xFFFFFFFFu, mine, 8 * q + 2 * i + h);
        // out word i
        if (i == 0) out[0] = got;
        else if (i == 1) out[1] = got;
        else if (i == 2) out[2] = got;
        else out[3] = got;
      }
      if (dst[p] != nullptr) *dst[p] = make_uint4(out[0], out[1], out[2], out[3]);
    }
  }
}

__global__ void poison(std::uint32_t* p, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    p[i] = 0xFFFFFFFFu;
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 100;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("gather_rows on %s (%d SMs), %d reps, L2 flushed before each\n", prop.name, sms, reps);
  const std::size_t flush_bytes = std::size_t{256} << 20;
  void* flush = nullptr;
  CK(cudaMalloc(&flush, flush_bytes));
  struct Case { const char* name; int T, H, E, k; } cases[] = {
      {"gpt-oss T 512", 512, 2880, 128, 4}, {"Qwen3 T 512", 512, 2048, 128, 8},
      {"gpt-oss T 4096", 4096, 2880, 128, 4}, {"Qwen3 T 4096", 4096, 2048, 128, 8}, {"Qwen3 T 64", 64, 2048, 128, 8}};
  std::mt19937 rng(1234);
  for (const Case& cs : cases) {
    const int T = cs.T, H = cs.H, M = T * cs.k;
    std::vector<std::uint16_t> x(std::size_t{T} * H);
    for (auto& v : x) v = static_cast<std::uint16_t>(rng());
    // a top-k routing sorted by expert (stable): workspace row m reads token gather[m]
    std::vector<std::pair<int, int>> pairs;
    for (int t = 0; t < T; ++t) {
      std::vector<int> ex(cs.E);
      for (int e = 0; e < cs.E; ++e) ex[e] = e;
      std::shuffle(ex.begin(), ex.end(), rng);
      for (int j = 0; j < cs.k; ++j) pairs.push_back({ex[j], t});
    }
    std::stable_sort(pairs.begin(), pairs.end(), [](auto a, auto b) { return a.first < b.first; });
    std::vector<int> gather(M);
    for (int m = 0; m < M; ++m) gather[m] = pairs[m].second;
    std::vector<std::uint16_t> ref(std::size_t{M} * H);
    for (int m = 0; m < M; ++m)
      for (int kb = 0; kb < H / 64; ++kb)
        for (int c = 0; c < 8; ++c)
          for (int i = 0; i < 4; ++i) {
            const int e0 = 8 * (2 * i + (c & 1)) + (c >> 1);
            const std::uint16_t* s = &x[std::size_t{gather[m]} * H + kb * 64];
            std::uint16_t* d = &ref[std::size_t{m} * H + kb * 64 + c * 8 + 2 * i];
            d[0] = s[e0], d[1] = s[e0 + 4];
          }
    std::uint16_t *dx, *dout;
    int* dg;
    CK(cudaMalloc(&dx, x.size() * 2));
    CK(cudaMalloc(&dout, ref.size() * 2));
    CK(cudaMalloc(&dg, M * 4));
    CK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dg, gather.data(), M * 4, cudaMemcpyHostToDevice));
    const Args a{dx, dg, dout, M, H, T};
    const double mb = (ref.size() * 2.0 + x.size() * 2.0) / 1e6;
    std::printf("%-15s M %6d rows, %7.1f MB written (+%.1f MB of tokens)\n", cs.name, M, ref.size() * 2.0 / 1e6,
                x.size() * 2.0 / 1e6);
    auto run = [&](const char* vname, auto launch) {
      std::vector<float> ts;
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      bool ok = true;
      for (int r = 0; r < reps + 1; ++r) {
        poison<<<1024, 256>>>(reinterpret_cast<std::uint32_t*>(dout), ref.size() / 2);
        CK(cudaMemsetAsync(flush, r & 0xFF, flush_bytes));
        CK(cudaEventRecord(e0));
        launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r > 0) ts.push_back(ms * 1000.f);
        if (r == 0 || r == reps) {
          std::vector<std::uint16_t> got(ref.size());
          CK(cudaMemcpy(got.data(), dout, got.size() * 2, cudaMemcpyDeviceToHost));
          std::size_t bad = 0;
          for (std::size_t i = 0; i < got.size(); ++i) bad += got[i] != ref[i];
          if (bad) ok = false, std::printf("    %s: %zu WRONG elements\n", vname, bad);
        }
      }
      std::sort(ts.begin(), ts.end());
      const float med = ts[ts.size() / 2];
      std::printf("    %-22s %8.2f us (min %7.2f)  %5.2f TB/s  %s\n", vname, med, ts.front(), mb / med,
                  ok ? "exact" : "WRONG");
      CK(cudaEventDestroy(e0));
      CK(cudaEventDestroy(e1));
    };
    run("v0 (library, 4/SM)", [&] { gather_v0<1><<<4 * sms, 256>>>(a); });
    run("v0 one pass", [&] {
      const int units = M * (H / 64);
      gather_v0<1><<<std::max(1, (units + 255) / 256), 256>>>(a);
    });
    run("v1 2/thread, 4/SM", [&] { gather_v0<2><<<4 * sms, 256>>>(a); });
    run("v2 U1, 8/SM", [&] { gather_v2<1><<<8 * sms, 256>>>(a); });
    run("v2 U2, 8/SM", [&] { gather_v2<2><<<8 * sms, 256>>>(a); });
    run("v2 U4, 8/SM", [&] { gather_v2<4><<<8 * sms, 256>>>(a); });
    run("v2 U2, 4/SM", [&] { gather_v2<2><<<4 * sms, 256>>>(a); });
    run("v2 U4, 4/SM", [&] { gather_v2<4><<<4 * sms, 256>>>(a); });
    CK(cudaFree(dx));
    CK(cudaFree(dout));
    CK(cudaFree(dg));
  }
  return 0;
}
