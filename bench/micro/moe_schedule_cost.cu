// The MoE GEMM's device schedule (device/moe_schedule.cuh, moe_schedule_cta) timed alone, per CTA and
// per step, at the routings of issue 52's prefill cells and between them. v112's per-CTA trace had the
// schedule take 12-14.5 k cycles of every MoE GEMM's prologue (the class split, step 3, 6-9.5 k of
// it) and v112's delay probe put GEMM2's prologue on the layer's critical path at Qwen3 T 128-256
// and T 1024 (~1 us per 2 k cycles).
//
// One CTA per SM (the GEMM's shape: the plan's CTA count, the kernel's thread count, a large dynamic
// shared-memory request), offsets of a uniform random top-k routing (E 128), both GEMMs of each
// shape (GEMM1: N 2I, K H; GEMM2: N H, K I) with the MoE plan's defaults (256-row narrow tiles,
// stream-K on, the cost model's defaults). Printed per case: cycles from the CTA's entry to the end
// of each step (mean and max over the CTAs) and a digest of every record the schedule wrote (tile
// and piece records, the CTAs' first producer records, each CTA's range), so two builds of the
// schedule can be compared: same digest = the same work lists.
//
// Build and run (sm_90a; the schedule is the library's header at the include path given):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -DFP4GEMM_TRACE -Isrc -Iinclude \
//     bench/micro/moe_schedule_cost.cu -o build/moe_schedule_cost && build/moe_schedule_cost
// (FP4GEMM_TRACE: the step stamps are the trace build's, Trace::schedule_step.)
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "device/moe_schedule.cuh"
#include "micro_check.cuh"

#ifndef FP4GEMM_TRACE
#error "build with -DFP4GEMM_TRACE: the step stamps are the trace build's"
#endif

