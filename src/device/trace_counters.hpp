// The fused kernel's trace counters as plain C++ (the host plans and the trace report read them;
// the kernels' policy types are in device/trace.cuh, which includes this file).
#pragma once

namespace fp4gemm::detail::sm90 {

// Counters per CTA and role (consumer warpgroup 0, 1, weight producer).
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
inline constexpr int kTraceCtas = 256, kTraceRoles = 3, kTraceProducerRole = 2;

// Whether this is a trace build (cmake -DFP4GEMM_TRACE=ON), and the dynamic shared memory the
// plans give up for the trace policy's static counters (TraceOn's shared rows).
#ifdef FP4GEMM_TRACE
inline constexpr bool kTraceBuild = true;
inline constexpr int kTraceSmemBytes = 4096;  // the static counters plus their alignment (192 B alone failed the launch)
#else
inline constexpr bool kTraceBuild = false;
inline constexpr int kTraceSmemBytes = 0;
#endif

}  // namespace fp4gemm::detail::sm90
