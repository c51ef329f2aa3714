// Microbenchmark of the fused kernel's consumer k-block loop in isolation (docs/PERF.md v10).
//
// Every SM runs the two consumer warpgroups of the fused kernel on a ring of stages that already
// holds data (random FP4 weights, E4M3 scale codes and f16 activations in the 128-byte swizzle):
// no producer, no TMA, no global memory. Each variant changes one thing about the loop, so its
// rate against the pure-wgmma variant says what that thing costs, per tile shape:
//   0 wgmma only    the issue/commit/wait<1> skeleton with constant A registers
//   1 v9 loop       LDS + NVFP4 dequantisation into the free A set, issue, wait<1> (no barriers)
//   2 v9 + barriers 1 plus the `full` try-wait (already complete) and the `empty` arrive
//   3 prefetch      2, but the next k-block's FP4 words and scale codes are loaded right after
//                   the issue, so the LDS latency is off the dequantisation's critical path
//   4 three sets    2 with three A register sets and wait<2> (two groups queued behind the
//                   one being read)
//   5 no dequant    2 with the dequantisation replaced by one XOR per register (LDS kept)
// and (v12) the same k-block with the dequantised weights stored into shared memory and read by
// shared-A wgmma (ss_loop), against variant 2. SS_ONLY=1 stops after that table. LONE=1 (v98): one consumer
// warpgroup alone against two, per tile shape (lone_shape); LANES=1 (v98): two warpgroups with tiles of their own,
// each tile's GLU epilogue in step or half a tile apart (lanes_shape).
//
// Build and run (sm_90a; prints TFLOP/s and the share of variant 0 per shape):
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc -Iinclude \
//        bench/micro/consumer_loop.cu -o build/consumer_loop && build/consumer_loop
// (LANES=1 / LONE=1 before the binary: the v98 tables only, seconds; LANES=1 LANES_PLAIN=1: v102's plain epilogue.)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "device/dequant.cuh"
#include "device/epilogue.cuh"
#include "device/ptx/ptx.cuh"
#include "device/ptx/wgmma_rs.cuh"
#include "micro_timing.cuh"
#include "wgmma_ss.cuh"  // scripts/gen_wgmma.py --ss

using namespace fp4gemm;

namespace {

constexpr int kStages = 4;
constexpr int kThreads = 256;

template <int N8>
__host__ __device__ constexpr int act_stage_bytes() {
  return ((8 * N8 + 15) / 16) * 16 * 128;  // 16-row classes of 128-byte rows
}
template <int N8, int H>
__host__ __device__ constexpr int stage_bytes() {
  return act_stage_bytes<N8>() + H * (4096 + 512);
}

__device__ __forceinline__ std::uint32_t hmul2_bits(std::uint32_t a, std::uint32_t b) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const std::uint32_t*>(&r);
}

// One row's 16 weights (8 bytes) -> 8 A registers (as the kernel's dequant_row<nvfp4>).
template <bool Dequant>
__device__ __forceinline__ void dequant_row(uint2 q, std::uint32_t s, std::uint32_t (&out)[8]) {
  if constexpr (Dequant) {
    std::uint32_t lo[4], hi[4];
    detail::e2m1_quad_f16_raw(q.x, lo);
    detail::e2m1_quad_f16_raw(q.y, hi);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[i] = hmul2_bits(lo[i], s);
      out[4 + i] = hmul2_bits(hi[i], s);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = (i & 1 ? q.y : q.x) ^ s;
  }
}

__device__ __forceinline__ void scale_pairs(unsigned codes, std::uint32_t& s0, std::uint32_t& s1) {
  const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes), __NV_E4M3);
  const __half2 p = __hmul2(__half2(r), __float2half2_rn(128.f));
  const __half2 p0 = __low2half2(p), p1 = __high2half2(p);
  s0 = *reinterpret_cast<const std::uint32_t*>(&p0);
  s1 = *reinterpret_cast<const std::uint32_t*>(&p1);
}

struct Raw {
  uint2 q0, q1;
  unsigned codes;
};

// Random ring contents: f16 activations in [1, 2), FP4 bytes, E4M3 scale codes 0x30..0x3F.
__device__ void fill_ring(std::uint8_t* act, int act_bytes, std::uint8_t* w, int w_bytes, std::uint8_t* sc,
                          int sc_bytes) {
  for (int i = threadIdx.x; i < act_bytes / 4; i += blockDim.x)
    reinterpret_cast<std::uint32_t*>(act)[i] = 0x3c003c00u ^ ((i * 2654435761u) & 0x03ff03ffu);
  for (int i = threadIdx.x; i < w_bytes / 4; i += blockDim.x)
    reinterpret_cast<std::uint32_t*>(w)[i] = (i + blockIdx.x) * 2654435761u;
  for (int i = threadIdx.x; i < sc_bytes; i += blockDim.x) sc[i] = 0x30 | (i * 7 & 15);
}

// Static-data barriers: bars[0] has completed phase 0 (parity-0 waits pass at once), bars[1]
// takes arrivals and never completes. Ends with __syncthreads.
__device__ void init_static_barriers(std::uint64_t* bars) {
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&bars[0], 1);
    ptx::mbarrier_init(&bars[1], (1u << 20) - 1);
    ptx::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) ptx::mbarrier_arrive(&bars[0]);
  __syncthreads();
}

