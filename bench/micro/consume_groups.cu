// Microbenchmark: the cost of a decode chunk's consume as the columns per weight read grow -- G groups of 8 token
// columns (issue 52's variable-group wide slot, docs/PERF.md v86). v86's in-kernel probe measured +9..+12 % of the
// layer per extra group with mma.sync m16n8k16 (8 more HMMA and 4 more LDS.128 per chunk per group); this micro asks
// whether a warpgroup wgmma m64n(8G)k16 with A from registers (the dequantised fragments, mma.sync's A layout) and B the
// staged tokens in shared memory makes the groups cheap: one wgmma per k-step whatever G, no B loads.
//
// Compute only (no DRAM): every SM runs 16 warps; each warp cycles over 3 KB of random MXFP4 codes (pieces bit order)
// and scale codes in shared memory, dequantises a 16-row x 128-k chunk as the decode kernels do (9-op decode, one HMUL2
// per pair), and multiplies it:
//   mode 0 (mma.sync): G x 8 HMMA m16n8k16, each group's B fragments by 4 LDS.128 per chunk (the kernels' consume);
//   mode 1 (wgmma RS): 8 wgmma m64n(8G)k16 per chunk per warpgroup, B through a 128-byte-swizzle descriptor, the A
//                      fragments double-buffered over two chunks (fence, 8 wgmma, commit, wait for the older group);
//   mode 2 (dequant): the dequantisation alone, the fragments folded by XOR (what the consume costs without any mma).
// Prints µs per launch and ns per chunk per SM sub-partition for G 1-4 (and the wgmma at G 8 for reference).
// Timing only: the sums go to a global buffer so that nothing is eliminated; they are not checked.
//
// Build and run (sm_90a):
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/micro/consume_groups.cu \
//        -o build/consume_groups && build/consume_groups [chunks per warp, default 4096]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "device/decode_stream.cuh"
#include "device/dequant.cuh"
#include "device/ptx/ptx.cuh"
#include "device/ptx/wgmma_rs.cuh"
#include "micro_timing.cuh"

using namespace fp4gemm;
namespace dd = fp4gemm::detail::decode;

