#!/usr/bin/env python3
"""Generates a microbenchmark of the raw wgmma rate on one Hopper GPU (docs/PERF.md v7).

Every SM runs 1 or 2 warpgroups that do nothing but issue wgmma m64nNk16 (f16 in, FP32
accumulators) from constant A registers (RS) or shared memory (SS), with B from shared memory,
4 k-steps per commit group, H independent accumulator sets per k-step, and wgmma.wait_group<D>
after each group. No loads, no barriers, no dequantisation: the ceiling the fused kernel's
mainloop is measured against, per token width N. Shared memory holds non-zero f16 data.

Build and run (sm_90a):
  python3 bench/micro/gen_wgmma_rate.py > build/wgmma_rate.cu
  nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude build/wgmma_rate.cu -o build/wgmma_rate
  build/wgmma_rate
The SASS must show no `WARPGROUP.DEPBAR.LE gsb0, 0x0` after each HGMMA (ptxas warning C7514 =
serialised, the figures are then meaningless).
"""
import sys

NS = [16, 32, 48, 64, 96, 128, 176, 256]
out = ['#include <cstdio>', '#include <cstdint>', '#include <vector>', '#include <cuda_runtime.h>',
       '#include "device/ptx/ptx.cuh"', '#include "device/ptx/wgmma_rs.cuh"', 'using namespace fp4gemm;']
for n in NS:
    nacc = n // 2
    d = ", ".join(f"%{i}" for i in range(nacc))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nacc))
    out.append(f'''template <int A> __device__ __forceinline__ void ss{n}(float (&d)[A], std::uint64_t da, std::uint64_t db) {{
  asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{d}}}, %{nacc}, %{nacc+1}, 1, 1, 1, 0, 0;\\n"
      : {outs} : "l"(da), "l"(db));
}}''')
out.append('template <int N, int A> __device__ __forceinline__ void ss(float (&d)[A], std::uint64_t da, std::uint64_t db) {')
for n in NS:
    out.append(f'  if constexpr (N == {n}) ss{n}(d, da, db);')
out.append('}')
out.append(r'''
template <int N, int H, int D, bool SS>
__global__ void __launch_bounds__(256, 1) kern(int iters, int nwg, float* sink) {
  extern __shared__ __align__(1024) std::uint8_t smem_raw[];
  std::uint8_t* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  for (int i = threadIdx.x; i < (64 * 1024) / 4; i += blockDim.x)
    reinterpret_cast<std::uint32_t*>(smem)[i] = 0x3c003c00u ^ ((i * 2654435761u) & 0x03ff03ffu);
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg >= nwg) return;
  float acc[H][N / 2];
#pragma unroll
  for (int h = 0; h < H; ++h)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[h][i] = 0.f;
  std::uint32_t a[4][4];
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int i = 0; i < 4; ++i) a[s][i] = 0x3c003c00u ^ (((threadIdx.x + 7 * s + 3 * i) * 2654435761u) & 0x03ff03ffu);
  const std::uint32_t bbase = ptx::smem_addr(smem) + (wg % 2) * 0;  // both warpgroups read the same B
  const std::uint32_t abase = ptx::smem_addr(smem) + 32768 + wg * 8192;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int h = 0; h < H; ++h) ptx::fence_registers(acc[h]);
    ptx::wgmma_fence();
#pragma unroll
    for (int s = 0; s < 4; ++s) {
#pragma unroll
      for (int h = 0; h < H; ++h) {
        if constexpr (SS) ss<N>(acc[h], ptx::smem_desc_sw128(abase + h * 4096 + s * 32), ptx::smem_desc_sw128(bbase + s * 32));
        else ptx::wgmma_rs_f16<N / 8>(acc[h], a[s], ptx::smem_desc_sw128(bbase + s * 32), 1);
      }
    }
    ptx::wgmma_commit();
#pragma unroll
    for (int h = 0; h < H; ++h) ptx::fence_registers(acc[h]);
    ptx::wgmma_wait<D>();
  }
  ptx::wgmma_wait<0>();
  float s = 0;
#pragma unroll
  for (int h = 0; h < H; ++h)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) s += acc[h][i];
  if (s == 1234.5f) sink[threadIdx.x] = s;
}

template <int N, int H, int D, bool SS>
void run(int nwg, int sms, float* sink) {
  auto k = kern<N, H, D, SS>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 66 * 1024);
  const int iters = 20000;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  k<<<sms, 256, 66 * 1024>>>(100, nwg, sink);
  std::vector<float> ts;
  for (int r = 0; r < 5; ++r) {
    cudaEventRecord(e0);
    k<<<sms, 256, 66 * 1024>>>(iters, nwg, sink);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1); ts.push_back(ms);
  }
  float best = 1e9; for (float t : ts) best = t < best ? t : best;
  const double flops = 2.0 * 64 * N * 16 * 4 * H * double(iters) * nwg * sms;
  cudaError_t err = cudaGetLastError();
  printf("%-3s N=%3d H=%d wait<%d> WG=%d : %7.1f TFLOP/s %s\n", SS ? "SS" : "RS", N, H, D, nwg, flops / best / 1e9,
         err == cudaSuccess ? "" : cudaGetErrorString(err));
}

template <int N, int H>
void sweep(int sms, float* sink) {
  for (int nwg = 1; nwg <= 2; ++nwg) {
    run<N, H, 0, false>(nwg, sms, sink);
    run<N, H, 1, false>(nwg, sms, sink);
    run<N, H, 2, false>(nwg, sms, sink);
    run<N, H, 1, true>(nwg, sms, sink);
  }
}

int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* sink; cudaMalloc(&sink, 4096);
''')
for n in NS:
    out.append(f'  sweep<{n}, 1>(sms, sink);')
    if n <= 128:
        out.append(f'  sweep<{n}, 2>(sms, sink);')
out.append('  return 0;\n}')
sys.stdout.write('\n'.join(out) + '\n')