// Rows r and r + 8 of this thread (16 weights each at `wrow`, row r + 8 256 bytes on; scale codes
// at `srow` and srow[128]) -> the 8 x 2 A registers of one k-block, as the kernel's dequant_half.
__device__ __forceinline__ void dequant_rows(const std::uint8_t* wrow, const std::uint8_t* srow,
                                             std::uint32_t (&buf)[8][2]) {
  const uint2 q0 = *reinterpret_cast<const uint2*>(wrow);
  const uint2 q1 = *reinterpret_cast<const uint2*>(wrow + 8 * 32);
  std::uint32_t s0, s1;
  scale_pairs(srow[0] | (static_cast<unsigned>(srow[128]) << 8), s0, s1);
  std::uint32_t d0[8], d1[8];
  dequant_row<true>(q0, s0, d0);
  dequant_row<true>(q1, s1, d1);
#pragma unroll
  for (int i = 0; i < 8; ++i) buf[i][0] = d0[i], buf[i][1] = d1[i];
}

// Drains the wgmma pipeline and keeps the accumulators alive (a sum nobody sees).
template <int H, int A>
__device__ __forceinline__ void drain_and_sink(float (&acc)[H][A], float* sink) {
  ptx::wgmma_wait<0>();
  float s = 0;
#pragma unroll
  for (int h = 0; h < H; ++h)
#pragma unroll
    for (int i = 0; i < A; ++i) s += acc[h][i];
  if (s == 1234.5f) sink[threadIdx.x] = s;
}

// One k-block's wgmmas (4 k-steps x H halves, A from `buf`) as one commit group, as the kernel.
template <int N8, int H, int A>
__device__ __forceinline__ void issue_kblock(float (&acc)[H][A], const std::uint32_t (&buf)[H][8][2],
                                             std::uint32_t act_addr, int kb) {
  const std::uint64_t desc0 = ptx::smem_desc_sw128(act_addr);
#pragma unroll
  for (int h = 0; h < H; ++h) ptx::fence_registers(acc[h]);
  ptx::wgmma_fence();
#pragma unroll
  for (int h = 0; h < H; ++h)
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const std::uint32_t frag[4] = {buf[h][s][0], buf[h][s][1], buf[h][4 + s][0], buf[h][4 + s][1]};
      ptx::wgmma_rs_f16<N8>(acc[h], frag, desc0 + 2 * s, (kb > 0 || s > 0) ? 1 : 0);
    }
  ptx::wgmma_commit();
}

// issue_kblock, then every commit group but this one retired (wait<1>, the kernel's two A register sets).
template <int N8, int H, int A>
__device__ __forceinline__ void issue_retire_older(float (&acc)[H][A], const std::uint32_t (&buf)[H][8][2],
                                                   std::uint32_t act_addr, int kb) {
  issue_kblock<N8>(acc, buf, act_addr, kb);
#pragma unroll
  for (int h = 0; h < H; ++h) ptx::fence_registers(acc[h]);
  ptx::wgmma_wait<1>();
#pragma unroll
  for (int h = 0; h < H; ++h) ptx::fence_registers(acc[h]);
}

// The static ring in dynamic shared memory (1024-byte aligned): kStages stages of activations,
// weights and scale atoms, then `extra` bytes (1024-aligned), then the two static barriers; the
// ring is filled and the barriers initialised.
struct StaticRing {
  std::uint8_t *act, *w, *sc, *extra;
  std::uint64_t* bars;  // [0] full (done), [1] empty
};
template <int N8, int H>
__device__ StaticRing setup_static_ring(std::uint8_t* smem_raw, int extra) {
  std::uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  StaticRing r;
  r.act = smem;
  r.w = smem + kStages * act_stage_bytes<N8>();
  r.sc = r.w + kStages * H * 4096;
  r.extra = r.sc + kStages * H * 512;
  r.bars = reinterpret_cast<std::uint64_t*>(r.extra + extra);
  fill_ring(r.act, kStages * act_stage_bytes<N8>(), r.w, kStages * H * 4096, r.sc, kStages * H * 512);
  init_static_barriers(r.bars);
  return r;
}

