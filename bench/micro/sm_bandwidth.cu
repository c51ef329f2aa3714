// Per-SM streaming rate when every SM streams at once, as the decode kernels stream (one CTA per SM, 16 warps, each a
// ring of 3 stages of 1 KB copied with cp.async): is the spread of the CTAs' ends at the decode kernels' grid barrier
// (v83: ~4.8 us p10-to-max at gpt-oss-120b T 8, ~6 % of the part) a property of the SMs -- the same SMs slow in every
// run, e.g. by their GPC's size -- that a static per-SM share could even out?
//
// Phase 1: R reps of equal shares (the buffer's bytes split evenly over the CTAs, each CTA's over its warps); per rep and
// SM, the CTA's span (its first warp's start to its last warp's end, %globaltimer) and its end relative to the rep's
// first start. Reports the per-SM medians, their spread, and how stable the SMs' order is (the correlation of the
// per-SM medians of the odd and the even reps). Phase 2: shares weighted by the SMs' rates measured in phase 1
// (share proportional to 1 / median span), the CTA finding its share by %smid, against equal shares in alternating
// reps: the makespan (first start to last end) of each. Phase 3: the ring 2, 3, 4 and 6 stages deep, equal shares.
// Phase 4: the same bytes with bulk (TMA) copies per warp: 4 KB x 3 / x 2, 2 KB x 3 / x 4, 1 KB x 6 / x 3. Phase 5: the 3-stage ring with
// the chunks interleaved over the grid's warps instead of contiguous shares.
//
// Build and run (sm_90a):
//   nvcc -O2 -std=c++20 -gencode=arch=compute_90a,code=sm_90a bench/micro/sm_bandwidth.cu -o build/sm_bandwidth \
//     && build/sm_bandwidth [MiB per rep, default 274: gpt-oss-120b T 8's gate/up bytes] [reps, default 40]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>
#include <cuda_runtime.h>

#include "micro_check.cuh"

constexpr int kWarps = 16, kChunk = 1024;  // a chunk: 32 lanes x 2 x 16 B, as the decode ring's weights

__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
__device__ __forceinline__ void cp16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ void bar_init(unsigned bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst), "l"(src),
               "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned phase) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" ::"r"(bar), "r"(phase)
      : "memory");
}

struct Rec {
  unsigned long long start, end;
  unsigned sm, pad;
};

// cum[s]..cum[s + 1]: SM s's chunks (by %smid; cum has sms + 1 entries), each warp a contiguous part of them; or
// (kInterleaved) round k of warp (CTA b, warp w) reads chunk (k * grid + b) * 16 + w of all `chunks` -- the grid's warps
// read one contiguous 2 MB window at a time. One CTA per SM (grid = sms, ~100 KB of dynamic shared memory each).
template <int kStages, bool kInterleaved = false>
__global__ void __launch_bounds__(512, 1) stream_k(const uint4* __restrict__ buf, const long long* cum, long long chunks,
                                                   Rec* rec, unsigned* sink) {
  extern __shared__ __align__(16) unsigned char ring[];
  __shared__ unsigned long long t0, t1;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned s = smid();
  if (threadIdx.x == 0) t0 = ~0ull, t1 = 0;
  __syncthreads();
  atomicMin(&t0, now());
  long long first, end, step;  // this warp's chunks: first, first + step, ... below end
  if constexpr (kInterleaved) {
    first = static_cast<long long>(blockIdx.x) * kWarps + w, end = chunks, step = static_cast<long long>(gridDim.x) * kWarps;
  } else {
    const long long c0 = cum[s], C = cum[s + 1] - c0;
    first = c0 + C * w / kWarps, end = c0 + C * (w + 1) / kWarps, step = 1;
  }
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(ring)) + w * kStages * kChunk + 16 * lane;
  const unsigned char* src = reinterpret_cast<const unsigned char*>(buf);
  auto copy = [&](unsigned dst, long long c) {
    if (c < end) cp16(dst, src + c * kChunk + 16 * lane), cp16(dst + 512, src + c * kChunk + 512 + 16 * lane);
    asm volatile("cp.async.commit_group;" ::: "memory");  // (a group per stage, empty past the share)
  };
  unsigned acc = 0;
  long long c = first;
  for (int d = 0; d < kStages; ++d, c += step) copy(base + d * kChunk, c);
  int so = 0;
  for (long long m = first; m < end; m += step, c += step) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 1) : "memory");
    const unsigned char* mine = ring + w * kStages * kChunk + 16 * lane + so;
    const uint4 v0 = *reinterpret_cast<const uint4*>(mine), v1 = *reinterpret_cast<const uint4*>(mine + 512);
    acc ^= v0.x ^ v0.y ^ v0.z ^ v0.w ^ v1.x ^ v1.y ^ v1.z ^ v1.w;
    copy(base + so, c);
    so = so + kChunk == kStages * kChunk ? 0 : so + kChunk;
  }
  atomicMax(&t1, now());
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
  __syncthreads();
  if (threadIdx.x == 0) rec[blockIdx.x] = Rec{t0, t1, s, 0};
}

