// GPU tier: fp4gemm::align_routing (top-k ids -> expert offsets, gather index, order) against a
// CPU stable sort, every element, poisoned outputs and guard bands; int32 and int64 ids; ids
// outside [0, E); E from 1 to 512; T * k from 0 to 131072; graph capture with changing ids.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "fp4gemm/moe.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

#define REQUIRE_GPU() \
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device: align_routing runs on the GPU"

struct Expected {
  std::vector<int> offsets, gather;
  std::vector<std::int64_t> order;
};

// The contract: rows sorted by (bucket, index); bucket -1 for ids < 0, e for expert e, E for ids >= E.
Expected cpu_align(const std::vector<std::int64_t>& ids, int k, int experts) {
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  auto bucket = [&](std::int64_t id) { return id < 0 ? -1 : id >= experts ? experts : static_cast<int>(id); };
  std::vector<std::int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) { return bucket(ids[a]) < bucket(ids[b]); });
  Expected e;
  e.offsets.resize(experts + 1);
  for (int x = 0; x <= experts; ++x)
    e.offsets[x] = static_cast<int>(std::count_if(ids.begin(), ids.end(), [&](std::int64_t id) { return id < x; }));
  e.gather.resize(n);
  e.order = idx;
  for (std::int64_t r = 0; r < n; ++r) e.gather[r] = static_cast<int>(idx[r] / k);
  return e;
}

constexpr std::size_t kGuard = 256;  // bytes of 0xA5 before and after every output

// Runs align_routing on `ids` (as int32 or int64) into poisoned, guarded buffers; checks every
// element and the guards. `graph`: captured once, replayed after the ids are uploaded.
void check_routing(const std::vector<std::int64_t>& ids, int k, int experts, bool int64, bool with_order) {
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  const std::size_t id_bytes = n * (int64 ? 8 : 4);
  DeviceBuffer d_ids(std::max<std::size_t>(id_bytes, 16));
  if (int64) {
    FP4GEMM_TEST_CUDA(cudaMemcpy(d_ids.get(), ids.data(), id_bytes, cudaMemcpyHostToDevice));
  } else {
    std::vector<int> ids32(ids.begin(), ids.end());
    FP4GEMM_TEST_CUDA(cudaMemcpy(d_ids.get(), ids32.data(), id_bytes, cudaMemcpyHostToDevice));
  }
  const std::size_t off_bytes = (experts + 1) * 4, gat_bytes = n * 4, ord_bytes = n * 8;
  DeviceBuffer d_off(off_bytes + 2 * kGuard), d_gat(gat_bytes + 2 * kGuard), d_ord(ord_bytes + 2 * kGuard);
  // Poison: 0xA5 guards, 0xFF... payload (-1: no valid offset, row or index is negative).
  auto poison = [](const DeviceBuffer& b, std::size_t bytes) {
    FP4GEMM_TEST_CUDA(cudaMemset(b.get(), 0xA5, bytes + 2 * kGuard));
    FP4GEMM_TEST_CUDA(cudaMemset(b.get() + kGuard, 0xFF, bytes));
  };
  poison(d_off, off_bytes), poison(d_gat, gat_bytes), poison(d_ord, ord_bytes);
  auto* off = reinterpret_cast<int*>(d_off.get() + kGuard);
  auto* gat = reinterpret_cast<int*>(d_gat.get() + kGuard);
  auto* ord = reinterpret_cast<std::int64_t*>(d_ord.get() + kGuard);
  align_routing(n > 0 ? d_ids.get() : nullptr, int64, n, k, experts, off, n > 0 ? gat : nullptr,
                with_order && n > 0 ? ord : nullptr);
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());

  const Expected want = cpu_align(ids, k, experts);
  auto fetch = [](const DeviceBuffer& b, std::size_t bytes) {
    std::vector<std::uint8_t> h(bytes + 2 * kGuard);
    FP4GEMM_TEST_CUDA(cudaMemcpy(h.data(), b.get(), h.size(), cudaMemcpyDeviceToHost));
    return h;
  };
  auto guards_intact = [](const std::vector<std::uint8_t>& h, std::size_t bytes) {
    for (std::size_t i = 0; i < kGuard; ++i)
      if (h[i] != 0xA5 || h[kGuard + bytes + i] != 0xA5) return false;
    return true;
  };
  const auto h_off = fetch(d_off, off_bytes), h_gat = fetch(d_gat, gat_bytes), h_ord = fetch(d_ord, ord_bytes);
  EXPECT_TRUE(guards_intact(h_off, off_bytes)) << "offsets' guard bands were written";
  EXPECT_TRUE(guards_intact(h_gat, gat_bytes)) << "gather's guard bands were written";
  EXPECT_TRUE(guards_intact(h_ord, ord_bytes)) << "order's guard bands were written";
  std::vector<int> got_off(experts + 1), got_gat(n);
  std::vector<std::int64_t> got_ord(n);
  std::memcpy(got_off.data(), h_off.data() + kGuard, off_bytes);
  std::memcpy(got_gat.data(), h_gat.data() + kGuard, gat_bytes);
  std::memcpy(got_ord.data(), h_ord.data() + kGuard, ord_bytes);
  EXPECT_EQ(got_off, want.offsets);
  EXPECT_EQ(got_gat, want.gather);
  if (with_order) {
    EXPECT_EQ(got_ord, want.order);
  } else {
    EXPECT_TRUE(std::all_of(got_ord.begin(), got_ord.end(), [](std::int64_t v) { return v == -1; }))
        << "order was written although it was not asked for";
  }
}

