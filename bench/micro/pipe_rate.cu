// Issue rate of the instructions the FP4 decodes are made of, per SM and cycle, on every SM at once. This is a probe,
// not a test of the library (it runs none of it). The question it answers is v106/v107's: does `IMAD.WIDE.U32` (the
// 64-bit product of exp/wide-fold's decode) issue at `IMAD`'s rate on the FMA pipe, or take two slots? The mixes
// also show whether `HMUL2` (the scale multiply) shares that pipe with `IMAD`.
// Each mode runs 8 independent dependency chains per thread and instruction kind (inline PTX, so the SASS is the instruction named), 32
// warps per SM. It reports instructions per SM and cycle, from the kernel's own clock64 span, and the event time.
// Modes (x, y: independent 32-bit chains; K, m: constants):
//   imad              x = x * K + x                        -> IMAD
//   lop3              x = x ^ b ^ m                         -> LOP3.LUT
//   shf               x = rotate(x, b)                      -> SHF.L.W
//   hmul2             x = x * b (bf16x2)                    -> HMUL2.BF16_V2 (ptxas issues half as HFMA2.MMA)
//   imad+lop3         x = (x * K + x | x) & m               -> IMAD + LOP3 (the control)
//   imadw+lop3        p = x * K (64-bit); x = (lo | hi) & m -> IMAD.WIDE.U32 + LOP3 (exp/wide-fold's pair)
//   imad+lop3+hmul2   the control's pair and y = y * b      -> IMAD + LOP3 + HMUL2
//   imadw+lop3+hmul2  the fold's pair and y = y * b         -> IMAD.WIDE.U32 + LOP3 + HMUL2
// If IMAD.WIDE takes one FMA-pipe slot, each fold mode runs at its control's rate; if it takes two, slower.
// Build: nvcc -std=c++17 -O3 -arch=sm_90a bench/micro/pipe_rate.cu -o pipe_rate
// Check: cuobjdump -sass pipe_rate | grep -cE 'IMAD.WIDE.U32|HMUL2|LOP3|SHF.L.W'
// Run:   ./pipe_rate [iterations]   (prints one line per mode; exit status 0 unless CUDA fails)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "micro_check.cuh"

enum Mode { kImad, kLop3, kShf, kHmul2, kImadLop3, kImadWLop3, kImadLop3Hmul2, kImadWLop3Hmul2, kModes };
constexpr const char* kNames[kModes] = {"imad", "lop3", "shf", "hmul2", "imad+lop3", "imadw+lop3", "imad+lop3+hmul2",
                                        "imadw+lop3+hmul2"};
constexpr int kInstrPerStep[kModes] = {1, 1, 1, 1, 2, 2, 3, 3};
constexpr int kChains = 8;
constexpr int kUnroll = 16;

