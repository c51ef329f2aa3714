// Two small LRU caches that make a repeated grouped_gemm call cheap on the host.
//
//  * PlanCache: plans keyed on everything a plan is bound to — per group M, N, K, the five
//    pointers, lda/ldb/ldc, alpha (value or device pointer) — plus format, scale layout, output
//    type, backend and device. A hit skips validation and set-up entirely. It is bounded by a
//    count and by the device memory its plans hold (Plan::device_bytes()). The same class
//    (PlanCacheOf<MoeGemm>) caches the MoE plans of fp4gemm.moe.grouped_gemm, keyed on the
//    weights and options (moe.cpp).
//  * CallMemo: in front of it, for torch tensors only: the identities of the argument objects
//    (held through weak references) together with the state each tensor was planned with
//    (data_ptr(), shape, strides, dtype: TorchStates). A hit re-reads only that
//    state, instead of reading and validating every argument again. It refers to plans weakly:
//    the plan cache alone decides how long a plan lives.
//
// Plans enqueued while their stream is being captured into a CUDA graph are pinned: the graph
// keeps reading the plan's device workspace, so they must outlive it (clear_plan_cache(pinned=
// True) drops them). Nothing is evicted during a capture (freeing device memory synchronises).
//
// Neither class locks: Binding guards both with one mutex (see grouped.hpp), MoeBinding its own. Evicting methods
// hand the evicted entries back, so that the caller destroys them after unlocking.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "fp4gemm/fp4gemm.hpp"
#include "fp4gemm/moe.hpp"
#include "tensor_view.hpp"

namespace fp4gemm::python {

struct CacheStats {
  std::size_t plans = 0, memo = 0, pinned = 0, capacity = 0;
  std::size_t bytes = 0, max_bytes = 0;  // device memory held by the cached plans, and its bound
  std::uint64_t hits = 0, misses = 0, memo_hits = 0;
};

// Hash of a word sequence (splitmix64 steps).
std::uint64_t hash_words(const std::vector<std::uint64_t>& words);
// A float's bit pattern as a key word (keys compare bits: -0 and +0 differ, NaN matches itself).
std::uint64_t float_bits(float f);

// A plan type with device_bytes(): fp4gemm::Plan (grouped GEMM) or fp4gemm::MoeGemm.
template <class P>
class PlanCacheOf {
 public:
  using Ptr = std::shared_ptr<const P>;

  PlanCacheOf(std::size_t capacity, std::size_t max_bytes) : capacity_(capacity), max_bytes_(max_bytes) {}

  Ptr find(const std::vector<std::uint64_t>& key, std::uint64_t hash);
  // Inserts `plan` under `key` unless an entry for `key` exists already (another thread built the
  // same plan meanwhile): returns the plan now cached for `key`. Evicted plans go to `evicted`.
  Ptr insert(std::vector<std::uint64_t> key, std::uint64_t hash, Ptr plan, bool may_evict, std::vector<Ptr>& evicted);
  // Marks `plan` most recently used; false when it is no longer cached.
  bool touch(const Ptr& plan);
  void pin(const Ptr& plan);
  // Every plan held (cached or pinned), each once.
  std::vector<Ptr> all() const;

  void clear(bool pinned, std::vector<Ptr>& evicted);
  void set_limits(std::size_t capacity, std::size_t max_bytes, std::vector<Ptr>& evicted);
  std::size_t capacity() const { return capacity_; }
  std::size_t max_bytes() const { return max_bytes_; }
  std::size_t bytes() const { return bytes_; }
  std::size_t size() const { return entries_.size(); }
  std::size_t pinned() const { return pinned_.size(); }
  // Drops least recently used plans while over either bound, but never the most recent one: the
  // call that just built or used it needs it, and a cache that cannot keep one large plan would
  // rebuild it on every call.
  void evict_to_limits(std::vector<Ptr>& evicted);

 private:
  struct Entry {
    std::uint64_t hash;
    std::vector<std::uint64_t> key;
    Ptr plan;
    std::size_t bytes;
  };
  std::list<Entry> entries_;  // most recent first
  std::vector<Ptr> pinned_;
  std::size_t capacity_, max_bytes_;
  std::size_t bytes_ = 0;
};

extern template class PlanCacheOf<Plan>;
extern template class PlanCacheOf<MoeGemm>;

using PlanCache = PlanCacheOf<Plan>;
using PlanPtr = PlanCache::Ptr;
using MoePlanCache = PlanCacheOf<MoeGemm>;
using MoePlanPtr = MoePlanCache::Ptr;

// One memoised call: signature words (options, alpha values, object addresses), and per object a
// weak reference and the state it was planned with. Immutable once inserted: readers keep a
// shared_ptr to it and may use it while other threads change the memo.
struct MemoEntry {
  std::uint64_t hash = 0;
  std::vector<std::uint64_t> signature;
  std::vector<nb::object> refs;
  TorchStates states;  // one per object, as read when the plan was made
  std::weak_ptr<const Plan> plan;
  int device = -1;
};
using MemoPtr = std::shared_ptr<const MemoEntry>;

class CallMemo {
 public:
  explicit CallMemo(std::size_t capacity) : capacity_(capacity) {}
  // The entry whose signature equals `signature`, moved to the front; null when none.
  MemoPtr find(const std::vector<std::uint64_t>& signature, std::uint64_t hash);
  void insert(MemoPtr entry, bool may_evict, std::vector<MemoPtr>& evicted);
  // Removes `entry` if it is still there (by identity: another thread may have changed the list).
  void erase(const MemoPtr& entry, std::vector<MemoPtr>& evicted);
  void clear(std::vector<MemoPtr>& evicted);
  void set_capacity(std::size_t capacity, std::vector<MemoPtr>& evicted);
  std::size_t size() const { return entries_.size(); }

 private:
  void evict_to_capacity(std::vector<MemoPtr>& evicted);
  std::list<MemoPtr> entries_;  // most recent first
  std::size_t capacity_;
};

}  // namespace fp4gemm::python