template <int N8, int H, int V>
__global__ void __launch_bounds__(kThreads, 1) consumer_loop(int kblocks, float* sink) {
  extern __shared__ __align__(1024) std::uint8_t smem_raw[];
  constexpr int kAct = act_stage_bytes<N8>();
  const StaticRing ring = setup_static_ring<N8, H>(smem_raw, 0);
  std::uint8_t *act = ring.act, *w = ring.w, *sc = ring.sc;
  std::uint64_t* bars = ring.bars;

  constexpr int kAcc = 4 * N8;
  constexpr bool kBarriers = V >= 2;
  constexpr int kSets = V == 4 ? 3 : 2;
  const int cw = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, t = lane % 4;
  const int row = cw * 64 + warp * 16 + lane / 4;
  const int s_off = (row % 32) * 16 + (row / 32) * 4 + t;
  float acc[H][kAcc];  // no initialisation: the first k-block's first k-step has scale_d = 0, as in the kernel
  std::uint32_t a[kSets][H][8][2];
#pragma unroll
  for (int u = 0; u < kSets; ++u)
#pragma unroll
    for (int h = 0; h < H; ++h)
#pragma unroll
      for (int i = 0; i < 8; ++i) a[u][h][i][0] = a[u][h][i][1] = 0x3c003c00u ^ (threadIdx.x * 77 + i);

  const std::uint32_t act0 = ptx::smem_addr(act);
  auto load_raw = [&](int stage, int h) {
    const std::uint8_t* wrow = w + (stage * H + h) * 4096 + row * 32 + t * 8;
    Raw r;
    r.q0 = *reinterpret_cast<const uint2*>(wrow);
    r.q1 = *reinterpret_cast<const uint2*>(wrow + 8 * 32);
    const std::uint8_t* srow = sc + (stage * H + h) * 512 + s_off;
    r.codes = srow[0] | (static_cast<unsigned>(srow[128]) << 8);
    return r;
  };
  auto dequant = [&](const Raw& r, int kb, std::uint32_t(&buf)[8][2]) {
    std::uint32_t s0, s1;
    scale_pairs(kb < 0x7fffffff ? r.codes : 0u, s0, s1);
    std::uint32_t d0[8], d1[8];
    dequant_row<V != 5>(r.q0, s0, d0);
    dequant_row<V != 5>(r.q1, s1, d1);
#pragma unroll
    for (int i = 0; i < 8; ++i) buf[i][0] = d0[i], buf[i][1] = d1[i];
  };
  auto issue = [&](int stage, int kb, const std::uint32_t(&buf)[H][8][2]) {
    issue_kblock<N8>(acc, buf, act0 + stage * kAct, kb);
  };
  auto retire = [&] {
#pragma unroll
    for (int h = 0; h < H; ++h) ptx::fence_registers(acc[h]);
    ptx::wgmma_wait<kSets - 1>();
#pragma unroll
    for (int h = 0; h < H; ++h) ptx::fence_registers(acc[h]);
  };

  int stage = 0;
  Raw next[H];
  if constexpr (V == 3) {
#pragma unroll
    for (int h = 0; h < H; ++h) next[h] = load_raw(0, h);
  }
  for (int kb0 = 0; kb0 < kblocks; kb0 += kSets) {
#pragma unroll
    for (int u = 0; u < kSets; ++u) {
      const int kb = kb0 + u;
      if (kb < kblocks) {
        if constexpr (kBarriers) ptx::mbarrier_wait(&bars[0], 0);
        if constexpr (V != 0) {
#pragma unroll
          for (int h = 0; h < H; ++h) {
            if constexpr (V == 3) dequant(next[h], kb, a[u][h]);
            else dequant(load_raw(stage, h), kb, a[u][h]);
          }
        }
        issue(stage, kb, a[u]);
        const int nstage = stage + 1 == kStages ? 0 : stage + 1;
        if constexpr (V == 3) {
#pragma unroll
          for (int h = 0; h < H; ++h) next[h] = load_raw(nstage, h);
        }
        retire();
        if constexpr (kBarriers)
          if (threadIdx.x % 128 == 0) ptx::mbarrier_arrive(&bars[1]);
        stage = nstage;
      }
    }
  }
  drain_and_sink(acc, sink);
}

// ---- more consumer warpgroups instead of more halves per warpgroup ----------------------------
// W warpgroups each own 64 weight rows (one m64 wgmma per k-step, H = 1) of a 64 W-row tile:
// W = 4 is the 256-row tile of variant 2 with four warps per SM sub-partition instead of two,
// each issuing half the instructions. Static data and barriers as variant 2.
template <int N8, int W>
__global__ void __launch_bounds__(128 * W, 1) wide_loop(int kblocks, float* sink) {
  extern __shared__ __align__(1024) std::uint8_t smem_raw[];
  std::uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  constexpr int kAct = act_stage_bytes<N8>();
  constexpr int kRows = 64 * W, kAtoms = (kRows + 127) / 128;
  std::uint8_t* act = smem;
  std::uint8_t* w = smem + kStages * kAct;
  std::uint8_t* sc = w + kStages * kRows * 32;
  auto* bars = reinterpret_cast<std::uint64_t*>(sc + kStages * kAtoms * 512);
  fill_ring(act, kStages * kAct, w, kStages * kRows * 32, sc, kStages * kAtoms * 512);
  init_static_barriers(bars);
  constexpr int kAcc = 4 * N8;
  const int cw = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, t = lane % 4;
  const int row = cw * 64 + warp * 16 + lane / 4;
  const int s_off = (row / 128) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4 + t;
  float acc[kAcc];
  std::uint32_t a[2][8][2];
  const std::uint32_t act0 = ptx::smem_addr(act);
  int stage = 0;
  for (int kb0 = 0; kb0 < kblocks; kb0 += 2) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int kb = kb0 + u;
      if (kb < kblocks) {
        ptx::mbarrier_wait(&bars[0], 0);
        dequant_rows(w + stage * kRows * 32 + row * 32 + t * 8, sc + stage * kAtoms * 512 + s_off, a[u]);
        const std::uint64_t desc0 = ptx::smem_desc_sw128(act0 + stage * kAct);
        ptx::fence_registers(acc);
        ptx::wgmma_fence();
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          const std::uint32_t frag[4] = {a[u][s][0], a[u][s][1], a[u][4 + s][0], a[u][4 + s][1]};
          ptx::wgmma_rs_f16<N8>(acc, frag, desc0 + 2 * s, (kb > 0 || s > 0) ? 1 : 0);
        }
        ptx::wgmma_commit();
        ptx::fence_registers(acc);
        ptx::wgmma_wait<1>();
        ptx::fence_registers(acc);
        if (threadIdx.x % 128 == 0) ptx::mbarrier_arrive(&bars[1]);
        stage = stage + 1 == kStages ? 0 : stage + 1;
      }
    }
  }
  ptx::wgmma_wait<0>();
  float s = 0;
#pragma unroll
  for (int i = 0; i < kAcc; ++i) s += acc[i];
  if (s == 1234.5f) sink[threadIdx.x] = s;
}

template <int N8, int W>
double run_wide(int sms, float* sink) {
  auto k = wide_loop<N8, W>;
  const int smem = 200 * 1024;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const int kblocks = 4000;
  const float best = best_ms([&](bool warm) { k<<<sms, 128 * W, smem>>>(warm ? 64 : kblocks, sink); });
  return 2.0 * (64.0 * W) * (8 * N8) * 64 * kblocks * sms / (best * 1e-3) / 1e12;
}