// The same stream with bulk copies (TMA, cp.async.bulk): lane 0 of each warp copies kBulk bytes per stage, kStages deep,
// completion on one mbarrier per stage; cum counts kBulk-byte chunks here.
template <int kStages, int kBulk>
__global__ void __launch_bounds__(512, 1) bulk_k(const uint4* __restrict__ buf, const long long* cum, Rec* rec,
                                                 unsigned* sink) {
  extern __shared__ __align__(16) unsigned char ring[];
  __shared__ __align__(8) unsigned long long bars[kWarps * kStages];
  __shared__ unsigned long long t0, t1;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned s = smid();
  if (threadIdx.x == 0) t0 = ~0ull, t1 = 0;
  const unsigned bar0 = static_cast<unsigned>(__cvta_generic_to_shared(&bars[w * kStages]));
  const unsigned ring0 = static_cast<unsigned>(__cvta_generic_to_shared(ring)) + w * kStages * kBulk;
  if (lane == 0)
    for (int d = 0; d < kStages; ++d) bar_init(bar0 + 8 * d);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  atomicMin(&t0, now());
  const long long c0 = cum[s], c1 = cum[s + 1], C = c1 - c0;
  const long long w0 = c0 + C * w / kWarps, w1 = c0 + C * (w + 1) / kWarps;
  const unsigned char* src = reinterpret_cast<const unsigned char*>(buf);
  long long c = w0;
  if (lane == 0)
    for (int d = 0; d < kStages && c < w1; ++d, ++c) bulk_copy(ring0 + d * kBulk, src + c * kBulk, kBulk, bar0 + 8 * d);
  c = w0 + kStages;
  unsigned acc = 0, phase = 0;
  int st = 0;
  for (long long m = w0; m < w1; ++m) {
    bar_wait(bar0 + 8 * st, phase);
    const unsigned char* mine = ring + w * kStages * kBulk + st * kBulk;
#pragma unroll
    for (int i = 0; i < kBulk / 512; ++i) {
      const uint4 v = *reinterpret_cast<const uint4*>(mine + i * 512 + 16 * lane);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    __syncwarp();
    if (lane == 0 && c < w1) bulk_copy(ring0 + st * kBulk, src + c * kBulk, kBulk, bar0 + 8 * st);
    ++c;
    if (++st == kStages) st = 0, phase ^= 1u;
  }
  atomicMax(&t1, now());
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
  __syncthreads();
  if (threadIdx.x == 0) rec[blockIdx.x] = Rec{t0, t1, s, 0};
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
static double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}
static double corr(const std::vector<double>& x, const std::vector<double>& y) {
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / x.size(), my = std::accumulate(y.begin(), y.end(), 0.0) / y.size();
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx), syy += (y[i] - my) * (y[i] - my);
  return sxy / std::sqrt(sxx * syy);
}

