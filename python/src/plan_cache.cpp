// LRU plan cache and call memo.
#include "plan_cache.hpp"

#include <algorithm>

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

PlanPtr PlanCache::find(const std::vector<std::uint64_t>& key, std::uint64_t hash) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->hash != hash || it->key != key) continue;
    if (it != entries_.begin()) entries_.splice(entries_.begin(), entries_, it);
    return entries_.front().plan;
  }
  return nullptr;
}

void PlanCache::insert(std::vector<std::uint64_t> key, std::uint64_t hash, PlanPtr plan, bool may_evict) {
  entries_.push_front(Entry{hash, std::move(key), std::move(plan)});
  if (may_evict) evict_to_capacity();
}

void PlanCache::evict_to_capacity() {
  while (entries_.size() > capacity_) entries_.pop_back();
}

void PlanCache::pin(const PlanPtr& plan) {
  if (std::find(pinned_.begin(), pinned_.end(), plan) == pinned_.end()) pinned_.push_back(plan);
}

void PlanCache::clear(bool pinned) {
  entries_.clear();
  if (pinned) pinned_.clear();
}

void PlanCache::set_capacity(std::size_t capacity) {
  capacity_ = capacity;
  evict_to_capacity();
}

MemoEntry* CallMemo::find(const std::vector<std::uint64_t>& signature, std::uint64_t hash) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->hash != hash || it->signature != signature) continue;
    if (it != entries_.begin()) entries_.splice(entries_.begin(), entries_, it);
    return &entries_.front();
  }
  return nullptr;
}

void CallMemo::insert(MemoEntry entry, bool may_evict) {
  entries_.push_front(std::move(entry));
  if (may_evict) evict_to_capacity();
}

void CallMemo::evict_to_capacity() {
  while (entries_.size() > capacity_) entries_.pop_back();
}

}  // namespace fp4gemm::python