__device__ __forceinline__ unsigned imad(unsigned a, unsigned b) {
  unsigned d;
  asm volatile("mad.lo.u32 %0, %1, %2, %1;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
constexpr unsigned kK = (1u << 2) + (1u << 24) + (1u << 29), kMask = 0x6c006c00u;
// The fold's pair: a 64-bit product and one three-input LOP3 that ORs its halves under a mask.
__device__ __forceinline__ unsigned imadw_fold(unsigned x) {
  unsigned d;
  asm volatile("{\n .reg .b64 t;\n .reg .b32 lo, hi;\n mul.wide.u32 t, %1, %2;\n mov.b64 {lo, hi}, t;\n"
               " lop3.b32 %0, lo, hi, %3, 0xA8;\n}" : "=r"(d) : "r"(x), "r"(kK), "r"(kMask));
  return d;
}
// The control: a 32-bit multiply-add and the same LOP3.
__device__ __forceinline__ unsigned imad_fold(unsigned x) {
  unsigned d;
  asm volatile("{\n .reg .b32 p;\n mad.lo.u32 p, %1, %2, %1;\n lop3.b32 %0, p, %1, %3, 0xA8;\n}"
               : "=r"(d) : "r"(x), "r"(kK), "r"(kMask));
  return d;
}
__device__ __forceinline__ unsigned lop3(unsigned a, unsigned b) {
  unsigned d;
  asm volatile("lop3.b32 %0, %1, %2, %3, 0x96;" : "=r"(d) : "r"(a), "r"(b), "r"(0x6c006c00u));
  return d;
}
__device__ __forceinline__ unsigned shf(unsigned a, unsigned b) {
  unsigned d;
  asm volatile("shf.l.wrap.b32 %0, %1, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ unsigned hmul2(unsigned a, unsigned b) {
  unsigned d;
  asm volatile("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// One step of mode M on each chain it uses.
template <int M>
__device__ __forceinline__ void step(unsigned& x, unsigned& y, unsigned b) {
  if constexpr (M == kImad) x = imad(x, b);
  if constexpr (M == kLop3) x = lop3(x, b);
  if constexpr (M == kShf) x = shf(x, b);
  if constexpr (M == kHmul2) x = hmul2(x, b);
  if constexpr (M == kImadLop3) x = imad_fold(x);
  if constexpr (M == kImadWLop3) x = imadw_fold(x);
  if constexpr (M == kImadLop3Hmul2) x = imad_fold(x), y = hmul2(y, b);
  if constexpr (M == kImadWLop3Hmul2) x = imadw_fold(x), y = hmul2(y, b);
}

template <int M>
__global__ void __launch_bounds__(1024) rate_kernel(int iters, unsigned b, unsigned* sink, long long* cycles) {
  unsigned x[kChains], y[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) x[c] = threadIdx.x * 2654435761u + c, y[c] = x[c] ^ 0x3f803f80u;
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int c = 0; c < kChains; ++c) step<M>(x[c], y[c], b);
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  unsigned r = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) r ^= x[c] ^ y[c];
  if (r == 0x9e3779b9u) sink[blockIdx.x] = r;  // keeps the chains live
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int M>
void run(int sms, int iters, unsigned* sink, long long* cycles) {
  constexpr int kThreads = 1024;  // 32 warps: the CTA fills the SM's 4 schedulers 8 deep
  rate_kernel<M><<<sms, kThreads>>>(iters / 8, 0x3f813f81u, sink, cycles);  // warm-up
  CK(cudaGetLastError());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  rate_kernel<M><<<sms, kThreads>>>(iters, 0x3f813f81u, sink, cycles);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  long long* h = new long long[sms];
  CK(cudaMemcpy(h, cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
  long long mx = 0;
  for (int i = 0; i < sms; ++i) mx = h[i] > mx ? h[i] : mx;
  delete[] h;
  const double warp_instr = double(kThreads / 32) * iters * kUnroll * kChains * kInstrPerStep[M];
  std::printf("%-12s %7.2f warp-instructions per SM-cycle (%.2f per scheduler), %.3f ms, %lld cycles\n", kNames[M],
              warp_instr / double(mx), warp_instr / double(mx) / 4, ms, mx);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 4096;
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  std::printf("%s, %d SMs, %d iterations x %d steps x %d chains per thread, 32 warps per SM\n", p.name,
              p.multiProcessorCount, iters, kUnroll, kChains);
  unsigned* sink;
  long long* cycles;
  CK(cudaMalloc(&sink, sizeof(unsigned) * p.multiProcessorCount));
  CK(cudaMalloc(&cycles, sizeof(long long) * p.multiProcessorCount));
  run<kImad>(p.multiProcessorCount, iters, sink, cycles);
  run<kLop3>(p.multiProcessorCount, iters, sink, cycles);
  run<kShf>(p.multiProcessorCount, iters, sink, cycles);
  run<kHmul2>(p.multiProcessorCount, iters, sink, cycles);
  run<kImadLop3>(p.multiProcessorCount, iters, sink, cycles);
  run<kImadWLop3>(p.multiProcessorCount, iters, sink, cycles);
  run<kImadLop3Hmul2>(p.multiProcessorCount, iters, sink, cycles);
  run<kImadWLop3Hmul2>(p.multiProcessorCount, iters, sink, cycles);
  CK(cudaFree(sink));
  CK(cudaFree(cycles));
  return 0;
}