int main(int argc, char** argv) {
  const long long mib = argc > 1 ? std::atoll(argv[1]) : 274;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 40;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  const long long chunks = mib * (1ll << 20) / kChunk;
  std::printf("%s: %d SMs, %lld MiB per rep (%lld chunks of 1 KB), %d reps per phase; one CTA per SM, 16 warps, "
              "a 3-stage cp.async ring each\n", prop.name, sms, mib, chunks, reps);
  uint4* buf;
  CK(cudaMalloc(&buf, chunks * kChunk));
  CK(cudaMemset(buf, 0x5a, chunks * kChunk));
  void* flush;
  const size_t flush_bytes = 256ull << 20;
  CK(cudaMalloc(&flush, flush_bytes));
  long long* cum;
  Rec* rec;
  unsigned* sink;
  CK(cudaMalloc(&cum, sizeof(long long) * (sms + 1)));
  CK(cudaMalloc(&rec, sizeof(Rec) * sms));
  CK(cudaMalloc(&sink, 4));
  const int smem = 100 * 1024;
  CK(cudaFuncSetAttribute(stream_k<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(stream_k<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(stream_k<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(stream_k<6>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(stream_k<3, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  auto set_shares = [&](const std::vector<double>& weight) {  // weight per smid
    std::vector<long long> c(sms + 1, 0);
    const double total = std::accumulate(weight.begin(), weight.end(), 0.0);
    double run = 0;
    for (int s = 0; s < sms; ++s) run += weight[s], c[s + 1] = static_cast<long long>(std::llround(run / total * chunks));
    c[sms] = chunks;
    CK(cudaMemcpy(cum, c.data(), sizeof(long long) * (sms + 1), cudaMemcpyHostToDevice));
  };
  std::vector<Rec> h(sms);
  // one rep of a launch (after the L2 flush): its makespan in us; per SM its span and its end (from the first start)
  auto timed = [&](auto launch, std::vector<double>* span_by_sm = nullptr, std::vector<double>* end_by_sm = nullptr) {
    CK(cudaMemsetAsync(flush, 0, flush_bytes));
    launch();
    CK(cudaGetLastError());
    CK(cudaMemcpy(h.data(), rec, sizeof(Rec) * sms, cudaMemcpyDeviceToHost));
    unsigned long long lo = ~0ull, hi = 0;
    std::vector<int> seen(sms, 0);
    for (const Rec& r : h) lo = std::min(lo, r.start), hi = std::max(hi, r.end), seen[r.sm]++;
    for (int s = 0; s < sms; ++s)
      if (seen[s] != 1) std::printf("warning: SM %d ran %d CTAs\n", s, seen[s]);
    for (const Rec& r : h) {
      if (span_by_sm) span_by_sm[r.sm].push_back((r.end - r.start) * 1e-3);
      if (end_by_sm) end_by_sm[r.sm].push_back((r.end - lo) * 1e-3);
    }
    return (hi - lo) * 1e-3;
  };
  auto run = [&](std::vector<double>* span_by_sm, std::vector<double>* end_by_sm, int stages = 3) {
    return timed([&] {
      if (stages == 2) stream_k<2><<<sms, 512, smem>>>(buf, cum, chunks, rec, sink);
      else if (stages == 4) stream_k<4><<<sms, 512, smem>>>(buf, cum, chunks, rec, sink);
      else if (stages == 6) stream_k<6><<<sms, 512, smem>>>(buf, cum, chunks, rec, sink);
      else stream_k<3><<<sms, 512, smem>>>(buf, cum, chunks, rec, sink);
    }, span_by_sm, end_by_sm);
  };
  std::vector<double> equal(sms, 1.0);
  set_shares(equal);
  for (int i = 0; i < 3; ++i) run(nullptr, nullptr);  // warm-up
  std::vector<std::vector<double>> span_odd(sms), span_even(sms), end_all(sms);
  std::vector<double> mk1;
  for (int r = 0; r < reps; ++r) mk1.push_back(run((r % 2 ? span_odd : span_even).data(), end_all.data()));
  std::vector<double> med(sms), med_odd(sms), med_even(sms), med_end(sms);
  for (int s = 0; s < sms; ++s) {
    std::vector<double> all = span_odd[s];
    all.insert(all.end(), span_even[s].begin(), span_even[s].end());
    med[s] = median(all), med_odd[s] = median(span_odd[s]), med_even[s] = median(span_even[s]), med_end[s] = median(end_all[s]);
  }
  std::printf("phase 1, equal shares: makespan median %.2f us (p10 %.2f, p90 %.2f) = %.3f TB/s\n", median(mk1), pct(mk1, 0.1),
              pct(mk1, 0.9), chunks * kChunk / (median(mk1) * 1e-6) / 1e12);
  std::printf("  per-SM median span: min %.2f / p10 %.2f / median %.2f / p90 %.2f / max %.2f us; per-SM median end: p10 %.2f / "
              "median %.2f / max %.2f\n", pct(med, 0), pct(med, 0.1), pct(med, 0.5), pct(med, 0.9), pct(med, 1), pct(med_end, 0.1),
              pct(med_end, 0.5), pct(med_end, 1));
  std::printf("  stability: correlation of per-SM median spans, odd vs even reps: %.3f\n", corr(med_odd, med_even));
  std::printf("  per-SM median span by %%smid (us):");
  for (int s = 0; s < sms; ++s) std::printf("%s%.1f", s % 16 ? " " : "\n    ", med[s]);
  std::printf("\n");
  // phase 2: shares weighted by the SMs' rates (1 / span) against equal shares, alternating
  std::vector<double> rate(sms);
  for (int s = 0; s < sms; ++s) rate[s] = 1.0 / med[s];
  std::vector<double> mk_eq, mk_w;
  for (int r = 0; r < 2 * reps; ++r) {
    set_shares(r % 2 ? rate : equal);
    (r % 2 ? mk_w : mk_eq).push_back(run(nullptr, nullptr));
  }
  std::printf("phase 2, alternating: equal shares makespan median %.2f us (p10 %.2f, p90 %.2f); shares by the measured rates "
              "%.2f us (p10 %.2f, p90 %.2f): %.3f\n", median(mk_eq), pct(mk_eq, 0.1), pct(mk_eq, 0.9), median(mk_w),
              pct(mk_w, 0.1), pct(mk_w, 0.9), median(mk_w) / median(mk_eq));
  // phase 3: the ring's depth (bytes in flight per SM: 16 warps x stages x 1 KB), equal shares, interleaved
  set_shares(equal);
  const int depths[] = {2, 3, 4, 6};
  std::vector<double> mk_d[4];
  for (int r = 0; r < reps; ++r)
    for (int i = 0; i < 4; ++i) mk_d[i].push_back(run(nullptr, nullptr, depths[i]));
  std::printf("phase 3, ring depth (equal shares), makespan median:");
  for (int i = 0; i < 4; ++i)
    std::printf(" %d stages %.2f us (%.3f TB/s)%s", depths[i], median(mk_d[i]), chunks * kChunk / (median(mk_d[i]) * 1e-6) / 1e12,
                i < 3 ? ";" : "\n");
  // phase 4: bulk copies (TMA) per warp in several sizes and depths (against
  // the cp.async ring's 3 KB), equal shares
  const long long bytes = chunks * kChunk;
  auto set_bulk = [&](int bulk) {
    std::vector<long long> c(sms + 1);
    const long long n = bytes / bulk;
    for (int s2 = 0; s2 <= sms; ++s2) c[s2] = n * s2 / sms;
    CK(cudaMemcpy(cum, c.data(), sizeof(long long) * (sms + 1), cudaMemcpyHostToDevice));
    return n * bulk;
  };
  struct BulkCfg {
    void (*k)(const uint4*, const long long*, Rec*, unsigned*);
    int stages, bulk;
  };
  const BulkCfg cfgs[] = {{bulk_k<3, 4096>, 3, 4096}, {bulk_k<2, 4096>, 2, 4096}, {bulk_k<3, 2048>, 3, 2048},
                          {bulk_k<6, 1024>, 6, 1024}, {bulk_k<3, 1024>, 3, 1024}, {bulk_k<4, 2048>, 4, 2048}};
  for (const BulkCfg& g : cfgs) {
    const int dyn = kWarps * g.stages * g.bulk;
    CK(cudaFuncSetAttribute(g.k, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
    const long long b = set_bulk(g.bulk);
    auto once = [&] { return timed([&] { g.k<<<sms, 512, dyn>>>(buf, cum, rec, sink); }); };
    std::vector<double> mk;
    once();
    for (int r = 0; r < reps; ++r) mk.push_back(once());
    std::printf("phase 4, bulk copies %d B x %d stages (%d KB per CTA): makespan median %.2f us (p10 %.2f, p90 %.2f) = %.3f TB/s\n",
                g.bulk, g.stages, dyn / 1024, median(mk), pct(mk, 0.1), pct(mk, 0.9), b / (median(mk) * 1e-6) / 1e12);
  }
  // phase 5: the 3-stage ring with the chunks interleaved over the grid's warps (one 2 MB window at a time)
  {
    std::vector<double> mk_i, mk_c;
    auto once = [&](bool inter) {
      return timed([&] {
        if (inter) stream_k<3, true><<<sms, 512, smem>>>(buf, cum, chunks, rec, sink);
        else stream_k<3><<<sms, 512, smem>>>(buf, cum, chunks, rec, sink);
      });
    };
    set_shares(equal);
    for (int r = 0; r < 2 * reps; ++r) (r % 2 ? mk_i : mk_c).push_back(once(r % 2 == 1));
    std::printf("phase 5, 3-stage ring: contiguous shares %.2f us (%.3f TB/s); chunks interleaved over the grid %.2f us "
                "(%.3f TB/s)\n", median(mk_c), bytes / (median(mk_c) * 1e-6) / 1e12, median(mk_i), bytes / (median(mk_i) * 1e-6) / 1e12);
  }
  return 0;
}
