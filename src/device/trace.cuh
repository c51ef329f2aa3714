// The fused kernel's diagnostic trace as a policy type: `Trace` is TraceOff, whose types are empty
// and whose members compile to nothing, unless the build is configured with
// cmake -DFP4GEMM_TRACE=ON; then it is TraceOn, which keeps per-CTA cycle counters of the last
// launch for `fp4gemm grouped / moe / dual` to print (docs/DESIGN.md, "Trace build"). The kernels
// call `Trace::` members only; this file holds the build's one preprocessor switch.
#pragma once

#include <cuda_runtime_api.h>

#include "device/trace_counters.hpp"

namespace fp4gemm::detail::sm90 {

// The production policy. Arguments the kernels pass are side-effect free, so nothing of a call
// survives; clock readings are taken inside the members (a clock64() argument would stay).
struct TraceOff {
  static constexpr bool kOn = false;
  struct Stamp {};                      // a clock64 reading
  // A recording thread's counters (other threads hold a null row).
  struct Row {
    __device__ __forceinline__ Stamp now() const { return {}; }
    __device__ __forceinline__ void add(int, long long) const {}
    __device__ __forceinline__ void add_since(int, Stamp) const {}
    __device__ __forceinline__ void add_between(int, Stamp, Stamp) const {}
    __device__ __forceinline__ void first_full() const {}  // a consumer's first `full` wait returned
  };
  // The CTA's start-up stamps and its shared counter rows.
  struct Cta {
    __device__ __forceinline__ void work_known(bool /*moe_schedule*/) {}
    __device__ __forceinline__ void setup_done() {}
    __device__ __forceinline__ void early_issued() {}
    __device__ __forceinline__ void no_work() {}
    __device__ __forceinline__ void start() {}
    __device__ __forceinline__ void producer_branch(bool /*recorder*/) {}
    __device__ __forceinline__ void producer_past_wait() {}
    __device__ __forceinline__ void consumer_branch(bool /*recorder*/) {}
    __device__ __forceinline__ Row row(int /*role*/, bool /*recorder*/) { return {}; }
    __device__ __forceinline__ void finish(Row, int /*role*/) {}
  };
  __device__ __forceinline__ static void schedule_step(int) {}
  __device__ __forceinline__ static void prepass_begin() {}
  __device__ __forceinline__ static void prepass_end(int /*lane*/) {}
  static void reset_prepass(cudaStream_t) {}
  static cudaError_t read_counters(unsigned long long*) { return cudaErrorNotSupported; }
  static cudaError_t read_prepass(unsigned long long*) { return cudaErrorNotSupported; }
};

#ifdef FP4GEMM_TRACE
namespace {
__device__ unsigned long long g_trace[kTraceCtas][kTraceRoles][kTraceCounters];
__device__ unsigned long long g_prepass_ns[2];  // the pre-pass's first block start, last warp end (reset per run)
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
}  // namespace

// The diagnostic policy: the counters live in shared memory (registers would spill), one recording
// thread per role, and go to g_trace at the CTA's exit.
struct TraceOn {
  static constexpr bool kOn = true;
  struct Stamp {
    long long cycles;
  };
  struct Row {
    unsigned long long* c = nullptr;
    long long c_entry = 0;
    __device__ __forceinline__ Stamp now() const { return {clock64()}; }
    __device__ __forceinline__ void add(int counter, long long v) const {
      if (c) c[counter] += v;
    }
    __device__ __forceinline__ void add_since(int counter, Stamp t0) const { add(counter, clock64() - t0.cycles); }
    __device__ __forceinline__ void add_between(int counter, Stamp t0, Stamp t1) const {
      add(counter, t1.cycles - t0.cycles);
    }
    __device__ __forceinline__ void first_full() const {
      if (c && c[kTraceFirstNs] == 0) {
        c[kTraceFirstNs] = globaltimer();
        c[kTraceCyclesFirst] = clock64() - c_entry;
      }
    }
  };
  __device__ __forceinline__ static unsigned long long (*shared_rows())[kTraceCounters] {
    __shared__ unsigned long long rows[kTraceRoles][kTraceCounters];
    return rows;
  }
  __device__ __forceinline__ static long long* schedule_steps() {
    __shared__ long long steps[4];  // clock64 after each step of the MoE schedule (thread 0)
    return steps;
  }
  struct Cta {
    unsigned long long ns_entry, ns_prologue = 0;
    long long c_entry, c_work = 0, c_setup = 0, c_issued = 0, t_start = 0;
    long long c_steps[4] = {0, 0, 0, 0};
    // at kernel entry (in the body: a mem-initializer calling device intrinsics breaks nvcc's host pass)
    __device__ __forceinline__ Cta() {
      ns_entry = globaltimer();
      c_entry = clock64();
    }
    __device__ __forceinline__ void work_known(bool moe_schedule) {
      ns_prologue = globaltimer();
      c_work = clock64() - c_entry;
      if (moe_schedule && threadIdx.x == 0)
        for (int i = 0; i < 4; ++i) c_steps[i] = schedule_steps()[i] - c_entry;
    }
    __device__ __forceinline__ void setup_done() { c_setup = clock64() - c_entry; }
    __device__ __forceinline__ void early_issued() { c_issued = clock64() - c_entry; }
    __device__ __forceinline__ void no_work() {
      if (threadIdx.x < kTraceRoles * kTraceCounters && blockIdx.x < kTraceCtas)
        g_trace[blockIdx.x][threadIdx.x / kTraceCounters][threadIdx.x % kTraceCounters] = 0;
    }
    __device__ __forceinline__ void start() {
      t_start = clock64();
      if (threadIdx.x < kTraceRoles * kTraceCounters) shared_rows()[threadIdx.x / kTraceCounters][threadIdx.x % kTraceCounters] = 0;
    }
    __device__ __forceinline__ void producer_branch(bool recorder) {
      if (!recorder) return;
      unsigned long long* r = shared_rows()[kTraceProducerRole];
      r[kTraceCyclesWork] = c_work, r[kTraceCyclesSetup] = c_setup, r[kTraceCyclesIssued] = c_issued;
      r[kTraceCyclesBranch] = clock64() - c_entry;
    }
    __device__ __forceinline__ void producer_past_wait() {
      unsigned long long* r = shared_rows()[kTraceProducerRole];
      r[kTraceFirstNs] = globaltimer();
      r[kTraceCyclesFirst] = clock64() - c_entry;
    }
    __device__ __forceinline__ void consumer_branch(bool recorder) {
      if (!recorder) return;
      unsigned long long* r = shared_rows()[0];
      r[kTraceCyclesWork] = c_work, r[kTraceCyclesBranch] = clock64() - c_entry;
      for (int i = 0; i < 4; ++i) r[kTraceCyclesStep1 + i] = c_steps[i];
    }
    __device__ __forceinline__ Row row(int role, bool recorder) { return {recorder ? shared_rows()[role] : nullptr, c_entry}; }
    __device__ __forceinline__ void finish(Row row, int role) {
      if (!row.c || blockIdx.x >= kTraceCtas) return;
      row.c[kTraceTotal] = clock64() - t_start;
      row.c[kTraceEntryNs] = ns_entry;
      row.c[kTracePrologueNs] = ns_prologue;
      row.c[kTraceExitNs] = globaltimer();
      for (int i = 0; i < kTraceCounters; ++i) g_trace[blockIdx.x][role][i] = row.c[i];
    }
  };
  __device__ __forceinline__ static void schedule_step(int i) {
    if (threadIdx.x == 0) schedule_steps()[i] = clock64();
  }
  __device__ __forceinline__ static void prepass_begin() {
    if (threadIdx.x == 0) atomicMin(&g_prepass_ns[0], globaltimer());
  }
  __device__ __forceinline__ static void prepass_end(int lane) {
    __syncwarp();
    if (lane == 0) atomicMax(&g_prepass_ns[1], globaltimer());
  }
  static void reset_prepass(cudaStream_t stream) {
    static const unsigned long long reset[2] = {~0ull, 0ull};  // (static: a captured graph replays the copy from it)
    cudaMemcpyToSymbolAsync(g_prepass_ns, reset, sizeof reset, 0, cudaMemcpyHostToDevice, stream);
  }
  // The unit's copies (the variables are per translation unit: the kernel's unit holds the
  // counters, the pre-pass's unit its stamps; kernels/sm90/fused_kernel.cuh's read_trace joins them).
  // The last launch's counters, [kTraceCtas][kTraceRoles][kTraceCounters]:
  static cudaError_t read_counters(unsigned long long* out) { return cudaMemcpyFromSymbol(out, g_trace, sizeof(g_trace)); }
  // The pre-pass's two stamps (first block start, last warp end):
  static cudaError_t read_prepass(unsigned long long* out) {
    return cudaMemcpyFromSymbol(out, g_prepass_ns, sizeof(g_prepass_ns));
  }
};
using Trace = TraceOn;
#else
using Trace = TraceOff;
#endif

}  // namespace fp4gemm::detail::sm90