// ---- the same loop fed by a producer warpgroup, as in the fused kernel --------------------------
// 384 threads, setmaxnreg 40 / 232, a ring of as many stages as fit in 189 KB, `full` / `empty`
// barriers. P = 0: the producer only arrives (data static); 1: + TMA of the weights (each CTA its
// own 128 * H rows of a K = 7168 matrix, so they stream from DRAM); 2: + TMA of the activations
// (16-row class box, 128-byte swizzle, the same rows for every CTA, so L2 hits); 3: + the scale
// atoms by a second producer warp (bulk copies).
constexpr int kFedThreads = 384;
constexpr int kFedRing = 189 * 1024;
constexpr int kFedK = 7168;

struct FedArgs {
  CUtensorMap wmap, amap;
  const std::uint8_t* scales;  // [132 * H row blocks][kFedK / 64 k-blocks][512]
  int kblocks;
};

template <int N8, int H, int P>
__global__ void __launch_bounds__(kFedThreads, 1) fed_loop(const __grid_constant__ FedArgs args, float* sink) {
  extern __shared__ __align__(1024) std::uint8_t smem_raw[];
  std::uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  constexpr int kAct = act_stage_bytes<N8>();
  constexpr int kStages = kFedRing / stage_bytes<N8, H>() < 16 ? kFedRing / stage_bytes<N8, H>() : 16;
  std::uint8_t* act = smem;
  std::uint8_t* w = smem + kStages * kAct;
  std::uint8_t* sc = w + kStages * H * 4096;
  auto* full = reinterpret_cast<std::uint64_t*>(sc + kStages * H * 512);
  std::uint64_t* empty = full + kStages;
  fill_ring(act, kStages * kAct, w, kStages * H * 4096, sc, kStages * H * 512);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], P >= 3 ? 2 : 1);
      ptx::mbarrier_init(&empty[s], 2);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  const int kb_per_k = kFedK / 64;
  if (threadIdx.x >= 256) {
    ptx::setmaxnreg_dec<40>();
    const int pwarp = threadIdx.x / 32 - 8, lane = threadIdx.x % 32;
    if (pwarp > 1 || lane != 0 || (pwarp == 1 && P < 3)) return;
    int stage = 0;
    std::uint32_t phase = 0;
    for (int kb = 0; kb < args.kblocks; ++kb) {
      ptx::mbarrier_wait(&empty[stage], phase ^ 1);
      const int kk = kb % kb_per_k;
      if (pwarp == 0) {
        const std::uint32_t bytes = (P >= 1 ? H * 4096 : 0) + (P >= 2 ? kAct : 0);
        ptx::mbarrier_arrive_expect_tx(&full[stage], bytes);
        if constexpr (P >= 1) ptx::tma_load_2d(w + stage * H * 4096, &args.wmap, &full[stage], kk * 32, blockIdx.x * 128 * H);
        if constexpr (P >= 2) ptx::tma_load_2d(act + stage * kAct, &args.amap, &full[stage], kk * 64, 0);
      } else {
        ptx::mbarrier_arrive_expect_tx(&full[stage], H * 512);
        for (int h = 0; h < H; ++h)
          ptx::bulk_load(sc + (stage * H + h) * 512,
                         args.scales + (static_cast<std::int64_t>(blockIdx.x * H + h) * kb_per_k + kk) * 512, 512,
                         &full[stage]);
      }
      if (++stage == kStages) { stage = 0; phase ^= 1; }
    }
    return;
  }
  ptx::setmaxnreg_inc<232>();
  constexpr int kAcc = 4 * N8;
  const int cw = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, t = lane % 4;
  const int row = cw * 64 + warp * 16 + lane / 4;
  const int s_off = (row % 32) * 16 + (row / 32) * 4 + t;
  float acc[H][kAcc];
  std::uint32_t a[2][H][8][2];
  const std::uint32_t act0 = ptx::smem_addr(act);
  int stage = 0;
  std::uint32_t phase = 0;
  auto dequant_half = [&](int h, std::uint32_t(&buf)[8][2]) {
    dequant_rows(w + (stage * H + h) * 4096 + row * 32 + t * 8, sc + (stage * H + h) * 512 + s_off, buf);
  };
  for (int kb0 = 0; kb0 < args.kblocks; kb0 += 2) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int kb = kb0 + u;
      if (kb < args.kblocks) {
        ptx::mbarrier_wait(&full[stage], phase);
#pragma unroll
        for (int h = 0; h < H; ++h) dequant_half(h, a[u][h]);
        issue_retire_older<N8>(acc, a[u], act0 + stage * kAct, kb);
        if (kb > 0 && threadIdx.x % 128 == 0) ptx::mbarrier_arrive(&empty[stage == 0 ? kStages - 1 : stage - 1]);
        if (++stage == kStages) { stage = 0; phase ^= 1; }
      }
    }
  }
  drain_and_sink(acc, sink);
}

struct FedData {
  std::uint8_t* weights = nullptr;  // [132 * 256 rows][kFedK / 2]
  std::uint16_t* acts = nullptr;    // [256 tokens][kFedK]
  std::uint8_t* scales = nullptr;
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
};

