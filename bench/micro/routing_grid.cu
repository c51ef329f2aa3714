// The layer's routing (align_routing with row_of, kernels/routing.cu) timed as a layer's CUDA graph runs it: the
// single block (the library's thread count, and 1024 threads) against the grid form on 4-64 CTAs, at the routings
// of issue 52's prefill cells and between them (gpt-oss-120b top-4 / Qwen3-30B-A3B top-8, E 128, T 128-4096). ncu put the routing at 10.8 µs (gpt-oss T 512,
// one block, 2048 ids) and 16.7 µs (Qwen3 T 512, the grid form's three launches at 1024 ids per CTA) on an H100
// (docs/PERF.md v99); the single block is bound by its SM's scattered stores (~1.9 ns per id, routing.cu), so more
// CTAs should place faster, against one more launch and a longer scan.
//
// Each variant's outputs (offsets, gather, row_of) are compared with the single block's, byte for byte. Time: a
// graph of 20 routings back to back, replayed 50 times; µs per routing (the launches' gaps included, as in a layer's
// graph, where the routing sits between other kernels).
//
// Build and run (sm_90a; includes the library's routing.cu, so its kernels are this unit's):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/micro/routing_grid.cu \
//     -o build/routing_grid && build/routing_grid
#include "../../src/kernels/routing.cu"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "micro_check.cuh"

namespace {

using namespace fp4gemm;

struct Bufs {
  int *ids, *offsets, *gather, *row_of, *scratch;
  long long n;
  int k, experts;
};

// v: 0 the library's rule for the single block (256 threads up to 2048 ids, 1024 above); -1 the single block of
// 1024 threads whatever the count; > 0 the grid form's three launches over v CTAs (at most kRoutingGridMaxCtas).
void route(const Bufs& b, int v, cudaStream_t s) {
  const std::size_t buckets = static_cast<std::size_t>(b.experts) + 2;
  if (v == 0) {
    CK(detail::launch_align_routing_kernel(b.ids, false, b.n, b.k, b.experts, b.offsets, b.gather, nullptr, b.row_of,
                                           nullptr, s, nullptr));
    return;
  }
  if (v < 0) {
    align_routing_kernel<int, 1024><<<1, 1024, 32 * buckets * sizeof(int), s>>>(b.ids, b.n, b.k, b.experts, b.offsets,
                                                                              b.gather, nullptr, b.row_of, nullptr);
    CK(cudaGetLastError());
    return;
  }
  constexpr int kThreads = 256;
  const int ctas = std::min(detail::kRoutingGridMaxCtas, v);
  routing_grid_count<int, kThreads><<<ctas, kThreads, buckets * sizeof(int), s>>>(b.ids, b.n, b.k, b.experts, b.scratch,
                                                                                 true, nullptr);
  routing_grid_scan<1024><<<1, 1024, 0, s>>>(b.scratch, ctas, b.experts, b.offsets);
  routing_grid_place<int, kThreads><<<ctas, kThreads, (kThreads / 32) * buckets * sizeof(int), s>>>(
      b.ids, b.n, b.k, b.experts, b.scratch, b.gather, nullptr, b.row_of, nullptr);
  CK(cudaGetLastError());
}

std::vector<int> fetch(const int* d, long long n) {
  std::vector<int> h(n);
  CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

int main() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::mt19937_64 rng(20261206);
  const int experts = 128;
  struct Shape {
    const char* name;
    int tokens, k;
  };
  const Shape shapes[] = {{"gpt-oss-120b T 128", 128, 4},   {"Qwen3-30B-A3B T 128", 128, 8},
                          {"gpt-oss-120b T 512", 512, 4},   {"Qwen3-30B-A3B T 512", 512, 8},
                          {"gpt-oss-120b T 1024", 1024, 4}, {"Qwen3-30B-A3B T 1024", 1024, 8},
                          {"gpt-oss-120b T 2048", 2048, 4}, {"Qwen3-30B-A3B T 2048", 2048, 8},
                          {"gpt-oss-120b T 4096", 4096, 4}, {"Qwen3-30B-A3B T 4096", 4096, 8}};
  const int variants[] = {0, -1, 4, 8, 12, 16, 24, 32, 48, 64};
  std::printf("routing with row_of, E %d, uniform distinct ids; us per routing (graph of 20, best of 50 replays)\n",
              experts);
  std::printf("%-22s %6s |", "shape", "ids");
  for (int p : variants)
    p == 0 ? std::printf("  one block |") : p < 0 ? std::printf(" 1 x 1024 thr |") : std::printf(" %3d CTAs     |", p);
  std::printf("\n");
  for (const Shape& sh : shapes) {
    const long long n = static_cast<long long>(sh.tokens) * sh.k;
    std::vector<int> ids(n);
    std::vector<int> perm(experts);
    for (int t = 0; t < sh.tokens; ++t) {  // k distinct experts per token
      for (int e = 0; e < experts; ++e) perm[e] = e;
      for (int j = 0; j < sh.k; ++j) {
        std::swap(perm[j], perm[j + rng() % (experts - j)]);
        ids[t * sh.k + j] = perm[j];
      }
    }
    Bufs b{};
    b.n = n, b.k = sh.k, b.experts = experts;
    CK(cudaMalloc(&b.ids, n * 4));
    CK(cudaMalloc(&b.offsets, (experts + 1) * 4));
    CK(cudaMalloc(&b.gather, n * 4));
    CK(cudaMalloc(&b.row_of, n * 4));
    CK(cudaMalloc(&b.scratch, detail::routing_grid_scratch_ints(experts) * 4));
    CK(cudaMemcpy(b.ids, ids.data(), n * 4, cudaMemcpyHostToDevice));
    std::vector<int> ref_off, ref_gat, ref_row;
    std::printf("%-22s %6lld |", sh.name, n);
    for (int p : variants) {
      CK(cudaMemset(b.offsets, 0xFF, (experts + 1) * 4));
      CK(cudaMemset(b.gather, 0xFF, n * 4));
      CK(cudaMemset(b.row_of, 0xFF, n * 4));
      route(b, p, s);
      CK(cudaStreamSynchronize(s));
      const auto off = fetch(b.offsets, experts + 1), gat = fetch(b.gather, n), row = fetch(b.row_of, n);
      bool same = true;
      if (p == 0) {
        ref_off = off, ref_gat = gat, ref_row = row;
      } else {
        same = off == ref_off && gat == ref_gat && row == ref_row;
      }
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < 20; ++i) route(b, p, s);
      CK(cudaStreamEndCapture(s, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      float best = 1e30f;
      for (int r = 0; r < 50; ++r) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        best = std::min(best, ms);
      }
      if (p == 0) std::printf(" %9.2f  |", best * 1e3f / 20);
      else std::printf(" %9.2f %s |", best * 1e3f / 20, same ? "   " : "BAD");
      std::fflush(stdout);
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
      CK(cudaEventDestroy(e0));
      CK(cudaEventDestroy(e1));
    }
    std::printf("\n");
    for (void* q : {static_cast<void*>(b.ids), static_cast<void*>(b.offsets), static_cast<void*>(b.gather),
                    static_cast<void*>(b.row_of), static_cast<void*>(b.scratch)})
      CK(cudaFree(q));
  }
  return 0;
}
