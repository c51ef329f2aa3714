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
//      B CTAs per SM of 256 threads;
//   3: whole rows by per-k-block bulk copies into padded shared-memory slots, reordered in place, bulk stores out
//      (NB rows in flight per warp, 4 warps per CTA);
//   4: timing only -- the rows gathered without the reorder (16-byte coalesced copies): the ceiling of a gather.
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

// ---- variant 3: whole rows by bulk copies, reordered in shared memory -----------------------------------------------
// A warp takes workspace rows m = warp, warp + warps, ...; each row's k-blocks come in by one 128-byte
// cp.async.bulk per k-block (lane l issues k-blocks l, l + 32; all complete on the stage's mbarrier) into slots
// 144 bytes apart (the 16-byte pad puts the 8 lanes of a quarter-warp on 8 different bank groups when each reads
// granule g of its own k-block), are reordered in place by their lane (8 LDS.128, 32 PRMT, 8 STS.128) and go out
// by one 128-byte bulk store per k-block. NB stages per warp: the loads of rows i + 1 .. i + NB - 1 fly while row i
// is reordered; a stage is refilled once its bulk stores have read it (cp.async.bulk.wait_group.read 1).
constexpr int kV3Slot = 144;
__device__ __forceinline__ std::uint32_t smem_u32(const void* p) { return static_cast<std::uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void v3_issue_row(const Args& a, int m, std::uint32_t stage, std::uint32_t bar, int lane,
                                             int kblocks) {
  if (lane == 0)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kblocks * 128) : "memory");
  __syncwarp();
  const int src_m = __ldg(a.gather + m);
  const std::uint16_t* src = a.x + static_cast<std::int64_t>(src_m) * a.H;
  for (int kb = lane; kb < kblocks; kb += 32)
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 128, [%2];" ::"r"(
                     stage + kb * kV3Slot),
                 "l"(src + kb * 64), "r"(bar)
                 : "memory");
}
template <int NB>
__global__ void __launch_bounds__(128) gather_v3(const Args a) {
  extern __shared__ __align__(128) unsigned char v3_smem[];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int kblocks = a.H / 64;
  const int stage_bytes = (kblocks * kV3Slot + 127) / 128 * 128;
  unsigned char* base = v3_smem + w * (NB * stage_bytes + 64);
  const std::uint32_t stages = smem_u32(base + 64), bars = smem_u32(base);
  if (lane == 0)
    for (int s = 0; s < NB; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bars + 8 * s) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncwarp();
  const int warps = gridDim.x * (blockDim.x / 32), gw = blockIdx.x * (blockDim.x / 32) + w;
  const int rows = gw < a.M ? (a.M - 1 - gw) / warps + 1 : 0;  // this warp's rows
  for (int i = 0; i < NB && i < rows; ++i) v3_issue_row(a, gw + i * warps, stages + i * stage_bytes, bars + 8 * i, lane, kblocks);
  for (int i = 0; i < rows; ++i) {
    const int s = i % NB, m = gw + i * warps;
    const std::uint32_t st = stages + s * stage_bytes, bar = bars + 8 * s, parity = (i / NB) & 1;
    asm volatile(
        "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(bar),
        "r"(parity)
        : "memory");
    std::uint16_t* dst = a.out + static_cast<std::int64_t>(m) * a.H;
    for (int kb = lane; kb < kblocks; kb += 32) {
      const std::uint32_t slot = st + kb * kV3Slot;
      std::uint32_t v[32];
#pragma unroll
      for (int g = 0; g < 8; ++g)
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v[4 * g]), "=r"(v[4 * g + 1]), "=r"(v[4 * g + 2]), "=r"(v[4 * g + 3])
                     : "r"(slot + 16 * g));
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        std::uint32_t p[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {  // elements e0 and e0 + 4, e0 = 8 (2q + c % 2) + c / 2: words e0 / 2, e0 / 2 + 2
          const int e0 = 8 * (2 * q + (c & 1)) + (c >> 1);
          const int sel = (e0 & 1) ? 0x7632 : 0x5410;
          p[q] = __byte_perm(v[e0 / 2], v[e0 / 2 + 2], sel);
        }
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(slot + 16 * c), "r"(p[0]), "r"(p[1]), "r"(p[2]),
                     "r"(p[3])
                     : "memory");
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 128;" ::"l"(dst + kb * 64), "r"(slot)
                   : "memory");
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // row i - 1's stores have read their stage: refill it with row i - 1 + NB
    asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
    __syncwarp();
    const int r = i - 1 + NB;
    if (i >= 1 && r < rows) {
      const int sp = (i - 1) % NB;
      v3_issue_row(a, gw + r * warps, stages + sp * stage_bytes, bars + 8 * sp, lane, kblocks);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// ---- variant 4 (timing only, no reordering: the output is not checked): the rows copied as they are, a warp per
// row, 16-byte coalesced loads and stores -- the ceiling of a gather without the reorder.
template <int U>
__global__ void __launch_bounds__(256) gather_v4(const Args a) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * (blockDim.x / 32), gw = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int granules = a.H / 8;
  for (int m = gw; m < a.M; m += warps) {
    const uint4* src = reinterpret_cast<const uint4*>(a.x + static_cast<std::int64_t>(__ldg(a.gather + m)) * a.H);
    uint4* dst = reinterpret_cast<uint4*>(a.out + static_cast<std::int64_t>(m) * a.H);
    for (int g0 = lane; g0 < granules; g0 += 32 * U) {
      uint4 t[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (g0 + 32 * u < granules) t[u] = __ldg(src + g0 + 32 * u);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (g0 + 32 * u < granules) dst[g0 + 32 * u] = t[u];
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
        if ((r == 0 || r == reps) && vname[1] != '4') {
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
                  vname[1] == '4' ? "(not checked)" : ok ? "exact" : "WRONG");
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
    auto v3 = [&](const char* name, auto kernel, int nb, int per_sm) {
      const int kblocks = H / 64, stage = (kblocks * kV3Slot + 127) / 128 * 128;
      const int bytes = 4 * (nb * stage + 64);
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
      run(name, [&] { kernel<<<per_sm * sms, 128, bytes>>>(a); });
    };
    v3("v3 bulk NB2, 2/SM", gather_v3<2>, 2, 2);
    v3("v3 bulk NB3, 2/SM", gather_v3<3>, 3, 2);
    v3("v3 bulk NB2, 4/SM", gather_v3<2>, 2, 4);
    v3("v3 bulk NB4, 2/SM", gather_v3<4>, 4, 2);
    run("v4 copy U2 (no reorder)", [&] { gather_v4<2><<<8 * sms, 256>>>(a); });
    run("v4 copy U4 (no reorder)", [&] { gather_v4<4><<<8 * sms, 256>>>(a); });
    CK(cudaFree(dx));
    CK(cudaFree(dout));
    CK(cudaFree(dg));
  }
  return 0;
}