namespace {

constexpr int kWarps = 16, kThreads = 32 * kWarps;
constexpr int kRingChunks = 3;                              // per warp: 3 chunks of 1 KB codes
constexpr int kCodeBytes = kWarps * kRingChunks * 1024;     // 48 KB
constexpr int kScaleBytes = kWarps * kRingChunks * 32 * 8;  // per lane and chunk: two scale words (cg, ch)
constexpr int kTokRows = 64;                                // up to G 8
constexpr int kBK = 1024;                                   // staged k (bf16): 16 k-blocks of 64
constexpr int kBBytes = kTokRows * kBK * 2;                 // 128 KB, SW128 atoms: [k-block][row][128 B]
constexpr int kSmem = kCodeBytes + kScaleBytes + kBBytes;

// One warp's chunk: 8 code words (wg 4, wh 4) and the two scale words; the dequantised pairs scaled as the decode
// kernels' common path (codes <= 128: one IMAD per row, one HMUL2 per pair).
struct Chunk {
  uint4 wg, wh;
  std::uint32_t cg, ch;
};

__device__ __forceinline__ Chunk load_chunk(std::uint32_t codes, std::uint32_t scales, int lane, int i) {
  const int r = i % kRingChunks;
  Chunk c;
  c.wg = dd::lds_128(codes + r * 1024 + lane * 32);
  c.wh = dd::lds_128(codes + r * 1024 + lane * 32 + 16);
  const uint2 s = dd::lds_64(scales + (r * 32 + lane) * 8);
  c.cg = s.x, c.ch = s.y;
  return c;
}

// The 8 A fragments of a chunk (k-step s: frag[s]), dequantised and scaled.
__device__ __forceinline__ void dequant_chunk(const Chunk& c, std::uint32_t (&frag)[8][4]) {
  const std::uint32_t mg = c.cg * 0x80u + 0x3F003F00u, mh = c.ch * 0x80u + 0x3F003F00u;
  const std::uint32_t ga = dd::bf16_half_both<0>(mg), gb = dd::bf16_half_both<1>(mg);
  const std::uint32_t ha = dd::bf16_half_both<0>(mh), hb = dd::bf16_half_both<1>(mh);
  const std::uint32_t sg[4] = {ga, ga, gb, gb}, sh[4] = {ha, ha, hb, hb};
  const std::uint32_t wg[4] = {c.wg.x, c.wg.y, c.wg.z, c.wg.w}, wh[4] = {c.wh.x, c.wh.y, c.wh.z, c.wh.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    std::uint32_t ag[4], ah[4];
    detail::e2m1_quad<false, true>(wg[q], ag);
    detail::e2m1_quad<false, true>(wh[q], ah);
#pragma unroll
    for (int p = 0; p < 4; ++p) ag[p] = dd::bf16x2_mul(ag[p], sg[q]), ah[p] = dd::bf16x2_mul(ah[p], sh[q]);
    frag[2 * q][0] = ag[0], frag[2 * q][1] = ah[0], frag[2 * q][2] = ag[1], frag[2 * q][3] = ah[1];
    frag[2 * q + 1][0] = ag[2], frag[2 * q + 1][1] = ah[2], frag[2 * q + 1][2] = ag[3], frag[2 * q + 1][3] = ah[3];
  }
}

template <int Mode, int G>
__global__ void __launch_bounds__(kThreads, 1) consume_kernel(int chunks, float* out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // fill: random-ish codes, scale codes 118-128 (the common path), tokens small bf16 values
  for (int i = threadIdx.x; i < kCodeBytes / 4; i += kThreads)
    reinterpret_cast<std::uint32_t*>(smem)[i] = (i * 2654435761u) ^ (blockIdx.x * 97u);
  for (int i = threadIdx.x; i < kScaleBytes / 4; i += kThreads)
    reinterpret_cast<std::uint32_t*>(smem + kCodeBytes)[i] = (118u + i % 11u) | (118u + (i / 11) % 11u) << 16;
  for (int i = threadIdx.x; i < kBBytes / 4; i += kThreads)
    reinterpret_cast<std::uint32_t*>(smem + kCodeBytes + kScaleBytes)[i] = 0x3F803F80u ^ ((i & 7u) << 4);
  __syncthreads();
  const std::uint32_t base = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  const std::uint32_t codes = base + warp * kRingChunks * 1024, scales = base + kCodeBytes + warp * kRingChunks * 256;
  const std::uint32_t bbase = base + kCodeBytes + kScaleBytes;
  float sum = 0.0f;
  if constexpr (Mode == 0) {
    float acc[G][2][4] = {};
    // lane's token row in group j: row 8 j + lane / 4, its k-pairs at byte (lane % 4) * 16 within a 64-byte window
    for (int i = 0; i < chunks; ++i) {
      const Chunk c = load_chunk(codes, scales, lane, i);
      std::uint32_t frag[8][4];
      dequant_chunk(c, frag);
      const int kb = (i * 2) % (kBK / 64);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
#pragma unroll
        for (int j = 0; j < G; ++j) {
          const std::uint32_t row = 8 * j + lane / 4;
          const uint4 xv = dd::lds_128(bbase + ((kb + q / 2) * kTokRows + row) * 128 + ((q % 2) * 64 + (lane % 4) * 16));
          dd::mma_16816(acc[j][0], frag[2 * q][0], frag[2 * q][1], frag[2 * q][2], frag[2 * q][3], xv.x, xv.y);
          dd::mma_16816(acc[j][1], frag[2 * q + 1][0], frag[2 * q + 1][1], frag[2 * q + 1][2], frag[2 * q + 1][3], xv.z,
                        xv.w);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < G; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 4; ++e) sum += acc[j][h][e];
  } else if constexpr (Mode == 2) {  // the dequantisation alone (no mma): the fragments folded by XOR
    std::uint32_t x = 0;
    for (int i = 0; i < chunks; ++i) {
      std::uint32_t frag[8][4];
      dequant_chunk(load_chunk(codes, scales, lane, i), frag);
#pragma unroll
      for (int s2 = 0; s2 < 8; ++s2) x ^= frag[s2][0] ^ frag[s2][1] ^ frag[s2][2] ^ frag[s2][3];
    }
    sum = __uint_as_float(x);
  } else {
    constexpr int kAcc = 4 * G;  // m64 n(8G): 4 G floats per thread
    float acc[kAcc] = {};
    std::uint32_t fa[8][4], fb[8][4];
    auto issue = [&](const std::uint32_t (&frag)[8][4], int i) {
      const int kb = (i * 2) % (kBK / 64);
      ptx::wgmma_fence();
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        const std::uint64_t d = ptx::smem_desc_sw128(bbase + (kb + s / 4) * kTokRows * 128) + 2 * (s % 4);
        ptx::wgmma_rs_bf16<G, kAcc>(acc, frag[s], d, 1);
      }
      ptx::wgmma_commit();
    };
    int i = 0;
    dequant_chunk(load_chunk(codes, scales, lane, i), fa);
    issue(fa, i);
    for (i = 1; i + 1 < chunks; i += 2) {
      dequant_chunk(load_chunk(codes, scales, lane, i), fb);
      issue(fb, i);
      ptx::wgmma_wait<1>();
      ptx::fence_registers(acc);
      dequant_chunk(load_chunk(codes, scales, lane, i + 1), fa);
      issue(fa, i + 1);
      ptx::wgmma_wait<1>();
      ptx::fence_registers(acc);
    }
    ptx::wgmma_wait<0>();
    ptx::fence_registers(acc);
#pragma unroll
    for (int e = 0; e < kAcc; ++e) sum += acc[e];
  }
  out[blockIdx.x * kThreads + threadIdx.x] = sum;
}

template <int Mode, int G>
void run(int sms, int chunks, float* out, double clock_ghz) {
  auto k = consume_kernel<Mode, G>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  const float ms = best_ms([&](bool) { k<<<sms, kThreads, kSmem>>>(chunks, out); });
  // per SM sub-partition: 4 warps, each `chunks` chunks
  const double ns_per_chunk = ms * 1e6 / (4.0 * chunks);
  std::printf("%-8s G %d: %8.1f us  %6.2f ns per chunk per SMSP  (%6.1f cycles at %.2f GHz)\n",
              Mode == 0 ? "mma.sync" : Mode == 1 ? "wgmma" : "dequant", G, ms * 1e3, ns_per_chunk, ns_per_chunk * clock_ghz, clock_ghz);
}

}  // namespace