namespace msc {

using namespace fp4gemm::detail;
using namespace fp4gemm::detail::sm90;
constexpr int kThreads = KernelConfig::kThreads;

__global__ void __launch_bounds__(kThreads, 1) schedule_kernel(MoeScheduleParams a, long long* cycles, int* ranges) {
  extern __shared__ __align__(128) std::uint8_t smem[];
  const long long t0 = clock64();
  int begin = 0, end = 0, n16 = 0;
  moe_schedule_cta<kThreads>(a, *reinterpret_cast<MoeScheduleScratch*>(smem), begin, end, n16);
  if (threadIdx.x == 0) {
    const long long* st = TraceOn::schedule_steps();
    for (int i = 0; i < 4; ++i) cycles[blockIdx.x * 4 + i] = st[i] - t0;
    ranges[3 * blockIdx.x] = begin, ranges[3 * blockIdx.x + 1] = end, ranges[3 * blockIdx.x + 2] = n16;
  }
}

std::uint64_t fnv(const void* p, std::size_t n, std::uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace msc

using namespace msc;

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  int dev = 0, sms = 0, smem_optin = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s, %d SMs; %d reps per case (the last timed; cycles from each CTA's entry)\n", prop.name, sms, reps);
  const int smem = smem_optin - 1024;  // one CTA per SM
  static_assert(sizeof(MoeScheduleScratch) <= 200 * 1024, "scratch");
  CK(cudaFuncSetAttribute(schedule_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));

  struct Shape {
    const char* name;
    int hidden, inter, k;
  };
  const Shape shapes[] = {{"Qwen3", 2048, 768, 8}, {"gpt-oss", 2880, 2880, 4}};
  const int tokens[] = {1, 8, 64, 128, 256, 512, 1024, 4096};
  const int experts = 128;
  std::mt19937_64 rng(20261207);
  CUtensorMap* d_maps = nullptr;
  std::uint8_t* d_scales = nullptr;
  CK(cudaMalloc(&d_maps, experts * kMoeMapsPerExpert * sizeof(CUtensorMap)));
  CK(cudaMalloc(&d_scales, 1 << 20));
  std::printf("%-8s %5s %5s %6s %6s | %-33s | %-33s | %s\n", "shape", "T", "gemm", "n", "kb", "cycles mean: steps 1 / 2 / 3 / 4",
              "cycles max: steps 1 / 2 / 3 / 4", "digest");
  for (const Shape& sh : shapes) {
    for (const int T : tokens) {
      // A uniform top-k routing: each token's k distinct experts.
      std::vector<int> counts(experts, 0);
      for (int t = 0; t < T; ++t) {
        std::vector<int> pick;
        while (static_cast<int>(pick.size()) < sh.k) {
          const int e = static_cast<int>(rng() % experts);
          if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
        }
        for (int e : pick) ++counts[e];
      }
      std::vector<int> offsets(experts + 1, 0);
      for (int e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + counts[e];
      int* d_off = nullptr;
      CK(cudaMalloc(&d_off, offsets.size() * sizeof(int)));
      CK(cudaMemcpy(d_off, offsets.data(), offsets.size() * sizeof(int), cudaMemcpyHostToDevice));
      for (int g = 1; g <= 2; ++g) {
        const int n = g == 1 ? 2 * sh.inter : sh.hidden, kdim = g == 1 ? sh.hidden : sh.inter;
        long long bound = 0;  // tiles at most: (16-token tiles + 1) x 128-row blocks per expert
        for (int e = 0; e < experts; ++e) bound += (counts[e] / 16 + 2) * ((n + 127) / 128);
        MoeScheduleParams a{};
        a.offsets = d_off, a.experts = experts, a.capacity = T * sh.k, a.masked = 0;
        a.n = n, a.cols = kdim, a.kblocks = (kdim + 63) / 64;
        a.narrow_rows = 2 * std::min(experts, T * sh.k) * ((n + 255) / 256) > sms ? 256 : 128;
        a.num_ctas = sms, a.max_tiles = static_cast<int>(bound);
        a.stream_k = 1;
        SchedulePolicy policy;
        a.wide_fixed = static_cast<float>(policy.wide_fixed), a.wide_per_token = static_cast<float>(policy.wide_per_token);
        a.narrow_fixed = static_cast<float>(policy.narrow_fixed), a.narrow_per_token = static_cast<float>(policy.narrow_per_token);
        a.split_gain16 = moe_split_min_gain(0), a.split_gain32 = moe_split_min_gain(1);
        const std::size_t tiles_bytes = bound * sizeof(TileDesc);
        const std::size_t pieces_bytes = (bound + kMoeStreamKMaxPieces * sms) * sizeof(WorkPiece);
        const std::size_t first_bytes = sms * sizeof(ProducerPiece);
        CK(cudaMalloc(&a.tiles, tiles_bytes));
        CK(cudaMalloc(&a.pieces, pieces_bytes));
        CK(cudaMalloc(&a.first_pieces, first_bytes));
        a.weight_maps = d_maps, a.scales = d_scales, a.scale_stride = 4096;
        CK(cudaMalloc(&a.error, 64));
        CK(cudaMemset(a.error, 0, 64));
        long long* d_cycles = nullptr;
        int* d_ranges = nullptr;
        CK(cudaMalloc(&d_cycles, sms * 4 * sizeof(long long)));
        CK(cudaMalloc(&d_ranges, sms * 3 * sizeof(int)));
        for (int r = 0; r < reps; ++r) {
          CK(cudaMemset(a.tiles, 0xFF, tiles_bytes));
          CK(cudaMemset(a.pieces, 0xFF, pieces_bytes));
          CK(cudaMemset(a.first_pieces, 0xFF, first_bytes));
          schedule_kernel<<<sms, kThreads, smem>>>(a, d_cycles, d_ranges);
          CK(cudaGetLastError());
        }
        CK(cudaDeviceSynchronize());
        std::vector<long long> cyc(sms * 4);
        std::vector<int> ranges(sms * 3);
        std::vector<unsigned char> tiles(tiles_bytes), pieces(pieces_bytes), first(first_bytes);
        CK(cudaMemcpy(cyc.data(), d_cycles, cyc.size() * sizeof(long long), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ranges.data(), d_ranges, ranges.size() * sizeof(int), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(tiles.data(), a.tiles, tiles_bytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(pieces.data(), a.pieces, pieces_bytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(first.data(), a.first_pieces, first_bytes, cudaMemcpyDeviceToHost));
        int err[16];
        CK(cudaMemcpy(err, a.error, sizeof(err), cudaMemcpyDeviceToHost));
        // The first producer records hold pointers (the maps' and scales' addresses): digest their offsets.
        for (int c = 0; c < sms; ++c) {
          auto* pp = reinterpret_cast<ProducerPiece*>(first.data()) + c;
          if (ranges[3 * c] == ranges[3 * c + 1]) continue;
          pp->wmap = reinterpret_cast<const CUtensorMap*>(reinterpret_cast<std::uintptr_t>(pp->wmap) - reinterpret_cast<std::uintptr_t>(d_maps));
          pp->sblk = reinterpret_cast<const std::uint8_t*>(reinterpret_cast<std::uintptr_t>(pp->sblk) - reinterpret_cast<std::uintptr_t>(d_scales));
        }
        std::uint64_t h = fnv(ranges.data(), ranges.size() * sizeof(int));
        h = fnv(tiles.data(), tiles.size(), h);
        h = fnv(pieces.data(), pieces.size(), h);
        h = fnv(first.data(), first.size(), h);
        h = fnv(err, sizeof(err), h);
        double mean[4] = {0, 0, 0, 0};
        long long mx[4] = {0, 0, 0, 0};
        for (int c = 0; c < sms; ++c)
          for (int i = 0; i < 4; ++i) mean[i] += cyc[c * 4 + i] / static_cast<double>(sms), mx[i] = std::max(mx[i], cyc[c * 4 + i]);
        std::printf("%-8s %5d %5d %6d %6d | %7.0f %7.0f %7.0f %7.0f   | %7lld %7lld %7lld %7lld   | %016llx%s\n", sh.name, T, g, n,
                    a.kblocks, mean[0], mean[1], mean[2], mean[3], mx[0], mx[1], mx[2], mx[3],
                    static_cast<unsigned long long>(h), err[0] != 0 ? " (error word set)" : "");
        CK(cudaFree(a.tiles));
        CK(cudaFree(a.pieces));
        CK(cudaFree(a.first_pieces));
        CK(cudaFree(a.error));
        CK(cudaFree(d_cycles));
        CK(cudaFree(d_ranges));
      }
      CK(cudaFree(d_off));
    }
  }
  return 0;
}