std::vector<std::int64_t> draw_ids(std::mt19937_64& rng, int tokens, int k, int experts, const std::string& kind) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(tokens) * k);
  std::uniform_int_distribution<int> any(0, experts - 1);
  for (int t = 0; t < tokens; ++t) {
    for (int j = 0; j < k; ++j) {
      std::int64_t id = any(rng);
      if (kind == "one-hot") id = experts / 2;
      if (kind == "skewed") id = std::min<std::int64_t>(experts - 1, static_cast<std::int64_t>(std::abs(std::normal_distribution<double>(0, 2)(rng))));
      if (kind == "out-of-range" && rng() % 5 == 0) id = rng() % 2 ? -1 - static_cast<std::int64_t>(rng() % 7) : experts + static_cast<std::int64_t>(rng() % 7);
      ids[static_cast<std::size_t>(t) * k + j] = id;
    }
  }
  return ids;
}

TEST(AlignRouting, MatchesAStableCpuSortOnRandomRoutings) {
  REQUIRE_GPU();
  std::mt19937_64 rng(20261125);
  const std::vector<std::string> kinds = {"uniform", "one-hot", "skewed", "out-of-range"};
  int cases = 0;
  for (int experts : {1, 2, 7, 8, 128, 256, 511, 512})
    for (int tokens : {0, 1, 3, 16, 257, 1000})
      for (int k : {1, 2, 8}) {
        if (k > experts && experts > 1) continue;
        const std::string& kind = kinds[cases % kinds.size()];
        SCOPED_TRACE("E " + std::to_string(experts) + ", T " + std::to_string(tokens) + ", k " + std::to_string(k) +
                     ", " + kind);
        check_routing(draw_ids(rng, tokens, k, experts, kind), k, experts, cases % 2 == 0, cases % 3 != 0);
        ++cases;
      }
  EXPECT_GT(cases, 100);
}

TEST(AlignRouting, LargestRoutings) {
  REQUIRE_GPU();
  std::mt19937_64 rng(7);
  check_routing(draw_ids(rng, 16384, 8, 256, "uniform"), 8, 256, true, true);     // 131072 ids
  check_routing(draw_ids(rng, 16384, 8, 512, "out-of-range"), 8, 512, false, true);
  check_routing(draw_ids(rng, 65536, 1, 8, "skewed"), 1, 8, true, true);
}

// The kernel takes 32 warps past 2048 ids when E <= 334 (the counters fit 48 KB of shared memory),
// else 8: both sides of both bounds, ranges that end inside a 32-id group and a load batch.
TEST(AlignRouting, BlockWidthBoundaries) {
  REQUIRE_GPU();
  std::mt19937_64 rng(11);
  for (int experts : {333, 334, 335})
    for (int tokens : {2047, 2048, 2049, 2079, 4095})
      check_routing(draw_ids(rng, tokens, 1, experts, tokens % 2 ? "out-of-range" : "uniform"), 1, experts,
                    tokens % 2 == 0, true);
  check_routing(draw_ids(rng, 257, 8, 334, "skewed"), 8, 334, true, true);  // 2056 ids
}

TEST(AlignRouting, DeterministicAcrossRuns) {
  REQUIRE_GPU();
  std::mt19937_64 rng(9);
  const auto ids = draw_ids(rng, 4096, 8, 64, "skewed");
  for (int i = 0; i < 5; ++i) check_routing(ids, 8, 64, true, true);  // each run against the same CPU answer
}

TEST(AlignRouting, GraphReplayedWithNewIds) {
  REQUIRE_GPU();
  const int tokens = 64, k = 4, experts = 32;
  const std::int64_t n = tokens * k;
  DeviceBuffer d_ids(n * 8), d_off((experts + 1) * 4), d_gat(n * 4), d_ord(n * 8);
  cudaStream_t s;
  FP4GEMM_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FP4GEMM_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  align_routing(d_ids.get(), true, n, k, experts, reinterpret_cast<int*>(d_off.get()), reinterpret_cast<int*>(d_gat.get()),
                reinterpret_cast<std::int64_t*>(d_ord.get()), s);
  FP4GEMM_TEST_CUDA(cudaStreamEndCapture(s, &graph));
  FP4GEMM_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20; ++i) {
    const auto ids = draw_ids(rng, tokens, k, experts, i % 2 ? "skewed" : "uniform");
    FP4GEMM_TEST_CUDA(cudaMemcpyAsync(d_ids.get(), ids.data(), n * 8, cudaMemcpyHostToDevice, s));
    FP4GEMM_TEST_CUDA(cudaMemsetAsync(d_gat.get(), 0xFF, n * 4, s));
    FP4GEMM_TEST_CUDA(cudaGraphLaunch(exec, s));
    FP4GEMM_TEST_CUDA(cudaStreamSynchronize(s));
    const Expected want = cpu_align(ids, k, experts);
    std::vector<int> off(experts + 1), gat(n);
    FP4GEMM_TEST_CUDA(cudaMemcpy(off.data(), d_off.get(), off.size() * 4, cudaMemcpyDeviceToHost));
    FP4GEMM_TEST_CUDA(cudaMemcpy(gat.data(), d_gat.get(), gat.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(off, want.offsets) << "replay " << i;
    EXPECT_EQ(gat, want.gather) << "replay " << i;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(AlignRouting, HostPointersRejected) {
  REQUIRE_GPU();
  std::vector<std::int64_t> ids(8, 0);
  DeviceBuffer d_off(9 * 4), d_gat(8 * 4);
  try {
    align_routing(ids.data(), true, 8, 2, 8, reinterpret_cast<int*>(d_off.get()), reinterpret_cast<int*>(d_gat.get()));
    ADD_FAILURE() << "host ids were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "topk_ids") << e.what();
  }
}

}  // namespace
}  // namespace fp4gemm::test
