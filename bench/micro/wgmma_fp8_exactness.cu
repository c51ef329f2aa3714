// Device probe for issue 52's MXFP4 x MXFP4 idea (docs/PERF.md v68): is Hopper's FP8 *wgmma* (e4m3 x e4m3, FP32
// accumulator, K = 32 per instruction) exact on e2m1 values? e2m1 is exact in e4m3, every e2m1 x e2m1 product is a
// multiple of 1/4 of magnitude <= 36, so one k32 step's sum is a multiple of 1/4 of magnitude <= 1152: 13 bits. An
// exact FP8 path would run one wgmma per 32-element MXFP4 block into a zeroed accumulator and apply the block's two
// scales (2^(ew + ea)) to the FP32 partial with one FMA -- exact if and only if the tensor core's internal sum of a
// k32 step is. (bench/micro/mma_exactness.cu asked the same of FP8 mma.sync, which sm_90a lowers to f16 HMMA: not the
// FP8 tensor path.) Not a test of the library: it runs none of it.
//
// One warpgroup per 64 x 8 x 128 tile, A and B in shared memory in the 128-byte swizzle the library's kernels use
// (K-major: the only layout FP8 wgmma takes), four m64n8k32 steps. Modes, each over `tiles` random tiles, every output
// compared with an exact host sum (integers in units of 1/4):
//   step: each k32 step alone (scale-d 0): the partial an FP8 MXFP4 path needs exact;
//   chain: the four steps accumulated (scale-d 1 after the first): k128 sums up to 4608, against the FP32 rounding of
//          the exact sum (exact below 2^24: every value here is);
//   big-C: step 0 accumulated onto C = 2^j + 1/4 (j = 10, 14, 18, 22): how the FP32 accumulator's existing value and
//          the new k32 sum combine (compared with the correctly rounded FP32 of C + sum).
// Data: uniform (every e2m1 code), cancel (mostly +-6 x +-6 with random signs, a few +-0.5: large partials that
// cancel to small sums), edge (31 products of 36 and one of 1/4: the 13-bit case), small (+-0.5 x +-0.5 and zeros).
// Encodings: e4m3 (each e2m1 value's own e4m3 byte) and raw (the nibble's bits dropped into the byte, sign to bit 7,
// E E M to bits 4-2: the e2m1 value times 2^-6 in e4m3, subnormal 0.5 included -- two shifts and a few LOP3 per 8
// weights, the conversion a fast path would use; every product then carries 2^-12, the smallest 2^-14).
// Build: nvcc -std=c++17 -O2 -arch=sm_90a bench/micro/wgmma_fp8_exactness.cu -o wgmma_fp8_exactness
// Run:   ./wgmma_fp8_exactness [tiles]   (prints mismatch counts and the first mismatch of each mode; exit 0 either
//        way: it is a probe)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kM = 64, kN = 8, kK = 128;  // one tile: A [64][128] e4m3, B [8][128] e4m3 (B row n = token n's K)

// e2m1 code (sign bit 3) -> e4m3 byte (bias 7): 0.5 = 0x30, 1 = 0x38, 1.5 = 0x3C, 2 = 0x40, 3 = 0x44, 4 = 0x48, 6 = 0x4C
std::uint8_t e2m1_as_e4m3(int code) {
  static constexpr std::uint8_t m[8] = {0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C};
  return static_cast<std::uint8_t>(m[code & 7] | (code & 8 ? 0x80 : 0x00));
}
// the raw placement: e2m1 x 2^-6 as e4m3 (E = 0: e4m3 subnormal M x 2^-7 = (M x 0.5) x 2^-6)
std::uint8_t e2m1_raw_e4m3(int code) { return static_cast<std::uint8_t>(((code & 7) << 2) | (code & 8 ? 0x80 : 0x00)); }
// twice the e2m1 value (an integer): 0, 1, 2, 3, 4, 6, 8, 12
int e2m1_twice(int code) {
  static constexpr int m[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  return (code & 8 ? -1 : 1) * m[code & 7];
}

__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ std::uint64_t desc_sw128(std::uint32_t addr) {  // as src/device/ptx/ptx.cuh's
  std::uint64_t d = 0;
  d |= static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<std::uint64_t>(1) << 16;
  d |= static_cast<std::uint64_t>(1024 >> 4) << 32;
  d |= static_cast<std::uint64_t>(1) << 62;
  return d;
}
__device__ __forceinline__ void wgmma_fp8_m64n8k32(float (&d)[4], std::uint64_t da, std::uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(da), "l"(db), "r"(scale_d));
}

