// GPU time of a CUDA-graph replay around one kernel, as tk_layer.py times a layer (256 MiB write flush, a GPU spin,
// then event, graph launch, event; median of the reps), against the kernel's own span (first CTA's entry to last CTA's
// exit, %globaltimer): what a graph of the decode path's shape costs outside its kernel. The kernel is shaped as the
// fused decode kernel (one CTA per SM, 512 threads, ~200 KB of dynamic shared memory) and reads one word per CTA from
// DRAM. Variants: a plain or a cooperative launch, with or without the run serialiser's external event wait / record
// nodes around it, and two plain kernels with programmatic dependent launch (the two-kernel path's shape).
//
// Build and run (sm_90a):
//   nvcc -O2 -std=c++20 -gencode=arch=compute_90a,code=sm_90a bench/micro/graph_latency.cu -o build/graph_latency \
//     && build/graph_latency
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "micro_check.cuh"

constexpr int kReps = 200;
struct Span {
  unsigned long long lo[kReps], hi[kReps];
  unsigned rep, arrived;
};

__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// pdl_part: 0 no PDL, 1 the first of a PDL pair (triggers its dependent at entry), 2 the second (waits for it)
__global__ void __launch_bounds__(512, 1) probe_k(Span* sp, const int* src, int* dst, int pdl_part) {
  __shared__ unsigned slot;
  if (pdl_part == 2) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0) {
    slot = *reinterpret_cast<volatile unsigned*>(&sp->rep) % kReps;
    if (pdl_part != 2) atomicMin(&sp->lo[slot], now());
  }
  if (pdl_part == 1) asm volatile("griddepcontrol.launch_dependents;");
  __syncthreads();
  if (threadIdx.x == 0) {
    dst[blockIdx.x * 32] = src[blockIdx.x * 32] + 1;  // one DRAM round trip per CTA
    __threadfence();
    atomicMax(&sp->hi[slot], now());
    if (pdl_part != 1 && atomicAdd(&sp->arrived, 1u) + 1u == gridDim.x) {
      sp->arrived = 0;
      __threadfence();
      atomicAdd(&sp->rep, 1u);
    }
  }
}

__global__ void spin_k(long long ns) {
  const unsigned long long t0 = now();
  while (now() - t0 < static_cast<unsigned long long>(ns)) {
  }
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d SMs\n", prop.name, sms);
  constexpr int kSmem = 200 * 1024;
  CK(cudaFuncSetAttribute(probe_k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  Span* sp;
  int *src, *dst, *flush;
  CK(cudaMalloc(&sp, sizeof(Span)));
  CK(cudaMalloc(&src, sms * 128));
  CK(cudaMalloc(&dst, sms * 128));
  CK(cudaMemset(src, 0, sms * 128));
  constexpr size_t kFlush = 256u << 20;
  CK(cudaMalloc(&flush, kFlush));
  cudaStream_t s, cap;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
  cudaEvent_t done;
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  struct V {
    const char* name;
    bool coop, events, pdl_pair;
  };
  const V vs[] = {{"plain kernel", false, false, false},
                  {"cooperative kernel", true, false, false},
                  {"plain kernel + external event wait / record nodes", false, true, false},
                  {"cooperative kernel + external event wait / record nodes (the fused decode graph)", true, true, false},
                  {"two plain kernels, the second a PDL dependent", false, false, true},
                  {"two plain kernels (PDL) + external event nodes", false, true, true}};
  auto launch = [&](cudaStream_t st, bool coop, int part) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(sms), cfg.blockDim = dim3(512), cfg.dynamicSmemBytes = kSmem, cfg.stream = st;
    cudaLaunchAttribute attr[1];
    if (coop) {
      attr[0].id = cudaLaunchAttributeCooperative;
      attr[0].val.cooperative = 1;
    } else {
      attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[0].val.programmaticStreamSerializationAllowed = 1;
    }
    cfg.attrs = attr, cfg.numAttrs = coop || part == 2 ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, probe_k, sp, static_cast<const int*>(src), dst, part));
  };
  for (int round = 0; round < 2; ++round)
    for (const V& v : vs) {
      CK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
      if (v.events) CK(cudaStreamWaitEvent(cap, done, cudaEventWaitExternal));
      if (v.pdl_pair) {
        launch(cap, false, 1);
        launch(cap, false, 2);
      } else {
        launch(cap, v.coop, 0);
      }
      if (v.events) CK(cudaEventRecordWithFlags(done, cap, cudaEventRecordExternal));
      cudaGraph_t g;
      CK(cudaStreamEndCapture(cap, &g));
      cudaGraphExec_t exec;
      CK(cudaGraphInstantiate(&exec, g, 0));
      CK(cudaGraphUpload(exec, s));
      for (int i = 0; i < 10; ++i) CK(cudaGraphLaunch(exec, s));
      CK(cudaStreamSynchronize(s));
      Span init{};
      for (int i = 0; i < kReps; ++i) init.lo[i] = ~0ull, init.hi[i] = 0;
      CK(cudaMemcpy(sp, &init, sizeof(Span), cudaMemcpyHostToDevice));
      std::vector<cudaEvent_t> st(kReps), en(kReps);
      for (int i = 0; i < kReps; ++i) { CK(cudaEventCreate(&st[i])); CK(cudaEventCreate(&en[i])); }
      for (int i = 0; i < kReps; ++i) {
        CK(cudaMemsetAsync(flush, i & 0xFF, kFlush, s));
        spin_k<<<1, 1, 0, s>>>(1500000);
        CK(cudaEventRecord(st[i], s));
        CK(cudaGraphLaunch(exec, s));
        CK(cudaEventRecord(en[i], s));
      }
      CK(cudaStreamSynchronize(s));
      Span h;
      CK(cudaMemcpy(&h, sp, sizeof(Span), cudaMemcpyDeviceToHost));
      std::vector<double> ev, ker;
      for (int i = 0; i < kReps; ++i) {
        float ms;
        CK(cudaEventElapsedTime(&ms, st[i], en[i]));
        ev.push_back(ms * 1e3);
        if (h.hi[i] >= h.lo[i] && h.lo[i] != ~0ull) ker.push_back((h.hi[i] - h.lo[i]) * 1e-3);
      }
      std::sort(ev.begin(), ev.end()), std::sort(ker.begin(), ker.end());
      const double kmed = ker.empty() ? -1 : ker[ker.size() / 2];
      std::printf("round %d  %-84s events %6.2f us (min %6.2f)  kernel span %6.2f us  outside %6.2f us\n", round, v.name,
                  ev[ev.size() / 2], ev.front(), kmed, ev[ev.size() / 2] - kmed);
      for (int i = 0; i < kReps; ++i) { CK(cudaEventDestroy(st[i])); CK(cudaEventDestroy(en[i])); }
      CK(cudaGraphExecDestroy(exec));
      CK(cudaGraphDestroy(g));
    }
  return 0;
}