CUtensorMap map_2d(const FedData& d, void* base, CUtensorMapDataType type, std::uint64_t inner, std::uint64_t outer,
                   std::uint64_t row_bytes, std::uint32_t box_inner, std::uint32_t box_outer, CUtensorMapSwizzle sw) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t es[2] = {1, 1};
  if (d.encode(&map, type, 2, base, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    std::printf("cuTensorMapEncodeTiled failed\n");
  return map;
}

template <int N8, int H, int P>
double run_fed(int sms, float* sink, const FedData& d) {
  auto k = fed_loop<N8, H, P>;
  const int smem = kFedRing + 4096;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  FedArgs args;
  args.wmap = map_2d(d, d.weights, CU_TENSOR_MAP_DATA_TYPE_UINT8, kFedK / 2, 132 * 256, kFedK / 2, 32, 128 * H,
                     CU_TENSOR_MAP_SWIZZLE_NONE);
  args.amap = map_2d(d, d.acts, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, kFedK, 256, kFedK * 2, 64, ((8 * N8 + 15) / 16) * 16,
                     CU_TENSOR_MAP_SWIZZLE_128B);
  args.scales = d.scales;
  const float best = best_ms([&](bool warm) {
    args.kblocks = warm ? 64 : 2240;
    k<<<sms, kFedThreads, smem>>>(args, sink);
  });
  const double flops = 2.0 * (128.0 * H) * (8 * N8) * 64 * args.kblocks * sms;
  return flops / (best * 1e-3) / 1e12;
}

template <int N8, int H>
void fed_shape(int sms, float* sink, const FedData& d) {
  const double v[4] = {run_fed<N8, H, 0>(sms, sink, d), run_fed<N8, H, 1>(sms, sink, d),
                       run_fed<N8, H, 2>(sms, sink, d), run_fed<N8, H, 3>(sms, sink, d)};
  std::printf("%3d x %3d |", 128 * H, 8 * N8);
  for (double x : v) std::printf(" %6.1f |", x);
  std::printf("\n");
  std::fflush(stdout);
}

// ---- shared-A wgmma (docs/PERF.md v12 next steps) ------------------------------------------
// Variant "shared A": each k-block's weights are dequantised as in variant 2 but stored (STS.32)
// into a 128-byte-swizzled K-major A tile per warpgroup and half (8 KB, double-buffered by k-block
// parity), then fence.proxy.async + a warpgroup barrier, and the wgmmas read A from shared memory:
// the tensor pipe no longer reads the register file that the next k-block's dequantisation
// writes. Dequant = false stores the raw words instead (the variant without dequantisation).
template <int N8, int H, bool Dequant>
__global__ void __launch_bounds__(kThreads, 1) ss_loop(int kblocks, float* sink) {
  extern __shared__ __align__(1024) std::uint8_t smem_raw[];
  constexpr int kAct = act_stage_bytes<N8>();
  // extra: the A tiles [parity][warpgroup][half][64 rows x 128 B], 1024-aligned
  const StaticRing ring = setup_static_ring<N8, H>(smem_raw, 2 * 2 * H * 8192);
  std::uint8_t *act = ring.act, *w = ring.w, *sc = ring.sc, *abuf = ring.extra;
  std::uint64_t* bars = ring.bars;

  constexpr int kAcc = 4 * N8;
  const int cw = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, t = lane % 4;
  const int row = cw * 64 + warp * 16 + lane / 4, rr = warp * 16 + lane / 4;  // rr: row in the warpgroup's 64
  const int s_off = (row % 32) * 16 + (row / 32) * 4 + t;
  float acc[H][kAcc];
  const std::uint32_t act0 = ptx::smem_addr(act), abuf0 = ptx::smem_addr(abuf);
  int stage = 0;
  for (int kb0 = 0; kb0 < kblocks; kb0 += 2)
#pragma unroll
  for (int par = 0; par < 2; ++par) {  // unrolled by parity, as the kernel's register sets
    const int kb = kb0 + par;
    if (kb >= kblocks) break;
    ptx::mbarrier_wait(&bars[0], 0);
#pragma unroll
    for (int h = 0; h < H; ++h) {
      const std::uint8_t* wrow = w + (stage * H + h) * 4096 + row * 32 + t * 8;
      const uint2 q0 = *reinterpret_cast<const uint2*>(wrow);
      const uint2 q1 = *reinterpret_cast<const uint2*>(wrow + 8 * 32);
      const std::uint8_t* srow = sc + (stage * H + h) * 512 + s_off;
      std::uint32_t s0, s1;
      scale_pairs(srow[0] | (static_cast<unsigned>(srow[128]) << 8), s0, s1);
      std::uint32_t d0[8], d1[8];
      dequant_row<Dequant>(q0, s0, d0);
      dequant_row<Dequant>(q1, s1, d1);
      std::uint8_t* tile = abuf + ((par * 2 + cw) * H + h) * 8192;
#pragma unroll
      for (int i = 0; i < 8; ++i) {  // register i: k-step i % 4, lower (i < 4) or upper 8 slots
        const int chunk = 2 * (i % 4) + (i >= 4 ? 1 : 0);
        *reinterpret_cast<std::uint32_t*>(tile + rr * 128 + ((chunk ^ (rr % 8)) * 16) + 4 * t) = d0[i];
        *reinterpret_cast<std::uint32_t*>(tile + (rr + 8) * 128 + ((chunk ^ ((rr + 8) % 8)) * 16) + 4 * t) = d1[i];
      }
    }
    ptx::fence_proxy_async_shared();
    ptx::named_barrier_sync(1 + cw, 128);
    const std::uint64_t db = ptx::smem_desc_sw128(act0 + stage * kAct);
    ptx::wgmma_fence();
#pragma unroll
    for (int h = 0; h < H; ++h) {
      const std::uint64_t da = ptx::smem_desc_sw128(abuf0 + ((par * 2 + cw) * H + h) * 8192);
#pragma unroll
      for (int s = 0; s < 4; ++s) wgmma_ss<N8>(acc[h], da + 2 * s, db + 2 * s, (kb > 0 || s > 0) ? 1 : 0);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();  // the group that read the other parity's A tile is done
    if (threadIdx.x % 128 == 0) ptx::mbarrier_arrive(&bars[1]);
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  drain_and_sink(acc, sink);
}

template <int N8, int H, bool Dequant>
double run_ss(int sms, float* sink) {
  auto k = ss_loop<N8, H, Dequant>;
  const int smem = kStages * stage_bytes<N8, H>() + 2 * 2 * H * 8192 + 2048;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const int kblocks = 4000;
  const float best = best_ms([&](bool warm) { k<<<sms, kThreads, smem>>>(warm ? 64 : kblocks, sink); });
  const double flops = 2.0 * (128.0 * H) * (8 * N8) * 64 * kblocks * sms;
  return flops / (best * 1e-3) / 1e12;
}

template <int N8, int H, int V>
double run(int sms, float* sink) {
  auto k = consumer_loop<N8, H, V>;
  // Always more than half the SM's shared memory: one CTA per SM, as in the fused kernel.
  const int smem = 120 * 1024 > kStages * stage_bytes<N8, H>() + 2048 ? 120 * 1024 : kStages * stage_bytes<N8, H>() + 2048;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const int kblocks = 4000;
  const float best = best_ms([&](bool warm) { k<<<sms, kThreads, smem>>>(warm ? 64 : kblocks, sink); });
  const double flops = 2.0 * (128.0 * H) * (8 * N8) * 64 * kblocks * sms;
  return flops / (best * 1e-3) / 1e12;
}

// ---- v98: two lanes -- each consumer warpgroup its own tiles: a mainloop of kbt k-blocks, then the GLU epilogue --
// The sketch of PERF.md v98 on the static ring: each warpgroup runs `tiles` tiles of variant 2's k-block loop (64 H
// rows, 8 N8 tokens), each followed by the kernel's own GLU epilogue (store_tile_glu: the accumulators staged in the
// warpgroup's 16 KB buffer, swigluoai, bf16 stores to `out`), plus one tile of `part` k-blocks: last in both lanes
// (phase 0: the lanes in step, as the cooperative kernel's warpgroups are), or first in lane 1 (phase 1: the lanes
// half a tile apart, one lane's epilogue beside the other's mainloop). Same work either way. kEpi: 1 the GLU epilogue,
// 0 none at all (the bound if it were hidden completely), 2 (v102, LANES_PLAIN=1) the plain 16-bit epilogue of
// GEMM2-like tiles (store_tile_smem without tensor maps: stmatrix into the buffer, the warpgroup's own 16-byte
// stores of 128-byte rows) -- whether a cheap epilogue, unlike the GLU one, hides beside the other lane's mainloop.
constexpr int kLaneTiles = 17;  // tiles per lane in one launch (16 + the half tile), each with its own output rows

template <int N8, int H, int kEpi>
__global__ void __launch_bounds__(kThreads, 1) lanes_loop(int tiles, int kbt, int part, int phase, void* out,
                                                          float* sink) {
  extern __shared__ __align__(1024) std::uint8_t smem_raw[];
  constexpr int kAct = act_stage_bytes<N8>();
  constexpr int kEpiPerWg = fp4gemm::detail::sm90::kGluPassTokens * 32 * 8;  // [64 tokens][32 columns] float2
  const StaticRing ring = setup_static_ring<N8, H>(smem_raw, 2 * kEpiPerWg);
  std::uint8_t *w = ring.w, *sc = ring.sc;
  std::uint64_t* bars = ring.bars;
  constexpr int kAcc = 4 * N8;
  const int cw = threadIdx.x / 128, wtid = threadIdx.x % 128, warp = wtid / 32, lane = threadIdx.x % 32, t = lane % 4;
  const int row = cw * 64 + warp * 16 + lane / 4;
  const int s_off = (row % 32) * 16 + (row / 32) * 4 + t;
  float acc[H][kAcc];
  std::uint32_t a[2][H][8][2];
  const std::uint32_t act0 = ptx::smem_addr(ring.act);
  int stage = 0;
  auto dequant_stage = [&](int h, std::uint32_t(&buf)[8][2]) {
    const std::uint8_t* wrow = w + (stage * H + h) * 4096 + row * 32 + t * 8;
    const std::uint8_t* srow = sc + (stage * H + h) * 512 + s_off;
    dequant_rows(wrow, srow, buf);
  };
  auto tile_run = [&](int kbs) {
    for (int kb0 = 0; kb0 < kbs; kb0 += 2) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int kb = kb0 + u;
        if (kb < kbs) {
          ptx::mbarrier_wait(&bars[0], 0);
#pragma unroll
          for (int h = 0; h < H; ++h) dequant_stage(h, a[u][h]);
          issue_retire_older<N8>(acc, a[u], act0 + stage * kAct, kb);
          if (wtid == 0) ptx::mbarrier_arrive(&bars[1]);
          stage = stage + 1 == kStages ? 0 : stage + 1;
        }
      }
    }
    ptx::wgmma_wait<0>();
#pragma unroll
    for (int h = 0; h < H; ++h) ptx::fence_registers(acc[h]);
  };
  int tile_no = 0;  // this lane's tiles so far: each tile's output rows are fresh lines, as in the kernel
  auto epilogue = [&] {
    if constexpr (kEpi == 2) {
      using namespace fp4gemm::detail;
      using namespace fp4gemm::detail::sm90;
      GroupParams g{};
      g.n = H * 128, g.ldc = H * 128;  // output columns: the tile's 128-row halves
      g.c = static_cast<__nv_bfloat16*>(out) + static_cast<std::int64_t>(blockIdx.x) * kLaneTiles * 256 * g.ldc;
      TileDesc tile{};
      tile.tok0 = 256 * (tile_no++ % kLaneTiles);
      tile.ntok = 8 * N8;
      std::uint8_t* epi = ring.extra + cw * KernelConfig::kEpiTokens * 128;
#pragma unroll
      for (int h = 0; h < H; ++h)
        store_tile_smem<__nv_bfloat16, N8>(acc[h], g, tile, h * 128 + cw * 64, cw, wtid, 1.0f, epi, nullptr);
    }
    if constexpr (kEpi == 1) {
      using namespace fp4gemm::detail;
      using namespace fp4gemm::detail::sm90;
      GroupParams g{};
      // v99: every CTA its own region of kLaneTiles tiles x 256 token rows (v98 had every CTA write the same
      // 128 KB: the stores of 132 SMs met in L2 on the same lines).
      g.ldc = H * 64;  // output columns: 64 gate / up pairs per 128-row half
      g.c = static_cast<__nv_bfloat16*>(out) + static_cast<std::int64_t>(blockIdx.x) * kLaneTiles * 256 * g.ldc;
      TileDesc tile{};
      tile.tok0 = 256 * (tile_no++ % kLaneTiles);
      tile.ntok = 8 * N8;
      const GluArgs glu{kGluSwigluOai, 0, H * 64, 1.702f, 7.0f, 1.0f, 1.0f, 0, 1.0f, nullptr, nullptr, 0, 0};
      std::uint8_t* epi = ring.extra + cw * kEpiPerWg;
      constexpr int kPasses = (8 * N8 + kGluPassTokens - 1) / kGluPassTokens;
#pragma unroll
      for (int h = 0; h < H; ++h)
        store_tile_glu<__nv_bfloat16, N8>(acc[h], g, tile, h * 128 + cw * 64, lane, glu, warp, cw, wtid, epi, 0, kPasses);
    }
  };
  const bool part_first = phase != 0 && cw == 1;
  if (part_first && part > 0) { tile_run(part); epilogue(); }
  for (int i = 0; i < tiles; ++i) { tile_run(kbt); epilogue(); }
  if (!part_first && part > 0) { tile_run(part); epilogue(); }
  drain_and_sink(acc, sink);
}

template <int N8, int H, int kEpi>
double run_lanes(int sms, float* sink, void* out, int tiles, int kbt, int phase) {
  auto k = lanes_loop<N8, H, kEpi>;
  const int smem = kStages * stage_bytes<N8, H>() + 2 * 16384 + 4096;  // (both epilogues: 16 KB per warpgroup)
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const float best = best_ms([&](bool warm) {
    k<<<sms, kThreads, smem>>>(warm ? 1 : tiles, kbt, kbt / 2, phase, out, sink);
  });
  return best * 1e3;  // us
}

// The time of one launch (every SM: two lanes x (tiles + 1/2) tiles), in step / half a tile apart / no epilogue.
template <int N8, int H, int kEpi = 1>
void lanes_shape(int sms, float* sink, void* out, int kbt) {
  const int tiles = 16;
  const double in_step = run_lanes<N8, H, kEpi>(sms, sink, out, tiles, kbt, 0);
  const double apart = run_lanes<N8, H, kEpi>(sms, sink, out, tiles, kbt, 1);
  const double none = run_lanes<N8, H, 0>(sms, sink, out, tiles, kbt, 0);
  std::printf("lane %3d rows x %3d tokens, %2d k-blocks, %s epilogue | in step %8.1f us | half a tile apart %8.1f "
              "(%+5.1f %%) | no epilogue %8.1f (%+5.1f %%)\n",
              64 * H, 8 * N8, kbt, kEpi == 2 ? "plain" : "GLU", in_step, apart, 100.0 * (apart / in_step - 1), none,
              100.0 * (none / in_step - 1));
  std::fflush(stdout);
}

// v98: one consumer warpgroup alone against two (LONE=1). Both read the same static ring; `threads` 128 runs
// warpgroup 0 only (its 64 rows of each of the H halves), 256 both. TFLOP/s per GPU of the rows computed.
template <int N8, int H, int V>
double run_threads(int sms, float* sink, int threads) {
  auto k = consumer_loop<N8, H, V>;
  const int smem = 120 * 1024 > kStages * stage_bytes<N8, H>() + 2048 ? 120 * 1024 : kStages * stage_bytes<N8, H>() + 2048;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const int kblocks = 4000;
  const float best = best_ms([&](bool warm) { k<<<sms, threads, smem>>>(warm ? 64 : kblocks, sink); });
  return 2.0 * (64.0 * H * (threads / 128)) * (8 * N8) * 64 * kblocks * sms / (best * 1e-3) / 1e12;
}

// Whether a lane of the independent-lanes sketch (PERF.md v98: each warpgroup its own 64 H-row tiles) keeps the
// tensor pipe busy alone, as it would while the other lane drains its epilogue: lone / paired.
template <int N8, int H>
void lone_shape(int sms, float* sink) {
  const double paired = run_threads<N8, H, 2>(sms, sink, 256), lone = run_threads<N8, H, 2>(sms, sink, 128);
  const double p0 = run_threads<N8, H, 0>(sms, sink, 256), l0 = run_threads<N8, H, 0>(sms, sink, 128);
  std::printf("lane %3d rows x %3d tokens | two lanes %6.1f | one lane %6.1f (%3.0f%%) | wgmma only: two %6.1f, one %6.1f\n",
              64 * H, 8 * N8, paired, lone, 100.0 * lone / paired, p0, l0);
  std::fflush(stdout);
}

template <int N8, int H>
void shape(int sms, float* sink) {
  const double v[6] = {run<N8, H, 0>(sms, sink), run<N8, H, 1>(sms, sink), run<N8, H, 2>(sms, sink),
                       run<N8, H, 3>(sms, sink), run<N8, H, 4>(sms, sink), run<N8, H, 5>(sms, sink)};
  std::printf("%3d x %3d |", 128 * H, 8 * N8);
  for (double x : v) std::printf(" %6.1f (%3.0f%%) |", x, 100.0 * x / v[0]);
  std::printf("\n");
  std::fflush(stdout);
}

template <int N8, int H>
void ss_shape(int sms, float* sink) {
  std::printf("%3d x %3d | register A (variant 2) %6.1f | shared A %6.1f | shared A, no dequant %6.1f\n", 128 * H, 8 * N8,
              run<N8, H, 2>(sms, sink), run_ss<N8, H, true>(sms, sink), run_ss<N8, H, false>(sms, sink));
  std::fflush(stdout);
}

template <int N8>
void wide_shape(int sms, float* sink) {
  std::printf("tokens %3d | 2 WG x 2 halves %6.1f | 3 WG (192 rows) %6.1f | 4 WG (256 rows) %6.1f\n", 8 * N8,
              run<N8, 2, 2>(sms, sink), run_wide<N8, 3>(sms, sink), run_wide<N8, 4>(sms, sink));
  std::fflush(stdout);
}

}  // namespace

