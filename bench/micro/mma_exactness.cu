// Device check of two exactness questions behind the next decode kernel (docs/PERF.md v53); not a
// test of the library (it runs none of it):
//   1. bf16 mma.sync m16n8k16 with *subnormal* bf16 A inputs: the raw e2m1 patterns the decode path
//      builds (value * 2^-126; e2m1 0.5 becomes 2^-127, a bf16 subnormal) fed to the tensor core
//      without the 2^126 multiply, against activations pre-scaled by 2^100. If the tensor core
//      flushed subnormal inputs, every 0.5 weight would count as 0. Control: the same values as
//      normal bf16 (times 2^126 on the host).
//   2. FP8 mma.sync m16n8k32 (e4m3 x e4m3, FP32 accumulator) with e2m1 values on both sides (e2m1 is
//      exact in e4m3): is one k32 step's sum exact (C = 0)? And with a large C (2^k + small), how
//      many low bits of the small part survive (Hopper's FP8 accumulation is known to keep fewer
//      than 24 bits)? An MXFP4 x MXFP4 path would use C = 0 per 32-element block and apply the
//      scales to the FP32 partials. NOTE (SASS, nvcc 13.0): on sm_90a ptxas lowers this mma.sync
//      to F2FP.F16.E4M3.UNPACK_B conversions and two f16 HMMA.16816.F32 -- Hopper has no FP8
//      mma.sync, only FP8 wgmma -- so case 2 checks that lowering (exact for e2m1 values: they are
//      f16 values), not the FP8 tensor path; an FP8 decode path would have to use wgmma.
// Every case compares all 128 outputs of each of `trials` random tiles with exact host sums.
// Build: nvcc -std=c++17 -O2 -arch=sm_90a bench/micro/mma_exactness.cu -o mma_exactness
// Run:   ./mma_exactness [trials]   (prints mismatch counts; exit status 0 either way: it is a probe)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
float e2m1_value(int code) { return (code & 8 ? -1.0f : 1.0f) * kE2m1[code & 7]; }
// e2m1 as e4m3 (bias 7): 0.5 = 0x30, 1 = 0x38, 1.5 = 0x3C, 2 = 0x40, 3 = 0x44, 4 = 0x48, 6 = 0x4C
std::uint8_t e2m1_as_e4m3(int code) {
  static constexpr std::uint8_t m[8] = {0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C};
  return static_cast<std::uint8_t>(m[code & 7] | (code & 8 ? 0x80 : 0x00));
}
// the decode path's raw pattern: sign at bit 15, e2m1 bits at 6-8 (value * 2^-126)
std::uint16_t e2m1_raw_bf16(int code) { return static_cast<std::uint16_t>(((code & 8) << 12) | ((code & 7) << 6)); }
std::uint16_t bf16_bits(float f) {  // exact values only (checked by the caller's choice of values)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>(u >> 16);
}

// Lane (g, c)'s m16n8 accumulator fragment into a row-major [16][8] tile.
__device__ void store_fragment(float* out, int g, int c, const float (&d)[4]) {
  out[g * 8 + 2 * c] = d[0], out[g * 8 + 2 * c + 1] = d[1];
  out[(g + 8) * 8 + 2 * c] = d[2], out[(g + 8) * 8 + 2 * c + 1] = d[3];
}

// One warp per tile. A: [16][K] 16-bit or 8-bit elements row-major; B: [8][K] (column n's K
// elements contiguous); D: [16][8] floats; C: one float added to every accumulator element.
__global__ void mma_bf16_tiles(const std::uint16_t* A, const std::uint16_t* B, float* D) {
  const int t = blockIdx.x, lane = threadIdx.x, g = lane / 4, c = lane % 4;
  const std::uint16_t* a = A + t * 16 * 16;
  const std::uint16_t* b = B + t * 8 * 16;
  auto pack = [](std::uint16_t lo, std::uint16_t hi) { return static_cast<std::uint32_t>(lo) | static_cast<std::uint32_t>(hi) << 16; };
  const std::uint32_t a0 = pack(a[g * 16 + 2 * c], a[g * 16 + 2 * c + 1]);
  const std::uint32_t a1 = pack(a[(g + 8) * 16 + 2 * c], a[(g + 8) * 16 + 2 * c + 1]);
  const std::uint32_t a2 = pack(a[g * 16 + 2 * c + 8], a[g * 16 + 2 * c + 9]);
  const std::uint32_t a3 = pack(a[(g + 8) * 16 + 2 * c + 8], a[(g + 8) * 16 + 2 * c + 9]);
  const std::uint32_t b0 = pack(b[g * 16 + 2 * c], b[g * 16 + 2 * c + 1]);
  const std::uint32_t b1 = pack(b[g * 16 + 2 * c + 8], b[g * 16 + 2 * c + 9]);
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  store_fragment(D + t * 128, g, c, d);
}

__global__ void mma_e4m3_tiles(const std::uint8_t* A, const std::uint8_t* B, float* D, float C) {
  const int t = blockIdx.x, lane = threadIdx.x, g = lane / 4, c = lane % 4;
  const std::uint8_t* a = A + t * 16 * 32;
  const std::uint8_t* b = B + t * 8 * 32;
  auto word = [](const std::uint8_t* p) {
    return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
           static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
  };
  const std::uint32_t a0 = word(a + g * 32 + 4 * c), a1 = word(a + (g + 8) * 32 + 4 * c);
  const std::uint32_t a2 = word(a + g * 32 + 4 * c + 16), a3 = word(a + (g + 8) * 32 + 4 * c + 16);
  const std::uint32_t b0 = word(b + g * 32 + 4 * c), b1 = word(b + g * 32 + 4 * c + 16);
  float d[4] = {C, C, C, C};
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  store_fragment(D + t * 128, g, c, d);
}

