// LRU plan cache and call memo.
#include "plan_cache.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace fp4gemm::python {

std::uint64_t hash_words(const std::vector<std::uint64_t>& words) {
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ words.size();
  for (std::uint64_t w : words) {
    h += w + 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
  }
  return h;
}

std::uint64_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// ---- PlanCacheOf ----------------------------------------------------------------------------------

template <class P>
auto PlanCacheOf<P>::find(const std::vector<std::uint64_t>& key, std::uint64_t hash) -> Ptr {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->hash != hash || it->key != key) continue;
    if (it != entries_.begin()) entries_.splice(entries_.begin(), entries_, it);
    return entries_.front().plan;
  }
  return nullptr;
}

template <class P>
auto PlanCacheOf<P>::insert(std::vector<std::uint64_t> key, std::uint64_t hash, Ptr plan, bool may_evict,
                            std::vector<Ptr>& evicted) -> Ptr {
  if (Ptr existing = find(key, hash)) {
    evicted.push_back(std::move(plan));  // built twice concurrently: keep the one already cached
    return existing;
  }
  const std::size_t bytes = plan->device_bytes();
  entries_.push_front(Entry{hash, std::move(key), plan, bytes});
  bytes_ += bytes;
  if (may_evict) evict_to_limits(evicted);
  return plan;
}

template <class P>
bool PlanCacheOf<P>::touch(const Ptr& plan) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->plan != plan) continue;
    if (it != entries_.begin()) entries_.splice(entries_.begin(), entries_, it);
    return true;
  }
  return false;
}

template <class P>
void PlanCacheOf<P>::evict_to_limits(std::vector<Ptr>& evicted) {
  while (entries_.size() > 1 && (entries_.size() > capacity_ || bytes_ > max_bytes_)) {
    bytes_ -= entries_.back().bytes;
    evicted.push_back(std::move(entries_.back().plan));
    entries_.pop_back();
  }
}

template <class P>
void PlanCacheOf<P>::pin(const Ptr& plan) {
  if (std::find(pinned_.begin(), pinned_.end(), plan) == pinned_.end()) pinned_.push_back(plan);
}

template <class P>
auto PlanCacheOf<P>::all() const -> std::vector<Ptr> {
  std::vector<Ptr> out = pinned_;
  for (const Entry& e : entries_)
    if (std::find(pinned_.begin(), pinned_.end(), e.plan) == pinned_.end()) out.push_back(e.plan);
  return out;
}

template <class P>
void PlanCacheOf<P>::clear(bool pinned, std::vector<Ptr>& evicted) {
  for (Entry& e : entries_) evicted.push_back(std::move(e.plan));
  entries_.clear();
  bytes_ = 0;
  if (pinned) {
    std::move(pinned_.begin(), pinned_.end(), std::back_inserter(evicted));
    pinned_.clear();
  }
}

template <class P>
void PlanCacheOf<P>::set_limits(std::size_t capacity, std::size_t max_bytes, std::vector<Ptr>& evicted) {
  capacity_ = capacity;
  max_bytes_ = max_bytes;
  evict_to_limits(evicted);
}

template class PlanCacheOf<Plan>;
template class PlanCacheOf<MoeGemm>;

// ---- CallMemo -----------------------------------------------------------------------------------

MemoPtr CallMemo::find(const std::vector<std::uint64_t>& signature, std::uint64_t hash) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if ((*it)->hash != hash || (*it)->signature != signature) continue;
    if (it != entries_.begin()) entries_.splice(entries_.begin(), entries_, it);
    return entries_.front();
  }
  return nullptr;
}

void CallMemo::insert(MemoPtr entry, bool may_evict, std::vector<MemoPtr>& evicted) {
  // A call with this signature that found no (valid) entry replaces any there is.
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if ((*it)->hash == entry->hash && (*it)->signature == entry->signature) {
      evicted.push_back(std::move(*it));
      entries_.erase(it);
      break;
    }
  }
  entries_.push_front(std::move(entry));
  if (may_evict) evict_to_capacity(evicted);
}

void CallMemo::erase(const MemoPtr& entry, std::vector<MemoPtr>& evicted) {
  const auto it = std::find(entries_.begin(), entries_.end(), entry);
  if (it == entries_.end()) return;
  evicted.push_back(std::move(*it));
  entries_.erase(it);
}

void CallMemo::clear(std::vector<MemoPtr>& evicted) {
  std::move(entries_.begin(), entries_.end(), std::back_inserter(evicted));
  entries_.clear();
}

void CallMemo::set_capacity(std::size_t capacity, std::vector<MemoPtr>& evicted) {
  capacity_ = capacity;
  evict_to_capacity(evicted);
}

void CallMemo::evict_to_capacity(std::vector<MemoPtr>& evicted) {
  while (entries_.size() > capacity_) {
    evicted.push_back(std::move(entries_.back()));
    entries_.pop_back();
  }
}

}  // namespace fp4gemm::python
