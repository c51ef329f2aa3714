// Host cost of replaying the MoE layer's cached CUDA graph (issue 21's <= 10 us per call), by
// what the graph and the call around it contain. Graphs of 8 tiny kernels (the layer's launches:
// routing, quantise, pre-pass + GEMM, quantise, pre-pass + GEMM, combine) with programmatic
// dependent launch on the GEMMs, and optionally:
//   * the MoeGemm run serialisers' external event wait / record nodes inside the graph (2 x 2),
//   * the layer's own serialiser around the launch (cudaStreamWaitEvent + cudaEventRecord on the
//     host), or the same wait / record as external event nodes inside the graph instead,
//   * the validation calls of a run (cudaGetLastError, cudaStreamIsCapturing, cudaStreamGetDevice).
// Host time per call, 2000 calls enqueued back to back (the kernels are empty, so the GPU keeps
// up; the time is the host's), best of 5 rounds.
//
// Build and run (sm_90a):
//   nvcc -O2 -std=c++20 -gencode=arch=compute_90a,code=sm_90a bench/micro/graph_launch.cu -o build/graph_launch \
//     && build/graph_launch
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cuda_runtime.h>

#include "micro_check.cuh"

__global__ void tiny_k(int* p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0 && p) p[blockIdx.x] += 1;
  asm volatile("griddepcontrol.launch_dependents;");
}

static void launch(cudaStream_t s, int* buf, bool pdl) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(132), cfg.blockDim = dim3(128), cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr, cfg.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, tiny_k, buf));
}

struct Variant {
  const char* name;
  bool inner_events;  // MoeGemm serialisers' wait/record nodes in the graph
  bool outer_host;    // layer serialiser: host-side wait + record around the launch
  bool outer_nodes;   // layer serialiser: as event nodes inside the graph
  bool checks;        // the run's validation calls
  int kernels;
  bool legacy = false;  // launch on the legacy default stream (torch's default) instead of a non-blocking one
};

int main() {
  int* buf;
  CK(cudaMalloc(&buf, 1 << 20));
  CK(cudaMemset(buf, 0, 1 << 20));
  cudaStream_t s, cap;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
  cudaEvent_t outer, g1, g2;
  for (cudaEvent_t* e : {&outer, &g1, &g2}) CK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  const Variant vs[] = {
      {"8 kernels, nothing else", false, false, false, false, 8},
      {"1 kernel, nothing else", false, false, false, false, 1},
      {"8 kernels + inner event nodes (today's graph)", true, false, false, false, 8},
      {"8 kernels + inner nodes + host wait/record + checks (today)", true, true, false, true, 8},
      {"8 kernels + host wait/record + checks", false, true, false, true, 8},
      {"8 kernels + outer event nodes + checks", false, false, true, true, 8},
      {"8 kernels + checks", false, false, false, true, 8},
      {"today's, on the legacy default stream", true, true, false, true, 8, true},
      {"8 kernels + host wait/record + checks, legacy default stream", false, true, false, true, 8, true},
  };
  for (const Variant& v : vs) {
    CK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
    if (v.outer_nodes) CK(cudaStreamWaitEvent(cap, outer, cudaEventWaitExternal));
    for (int i = 0; i < v.kernels; ++i) {
      const bool gemm = v.kernels == 8 && (i == 2 || i == 3 || i == 5 || i == 6);
      if (v.inner_events && (i == 2 || i == 5)) CK(cudaStreamWaitEvent(cap, i == 2 ? g1 : g2, cudaEventWaitExternal));
      launch(cap, buf, gemm && (i == 3 || i == 6));
      if (v.inner_events && (i == 3 || i == 6))
        CK(cudaEventRecordWithFlags(i == 3 ? g1 : g2, cap, cudaEventRecordExternal));
    }
    if (v.outer_nodes) CK(cudaEventRecordWithFlags(outer, cap, cudaEventRecordExternal));
    cudaGraph_t g;
    CK(cudaStreamEndCapture(cap, &g));
    cudaGraphExec_t exec;
    CK(cudaGraphInstantiate(&exec, g, 0));
    const cudaStream_t run_s = v.legacy ? cudaStreamLegacy : s;
    CK(cudaGraphUpload(exec, run_s));
    auto call = [&] {
      const cudaStream_t s = run_s;
      if (v.checks) {
        CK(cudaGetLastError());
        cudaStreamCaptureStatus st;
        CK(cudaStreamIsCapturing(s, &st));
        int d;
        CK(cudaStreamGetDevice(s, &d));
        CK(cudaStreamIsCapturing(s, &st));
        CK(cudaGetDevice(&d));
      }
      if (v.outer_host) CK(cudaStreamWaitEvent(s, outer, 0));
      CK(cudaGraphLaunch(exec, s));
      if (v.outer_host) CK(cudaEventRecord(outer, s));
    };
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      for (int i = 0; i < 50; ++i) call();
      CK(cudaDeviceSynchronize());
      constexpr int kCalls = 2000;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i) call();
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kCalls;
      CK(cudaDeviceSynchronize());
      best = std::min(best, us);
    }
    std::printf("%-64s %6.2f us per call\n", v.name, best);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(g));
  }
  // The graph launch alone against launching the 8 kernels directly.
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    CK(cudaStreamSynchronize(s));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 500; ++i)
      for (int k = 0; k < 8; ++k) launch(s, buf, k == 3 || k == 6);
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 500);
  }
  CK(cudaStreamSynchronize(s));
  std::printf("%-64s %6.2f us per call\n", "8 direct launches (no graph)", best);
  return 0;
}