#include "micro_check.cuh"

template <class T>
T* upload(const std::vector<T>& v) {
  T* p = nullptr;
  CK(cudaMalloc(&p, v.size() * sizeof(T)));
  CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

std::vector<float> download(const float* p, std::size_t n) {
  std::vector<float> v(n);
  CK(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int trials = argc > 1 ? std::atoi(argv[1]) : 4096;
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("mma exactness probe on %s (sm_%d%d), %d random 16x8 tiles per case\n", prop.name, prop.major,
              prop.minor, trials);
  std::mt19937 rng(2026);
  std::uniform_int_distribution<int> code(0, 15), small(-8, 8);

  // ---- 1. bf16 m16n8k16: raw (subnormal-capable) e2m1 patterns x activations * 2^100 ----------
  {
    std::vector<std::uint16_t> A_raw(trials * 256), A_norm(trials * 256), B(trials * 128);
    std::vector<double> want(trials * 128), want_norm(trials * 128);
    std::vector<int> codes(trials * 256), acts(trials * 128);
    long long halves = 0;
    for (int i = 0; i < trials * 256; ++i) {
      codes[i] = code(rng);
      halves += (codes[i] & 7) == 1;
      A_raw[i] = e2m1_raw_bf16(codes[i]);
      A_norm[i] = bf16_bits(e2m1_value(codes[i]));
    }
    for (int i = 0; i < trials * 128; ++i) {
      acts[i] = small(rng);
      B[i] = bf16_bits(std::ldexp(static_cast<float>(acts[i]), 100));
    }
    for (int t = 0; t < trials; ++t)
      for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 8; ++n) {
          double s = 0;
          for (int k = 0; k < 16; ++k) s += static_cast<double>(e2m1_value(codes[t * 256 + m * 16 + k])) * acts[t * 128 + n * 16 + k];
          want[t * 128 + m * 8 + n] = std::ldexp(s, -26);  // raw (2^-126) x 2^100
          want_norm[t * 128 + m * 8 + n] = std::ldexp(s, 100);
        }
    float* D = nullptr;
    CK(cudaMalloc(&D, trials * 128 * sizeof(float)));
    std::uint16_t* dB = upload(B);
    for (int variant = 0; variant < 2; ++variant) {
      std::uint16_t* dA = upload(variant == 0 ? A_raw : A_norm);
      mma_bf16_tiles<<<trials, 32>>>(dA, dB, D);
      CK(cudaGetLastError());
      const std::vector<float> got = download(D, trials * 128);
      const std::vector<double>& w = variant == 0 ? want : want_norm;
      long long bad = 0;
      double worst = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        if (static_cast<double>(got[i]) != w[i]) ++bad, worst = std::max(worst, std::fabs(got[i] - w[i]) / std::max(1e-300, std::fabs(w[i])));
      std::printf("1%s bf16 m16n8k16, %s A: %lld of %zu outputs differ from the exact sum (worst relative %.3g); "
                  "%lld of %d weights were e2m1 0.5\n",
                  variant == 0 ? "a" : "b", variant == 0 ? "raw e2m1 * 2^-126 (0.5 -> bf16 subnormal)" : "normal bf16 (control)",
                  bad, got.size(), worst, halves, trials * 256);
      CK(cudaFree(dA));
    }
    CK(cudaFree(dB));
    CK(cudaFree(D));
  }

  // ---- 2. e4m3 m16n8k32 with e2m1 values on both sides ------------------------------------------
  {
    std::vector<std::uint8_t> A(trials * 512), B(trials * 256);
    std::vector<int> ca(trials * 512), cb(trials * 256);
    for (int i = 0; i < trials * 512; ++i) ca[i] = code(rng), A[i] = e2m1_as_e4m3(ca[i]);
    for (int i = 0; i < trials * 256; ++i) cb[i] = code(rng), B[i] = e2m1_as_e4m3(cb[i]);
    std::vector<double> sum(trials * 128);
    for (int t = 0; t < trials; ++t)
      for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 8; ++n) {
          double s = 0;
          for (int k = 0; k < 32; ++k)
            s += static_cast<double>(e2m1_value(ca[t * 512 + m * 32 + k])) * e2m1_value(cb[t * 256 + n * 32 + k]);
          sum[t * 128 + m * 8 + n] = s;  // a multiple of 0.25, |s| <= 1152: exact in FP32
        }
    std::uint8_t* dA = upload(A);
    std::uint8_t* dB = upload(B);
    float* D = nullptr;
    CK(cudaMalloc(&D, trials * 128 * sizeof(float)));
    const float Cs[] = {0.0f, 1024.0f, 65536.0f, 1048576.0f, 16777216.0f / 4};
    for (float C : Cs) {
      mma_e4m3_tiles<<<trials, 32>>>(dA, dB, D, C);
      CK(cudaGetLastError());
      const std::vector<float> got = download(D, trials * 128);
      long long bad = 0, bad_vs_fp32 = 0;
      double worst = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double exact = static_cast<double>(C) + sum[i];
        const float fp32 = static_cast<float>(C) + static_cast<float>(sum[i]);  // one FP32 rounding
        if (static_cast<double>(got[i]) != exact) ++bad, worst = std::max(worst, std::fabs(got[i] - exact));
        if (got[i] != fp32) ++bad_vs_fp32;
      }
      std::printf("2  e4m3 m16n8k32, e2m1 x e2m1, C = %.0f: %lld of %zu outputs differ from the exact C + sum (worst "
                  "absolute %.3g), %lld from C + sum rounded once to FP32\n",
                  C, bad, got.size(), worst, bad_vs_fp32);
    }
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(D));
  }
  return 0;
}
