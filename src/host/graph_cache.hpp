// Eager runs replayed from CUDA graphs: a plan's run enqueues the same few launches with arguments
// that, in a decode or training loop, repeat from call to call (the same buffers, new contents).
// GraphCache keeps an instantiated graph of those launches per key (everything the launches bake
// in: argument pointers, strides, counts, flags). A key seen for the first time runs directly and
// is remembered; its second sighting captures the launches on a private stream (thread-local
// capture mode: nothing executes) and instantiates them; later sightings are one cudaGraphLaunch.
// Least recently used keys beyond the capacity are dropped and their graphs destroyed. Replays are
// the same kernels with the same arguments as direct launches: the routing and data are read on
// the device. Used by MoeLayer (8-10 launches: 40 -> 3 us of host time per call) and MoeGemm
// (pre-pass + GEMM). Not thread-safe: the owner calls it under its run lock.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "host/core/cuda_check.hpp"

namespace fp4gemm::detail {

template <typename Key>  // Key: equality-comparable, copyable
class GraphCache {
 public:
  GraphCache() = default;
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;
  ~GraphCache() {
    for (const Entry& e : entries_)
      if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
    if (capture_stream_ != nullptr) cudaStreamDestroy(capture_stream_);
  }

  // Runs `enqueue(stream)` for `key` on `stream`, from the key's graph when it has one. Directly
  // when `capacity` <= 0 or `stream` is being captured (the launches then become the caller's
  // graph nodes). Returns whether this run was a graph replay.
  template <typename Enqueue>
  bool run(const Key& key, int capacity, cudaStream_t stream, Enqueue&& enqueue) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (capacity > 0) FP4GEMM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture), "run");
    if (capacity > 0 && capture == cudaStreamCaptureStatusNone) {
      if (const cudaGraphExec_t exec = graph_for(key, capacity, enqueue); exec != nullptr) {
        FP4GEMM_CUDA_CHECK(cudaGraphLaunch(exec, stream), "run");
        ++replays_;
        return true;
      }
    }
    enqueue(stream);
    return false;
  }

  std::size_t replays() const { return replays_.load(); }  // (readable without the run lock)

 private:
  struct Entry {
    Key key;
    cudaGraphExec_t exec = nullptr;  // null: seen once, not captured yet
    std::uint64_t last_use = 0;
  };

  // The graph for `key`, built the second time the key is seen; null: launch directly this time.
  template <typename Enqueue>
  cudaGraphExec_t graph_for(const Key& key, int capacity, Enqueue& enqueue) {
    ++uses_;
    auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
    if (it == entries_.end()) {  // first sighting: remember it, run directly
      while (!entries_.empty() && entries_.size() >= static_cast<std::size_t>(capacity)) {
        auto lru = std::min_element(entries_.begin(), entries_.end(),
                                    [](const Entry& x, const Entry& y) { return x.last_use < y.last_use; });
        if (lru->exec != nullptr) cudaGraphExecDestroy(lru->exec);
        entries_.erase(lru);
      }
      entries_.push_back(Entry{key, nullptr, uses_});
      return nullptr;
    }
    it->last_use = uses_;
    if (it->exec != nullptr) return it->exec;
    // Second sighting: capture the launches on a private stream (nothing runs) and instantiate.
    if (capture_stream_ == nullptr)
      FP4GEMM_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking), "run");
    FP4GEMM_CUDA_CHECK(cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeThreadLocal), "run");
    cudaGraph_t graph = nullptr;
    try {
      enqueue(capture_stream_);
    } catch (...) {
      (void)cudaStreamEndCapture(capture_stream_, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      throw;
    }
    FP4GEMM_CUDA_CHECK(cudaStreamEndCapture(capture_stream_, &graph), "run");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    FP4GEMM_CUDA_CHECK(err, "run");
    it->exec = exec;
    return exec;
  }

  std::vector<Entry> entries_;
  std::uint64_t uses_ = 0;
  std::atomic<std::size_t> replays_{0};
  cudaStream_t capture_stream_ = nullptr;
};

}  // namespace fp4gemm::detail
