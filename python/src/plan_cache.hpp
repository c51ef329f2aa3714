// Two small LRU caches that make a repeated grouped_gemm call cheap on the host.
//
//  * PlanCache: plans keyed on everything a plan is bound to — per group M, N, K, the five
//    pointers, lda/ldb/ldc, alpha (value or device pointer) — plus format, scale layout, output
//    type, backend and device. A hit skips validation and set-up entirely.
//  * CallMemo: in front of it, for torch tensors only: the identities of the argument objects
//    (held through weak references) together with each tensor's data_ptr() and shape at the
//    time. A hit re-reads only data_ptr() and shape, instead of strides, dtype and device too.
//
// Plans enqueued while their stream is being captured into a CUDA graph are pinned: the graph
// keeps reading the plan's device workspace, so they must outlive it (clear_plan_cache(pinned=
// True) drops them). Nothing is evicted during a capture (freeing device memory synchronises).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "fp4gemm/fp4gemm.hpp"
#include "tensor_view.hpp"

namespace fp4gemm::python {

using PlanPtr = std::shared_ptr<const Plan>;

struct CacheStats {
  std::size_t plans = 0, memo = 0, pinned = 0, capacity = 0;
  std::uint64_t hits = 0, misses = 0, memo_hits = 0;
};

// Hash of a word sequence (splitmix64 steps).
std::uint64_t hash_words(const std::vector<std::uint64_t>& words);

class PlanCache {
 public:
  explicit PlanCache(std::size_t capacity) : capacity_(capacity) {}

  PlanPtr find(const std::vector<std::uint64_t>& key, std::uint64_t hash);
  void insert(std::vector<std::uint64_t> key, std::uint64_t hash, PlanPtr plan, bool may_evict);
  void pin(const PlanPtr& plan);

  void clear(bool pinned);
  void set_capacity(std::size_t capacity);
  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return entries_.size(); }
  std::size_t pinned() const { return pinned_.size(); }
  void evict_to_capacity();

 private:
  struct Entry {
    std::uint64_t hash;
    std::vector<std::uint64_t> key;
    PlanPtr plan;
  };
  std::list<Entry> entries_;  // most recent first
  std::vector<PlanPtr> pinned_;
  std::size_t capacity_;
};

// One memoised call: signature words (options, alpha values, object addresses), and per object a
// weak reference, its data_ptr() and its shape.
struct MemoEntry {
  std::uint64_t hash = 0;
  std::vector<std::uint64_t> signature;
  std::vector<nb::object> refs;
  std::vector<std::uintptr_t> ptrs;
  std::vector<std::int64_t> dims;  // shapes, concatenated
  std::vector<int> ndims;
  PlanPtr plan;
  int device = -1;
};

class CallMemo {
 public:
  explicit CallMemo(std::size_t capacity) : capacity_(capacity) {}
  // The entry whose signature equals `signature`, moved to the front; nullptr when none.
  MemoEntry* find(const std::vector<std::uint64_t>& signature, std::uint64_t hash);
  void insert(MemoEntry entry, bool may_evict);
  void erase_front() { entries_.pop_front(); }
  void clear() { entries_.clear(); }
  void set_capacity(std::size_t capacity) { capacity_ = capacity; }
  void evict_to_capacity();
  std::size_t size() const { return entries_.size(); }

 private:
  std::list<MemoEntry> entries_;
  std::size_t capacity_;
};

}  // namespace fp4gemm::python