int main(int argc, char** argv) {
  const int chunks = argc > 1 ? std::atoi(argv[1]) : 4096;
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  const double ghz = clock_khz / 1e6;
  std::printf("%s, %d SMs; %d chunks per warp, 16 warps per SM; compute only\n", prop.name, prop.multiProcessorCount,
              chunks);
  float* out = nullptr;
  cudaMalloc(&out, sizeof(float) * prop.multiProcessorCount * kThreads);
  for (int rep = 0; rep < 2; ++rep) {
    run<0, 1>(prop.multiProcessorCount, chunks, out, ghz);
    run<0, 2>(prop.multiProcessorCount, chunks, out, ghz);
    run<0, 3>(prop.multiProcessorCount, chunks, out, ghz);
    run<0, 4>(prop.multiProcessorCount, chunks, out, ghz);
    run<1, 1>(prop.multiProcessorCount, chunks, out, ghz);
    run<1, 2>(prop.multiProcessorCount, chunks, out, ghz);
    run<1, 3>(prop.multiProcessorCount, chunks, out, ghz);
    run<1, 4>(prop.multiProcessorCount, chunks, out, ghz);
    run<1, 8>(prop.multiProcessorCount, chunks, out, ghz);
    run<2, 1>(prop.multiProcessorCount, chunks, out, ghz);
  }
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::printf("error: %s\n", cudaGetErrorString(e));
    return 1;
  }
  cudaFree(out);
  return 0;
}
