// FP4GEMM_HD: a function compiled for both the host and the device (nvcc), or a plain inline one
// (a host compiler), so the host tier and the CPU reference run the kernels' own arithmetic. The
// one definition every shared header uses.
#pragma once

#if defined(__CUDACC__)
#define FP4GEMM_HD __host__ __device__ __forceinline__
#else
#define FP4GEMM_HD inline
#endif