int main() {
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* sink;
  cudaMalloc(&sink, 4096);
  if (std::getenv("LANES")) {  // v98: two lanes in step against half a tile apart (GLU epilogue, static ring)
    std::printf("LANES: us per launch on %d SMs (two lanes x 16.5 tiles each, every tile's output rows fresh)\n", sms);
    void* out;  // per CTA: kLaneTiles tiles x 256 token rows x up to 256 bf16 columns (the plain epilogue's)
    cudaMalloc(&out, static_cast<std::size_t>(sms) * kLaneTiles * 256 * 256 * 2);
    if (std::getenv("LANES_PLAIN")) {  // v102: the plain 16-bit epilogue (GEMM2's K: Qwen3 768 / 64, gpt-oss 2880 / 64)
      for (int kbt : {12, 45}) {
        lanes_shape<16, 2, 2>(sms, sink, out, kbt);
        lanes_shape<32, 1, 2>(sms, sink, out, kbt);
      }
      return 0;
    }
    if (std::getenv("LANES_ONE")) {  // one shape only (for ncu: launches 1-8 in step, 9-16 apart, 17-24 none)
      lanes_shape<16, 2>(sms, sink, out, 45);
      return 0;
    }
    for (int kbt : {32, 45}) {  // Qwen3-30B-A3B's and gpt-oss-120b's GEMM1 K / 64
      lanes_shape<8, 2>(sms, sink, out, kbt);
      lanes_shape<16, 2>(sms, sink, out, kbt);
      lanes_shape<18, 1>(sms, sink, out, kbt);
      lanes_shape<32, 1>(sms, sink, out, kbt);
    }
    return 0;
  }
  if (std::getenv("LONE")) {  // v98: one consumer warpgroup alone against two (variant 2 and wgmma only)
    std::printf("LONE: TFLOP/s of the rows computed, on %d SMs\n", sms);
    lone_shape<8, 2>(sms, sink);
    lone_shape<12, 2>(sms, sink);
    lone_shape<16, 2>(sms, sink);
    lone_shape<18, 1>(sms, sink);
    lone_shape<24, 1>(sms, sink);
    lone_shape<32, 1>(sms, sink);
    return 0;
  }
  std::printf("TFLOP/s (share of variant 0) on %d SMs; variants: 0 wgmma only | 1 v9 loop | 2 v9 + barriers | "
              "3 prefetched LDS | 4 three A sets | 5 no dequant\n",
              sms);
  std::printf("rows x tok |");
  for (int i = 0; i < 6; ++i) std::printf("   variant %d   |", i);
  std::printf("\n");
  if (std::getenv("SMALL")) {  // the decode classes (16 / 32 tokens, 256-row tiles), v22
    shape<1, 2>(sms, sink);
    shape<2, 2>(sms, sink);
    shape<4, 2>(sms, sink);
    std::printf("\nmore consumer warpgroups (static data, TFLOP/s)\n");
    wide_shape<1>(sms, sink);
    wide_shape<2>(sms, sink);
    wide_shape<4>(sms, sink);
    return 0;
  }
  shape<8, 2>(sms, sink);
  shape<12, 2>(sms, sink);
  shape<16, 1>(sms, sink);
  shape<20, 1>(sms, sink);
  shape<24, 1>(sms, sink);
  shape<32, 1>(sms, sink);
  std::printf("\nshared-A wgmma: weights dequantised into a swizzled shared A tile (static data, TFLOP/s)\n");
  ss_shape<8, 2>(sms, sink);
  ss_shape<12, 2>(sms, sink);
  ss_shape<16, 2>(sms, sink);
  ss_shape<20, 1>(sms, sink);
  if (std::getenv("SS_ONLY")) return 0;
  std::printf("\nmore consumer warpgroups (static data, TFLOP/s)\n");
  wide_shape<8>(sms, sink);
  wide_shape<10>(sms, sink);
  wide_shape<12>(sms, sink);
  wide_shape<16>(sms, sink);
  FedData d;
  cudaMalloc(&d.weights, std::size_t(132) * 256 * kFedK / 2);
  cudaMalloc(&d.acts, std::size_t(256) * kFedK * 2);
  cudaMalloc(&d.scales, std::size_t(132) * 2 * (kFedK / 64) * 512);
  cudaMemset(d.weights, 0x5a, std::size_t(132) * 256 * kFedK / 2);
  cudaMemset(d.acts, 0x3c, std::size_t(256) * kFedK * 2);
  cudaMemset(d.scales, 0x38, std::size_t(132) * 2 * (kFedK / 64) * 512);
  {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q{};
    cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q);
    d.encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }
  std::printf("\nfed by a producer warpgroup (TFLOP/s): P0 arrive only | P1 + weight TMA | P2 + activation TMA | P3 + scale bulk copies\n");
  fed_shape<8, 2>(sms, sink, d);
  fed_shape<12, 2>(sms, sink, d);
  fed_shape<16, 1>(sms, sink, d);
  fed_shape<20, 1>(sms, sink, d);
  fed_shape<24, 1>(sms, sink, d);
  fed_shape<32, 1>(sms, sink, d);
  return 0;
}
