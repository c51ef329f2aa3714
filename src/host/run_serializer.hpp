// Runs of one plan share its device workspace, so they must never overlap: a RunSerializer makes
// each run wait on the device for the previous one, whichever stream or host thread enqueued it.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <utility>

#include "host/core/cuda_check.hpp"

namespace fp4gemm::detail {

// Checks the caller's CUDA state before anything is enqueued on `stream`: a CUDA error already
// pending is reported as the caller's (Error "run"; nothing launched), a stream of another device
// or an unusable one as Error "stream". Returns whether `stream` is being captured into a graph.
bool check_run_preconditions(int device, cudaStream_t stream);

class RunSerializer {
 public:
  RunSerializer() = default;  // no CUDA call: a plan validates its arguments first, then calls create()
  void create() { FP4GEMM_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "plan"); }
  ~RunSerializer() {
    if (done_) cudaEventDestroy(done_);
  }
  RunSerializer(const RunSerializer&) = delete;
  RunSerializer& operator=(const RunSerializer&) = delete;

  // Enqueues `launch(stream)` after the previous run of this plan and marks its end. While the
  // stream is captured, the wait and the record are external-event nodes, so replays of the graph
  // serialise with every other run too. The mutex makes wait-launch-record atomic across threads.
  // The wait is left out when the previous run was enqueued eagerly on this same stream (stream
  // order already serialises them; ~0.3 us of host time per call) -- identified by
  // cudaStreamGetId, unique for the context's life, unlike a handle that a destroyed stream's
  // successor may reuse -- and only while no run of this plan was ever captured: a graph replay
  // records `done_` on its own stream without passing here.
  template <typename Launch>
  void run(int device, cudaStream_t stream, Launch&& launch) const {
    const bool capturing = check_run_preconditions(device, stream);
    std::lock_guard lock(mutex_);
    unsigned long long id = 0;
    if (!capturing && cudaStreamGetId(stream, &id) != cudaSuccess) {
      (void)cudaGetLastError();
      id = 0;
    }
    if (capturing) ever_captured_ = true;
    const bool ordered = !ever_captured_ && id != 0 && id == last_eager_;
    last_eager_ = 0;  // until this run is recorded
    if (!ordered)
      FP4GEMM_CUDA_CHECK(cudaStreamWaitEvent(stream, done_, capturing ? cudaEventWaitExternal : cudaEventWaitDefault),
                         "run");
    std::forward<Launch>(launch)(stream);
    FP4GEMM_CUDA_CHECK(cudaEventRecordWithFlags(done_, stream, capturing ? cudaEventRecordExternal : cudaEventRecordDefault),
                       "run");
    last_eager_ = capturing ? 0 : id;
  }

  // A plan's copies of the caller's data remade by `work(stream)` (MoeGemm::reload_scales,
  // MoeLayer::reload_weights) after every run so far and before any later one; refused with Error
  // "stream" while `stream` is being captured (replays read the copies: reload outside the graph).
  template <typename Work>
  void reload(int device, cudaStream_t stream, Work&& work) const {
    if (check_run_preconditions(device, stream))
      throw Error("stream", -1, "is being captured into a CUDA graph: reload outside the capture (replays read the "
                                "plan's copies, so they see the reloaded values)");
    after_runs(stream, std::forward<Work>(work));
  }

  // Enqueues `work(stream)` (not capturable: a synchronising check) after every run so far and
  // before any later one.
  template <typename Work>
  void after_runs(cudaStream_t stream, Work&& work) const {
    std::lock_guard lock(mutex_);
    FP4GEMM_CUDA_CHECK(cudaStreamWaitEvent(stream, done_, 0), "check");
    last_eager_ = 0;
    std::forward<Work>(work)(stream);
    FP4GEMM_CUDA_CHECK(cudaEventRecord(done_, stream), "check");
  }

 private:
  cudaEvent_t done_ = nullptr;
  mutable std::mutex mutex_;
  mutable unsigned long long last_eager_ = 0;  // cudaStreamGetId of the last run's stream if eager, else 0
  mutable bool ever_captured_ = false;
};

}  // namespace fp4gemm::detail