// 128-byte swizzle: row r's 16-byte chunk j at r * 128 + (j ^ r % 8) * 16 (8-row atoms of 1 KB).
__device__ __forceinline__ int swz(int r, int byte) { return r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15); }

// mode 0: 4 independent k32 steps -> D[tile][4][64][8]; mode 1: chained -> D[tile][0]; mode 2: C = c0 then step 0.
__global__ void __launch_bounds__(128) tiles_kernel(const std::uint8_t* A, const std::uint8_t* B, float* D, int mode,
                                                    float c0) {
  __shared__ __align__(1024) std::uint8_t sa[kM * kK];
  __shared__ __align__(1024) std::uint8_t sb[kN * kK];
  const int t = blockIdx.x, tid = threadIdx.x;
  const std::uint8_t* a = A + static_cast<std::size_t>(t) * kM * kK;
  const std::uint8_t* b = B + static_cast<std::size_t>(t) * kN * kK;
  for (int i = tid; i < kM * kK; i += 128) sa[swz(i / kK, i % kK)] = a[i];
  for (int i = tid; i < kN * kK; i += 128) sb[swz(i / kK, i % kK)] = b[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const std::uint64_t da = desc_sw128(smem_u32(sa)), db = desc_sw128(smem_u32(sb));
  float d[4][4];
  for (int s = 0; s < 4; ++s)
    for (int q = 0; q < 4; ++q) d[s][q] = mode == 2 ? c0 : 0.0f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  if (mode == 0) {
#pragma unroll
    for (int s = 0; s < 4; ++s) wgmma_fp8_m64n8k32(d[s], da + 2 * s, db + 2 * s, 0);  // (+32 bytes of K per step)
  } else if (mode == 1) {
#pragma unroll
    for (int s = 0; s < 4; ++s) wgmma_fp8_m64n8k32(d[0], da + 2 * s, db + 2 * s, s > 0 ? 1 : 0);
  } else {
    wgmma_fp8_m64n8k32(d[0], da, db, 1);
  }
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  // accumulator fragment: warp w rows 16w + lane / 4 (and + 8), columns 2 (lane % 4) and + 1
  const int w = tid / 32, lane = tid % 32, row = 16 * w + lane / 4, col = 2 * (lane % 4);
  const int steps = mode == 0 ? 4 : 1;
  for (int s = 0; s < steps; ++s) {
    float* o = D + (static_cast<std::size_t>(t) * 4 + s) * kM * kN;
    o[row * kN + col] = d[s][0], o[row * kN + col + 1] = d[s][1];
    o[(row + 8) * kN + col] = d[s][2], o[(row + 8) * kN + col + 1] = d[s][3];
  }
}

#include "micro_check.cuh"

struct Data {
  std::vector<int> ca, cb;  // e2m1 codes
};

Data draw(std::mt19937_64& rng, int tiles, const char* kind) {
  Data d;
  d.ca.resize(static_cast<std::size_t>(tiles) * kM * kK);
  d.cb.resize(static_cast<std::size_t>(tiles) * kN * kK);
  auto code = [&](std::vector<int>& v, std::size_t i, int row, int k) {
    const int sign = static_cast<int>(rng() & 1) << 3;
    if (!std::strcmp(kind, "uniform")) {
      v[i] = static_cast<int>(rng() % 16);
    } else if (!std::strcmp(kind, "cancel")) {
      v[i] = sign | (rng() % 8 == 0 ? 1 : 7);  // +-6 mostly, +-0.5 at times
    } else if (!std::strcmp(kind, "edge")) {
      v[i] = (k % 32 == (row * 7) % 32) ? 1 : 7;  // one 0.5 per k32 slice (per row), the rest 6: sums 1116.25 (all +)
      if (rng() % 4 == 0) v[i] |= sign;          // and with some signs flipped
    } else {  // small
      v[i] = rng() % 3 == 0 ? 0 : (sign | 1);
    }
  };
  for (int t = 0; t < tiles; ++t) {
    for (int r = 0; r < kM; ++r)
      for (int k = 0; k < kK; ++k) code(d.ca, (static_cast<std::size_t>(t) * kM + r) * kK + k, r, k);
    for (int n = 0; n < kN; ++n)
      for (int k = 0; k < kK; ++k) code(d.cb, (static_cast<std::size_t>(t) * kN + n) * kK + k, n + 1, k);
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  const int tiles = argc > 1 ? std::atoi(argv[1]) : 2048;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("wgmma_fp8_exactness on %s (sm_%d%d), %d tiles of 64 x 8 x 128 per mode and data\n", prop.name,
              prop.major, prop.minor, tiles);
  std::mt19937_64 rng(20261201);
  std::uint8_t *dA, *dB;
  float* dD;
  CK(cudaMalloc(&dA, static_cast<std::size_t>(tiles) * kM * kK));
  CK(cudaMalloc(&dB, static_cast<std::size_t>(tiles) * kN * kK));
  CK(cudaMalloc(&dD, static_cast<std::size_t>(tiles) * 4 * kM * kN * sizeof(float)));
  std::vector<float> D(static_cast<std::size_t>(tiles) * 4 * kM * kN);
  long long total_bad = 0;
  for (const bool raw : {false, true})
  for (const char* kind : {"uniform", "cancel", "edge", "small"}) {
    const Data data = draw(rng, tiles, kind);
    std::vector<std::uint8_t> a(data.ca.size()), b(data.cb.size());
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = raw ? e2m1_raw_e4m3(data.ca[i]) : e2m1_as_e4m3(data.ca[i]);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = raw ? e2m1_raw_e4m3(data.cb[i]) : e2m1_as_e4m3(data.cb[i]);
    const double unit = raw ? std::ldexp(0.25, -12) : 0.25;  // one quarter, times 2^-12 in the raw encoding
    CK(cudaMemcpy(dA, a.data(), a.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, b.data(), b.size(), cudaMemcpyHostToDevice));
    // exact sums in units of 1/4 (products of twice-values): per tile, step, row, column
    auto exact = [&](int t, int s0, int s1, int r, int n) {
      long long q = 0;
      for (int k = 32 * s0; k < 32 * s1; ++k)
        q += static_cast<long long>(e2m1_twice(data.ca[(static_cast<std::size_t>(t) * kM + r) * kK + k])) *
             e2m1_twice(data.cb[(static_cast<std::size_t>(t) * kN + n) * kK + k]);
      return q;  // the sum is q / 4
    };
    for (int mode = 0; mode < 3; ++mode) {
      const int cjs[4] = {10, 14, 18, 22};
      for (int ci = 0; ci < (mode == 2 ? 4 : 1); ++ci) {
        const double c0 = mode == 2 ? std::ldexp(1.0, cjs[ci] - (raw ? 12 : 0)) + unit : 0.0;
        CK(cudaMemset(dD, 0xFF, D.size() * sizeof(float)));  // NaN poison
        tiles_kernel<<<tiles, 128>>>(dA, dB, dD, mode, static_cast<float>(c0));
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(D.data(), dD, D.size() * sizeof(float), cudaMemcpyDeviceToHost));
        long long bad = 0, checked = 0, max_q = 0;
        char first[256] = "";
        const int steps = mode == 0 ? 4 : 1;
        for (int t = 0; t < tiles; ++t)
          for (int s = 0; s < steps; ++s)
            for (int r = 0; r < kM; ++r)
              for (int n = 0; n < kN; ++n) {
                const long long q = mode == 0 ? exact(t, s, s + 1, r, n) : mode == 1 ? exact(t, 0, 4, r, n) : exact(t, 0, 1, r, n);
                max_q = std::max(max_q, q < 0 ? -q : q);
                // the FP32 value the sum should have: exact (|q| / 4 < 2^24 here), or C + sum rounded once
                const float want = mode == 2 ? static_cast<float>(c0 + static_cast<double>(q) * unit)
                                             : static_cast<float>(static_cast<double>(q) * unit);
                const float got = D[((static_cast<std::size_t>(t) * 4 + s) * kM + r) * kN + n];
                ++checked;
                if (!(got == want)) {
                  if (bad++ == 0)
                    std::snprintf(first, sizeof(first), "tile %d step %d row %d col %d: got %.9g, exact %.9g", t, s, r,
                                  n, got, mode == 2 ? c0 + q * unit : q * unit);
                }
              }
        total_bad += bad;
        const char* mname[3] = {"step (k32, C = 0)", "chain (k128)", "big-C (C + k32)"};
        std::printf("  %-5s %-7s %-18s%s: %lld of %lld differ (largest |sum| %.2f in e2m1 units)%s%s\n",
                    raw ? "raw" : "e4m3", kind, mname[mode],
                    mode == 2 ? (std::string(" C=2^") + std::to_string(cjs[ci]) + "+1/4" + (raw ? " (x2^-12)" : "")).c_str() : "", bad, checked,
                    max_q / 4.0, bad ? "; first: " : "", first);
      }
    }
  }
  std::printf("total mismatches: %lld\n", total_bad);
  return 0;
}
