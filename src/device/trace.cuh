// The fused kernel's diagnostic trace (cmake -DFP4GEMM_TRACE=ON): per-CTA cycle counters that
// compile to nothing in a normal build.
#pragma once

namespace fp4gemm::detail::sm90 {

// ---- diagnostic build only (cmake -DFP4GEMM_TRACE=ON; docs/PERF.md): cycle counters of the last
// launch per CTA and role (consumer warpgroup 0, 1, weight producer), read by `fp4gemm grouped`.
enum TraceCounter : int {
  kTraceTotal,      // kernel body, from barrier set-up to exit
  kTraceMainloop,   // consumers: the k-block loops (to the last wgmma retired); producer: its loop
  kTraceBarrier,    // consumers: waiting on `full`; producer: waiting on `empty`
  kTraceHandoff,    // split-K: writing partials, or waiting for and adding them
  kTraceEpilogue,   // scaling, transposing and storing C
  kTraceKblocks,    // k-blocks processed
  kTracePieces,     // work pieces processed
  kTraceTokenKblocks,  // sum over pieces of k-blocks x wgmma N x halves (weights the shape mix)
  kTraceIssue,      // producer: from its `empty` wait to the last load issued
  kTraceEntryNs,    // %globaltimer (ns) at kernel entry
  kTracePrologueNs, // %globaltimer (ns) when the CTA has its work (the MoE plan's schedule prologue done)
  // Cycles (clock64) from kernel entry to: the CTA's work known (roles 0 and 2); the producer's
  // barriers set up / its early weight loads issued (role 2); past setmaxnreg (roles 0 and 2);
  // past the pre-pass wait (role 2) / the first full stage (role 0).
  kTraceCyclesWork,
  kTraceCyclesSetup,
  kTraceCyclesIssued,
  kTraceCyclesBranch,
  kTraceCyclesFirst,
  kTraceCyclesStep1,  // the MoE schedule's steps 1-4 done (role 0; device/moe_schedule.cuh)
  kTraceCyclesStep2,
  kTraceCyclesStep3,
  kTraceCyclesStep4,
  kTraceFirstNs,    // consumers: when the first `full` wait returned; producer: when the pre-pass wait returned
  kTraceExitNs,     // at exit
  kTraceCounters
};
inline constexpr int kTraceCtas = 256, kTraceRoles = 3;
// Dynamic shared memory the plan gives up in a trace build: the static counters plus their
// alignment (the 192 bytes alone were not enough for the launch).
inline constexpr int kTraceSmemBytes = 4096;
#ifdef FP4GEMM_TRACE
namespace {
__device__ unsigned long long g_trace[kTraceCtas][kTraceRoles][kTraceCounters];
__device__ unsigned long long g_prepass_ns[2];  // the pre-pass's first block start, last warp end (reset per run)
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
}
#define FP4GEMM_TRACE_DO(...) __VA_ARGS__
// The counters live in shared memory (registers would spill), one recording thread per role.
#define FP4GEMM_TRACE_ADD(row, c, v) \
  do {                               \
    if (row) (row)[c] += (v);        \
  } while (0)
#else
#define FP4GEMM_TRACE_DO(...)
#endif

}  // namespace fp4gemm::detail::sm90
