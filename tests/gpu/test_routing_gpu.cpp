// GPU tier: fp4gemm::align_routing (top-k ids -> expert offsets, gather index, order) against a
// CPU stable sort, every element, poisoned outputs and guard bands; int32 and int64 ids; ids
// outside [0, E); E from 1 to 512; T * k from 0 to 131072; graph capture with changing ids; the
// layer's variant (row_of, a device token count) in one block and over a grid of CTAs.
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

// The kernel takes 32 warps past kRoutingWideBlockMinIds (1024) ids when E <= 334 (the counters fit 48 KB of
// shared memory), else 8: both sides of both bounds, ranges that end inside a 32-id group and a load batch.
TEST(AlignRouting, BlockWidthBoundaries) {
  REQUIRE_GPU();
  std::mt19937_64 rng(11);
  for (int experts : {333, 334, 335})
    for (int tokens : {1023, 1024, 1025, 1055, 2047, 2048, 2049, 2079, 4095})
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

// The layer's variant (detail::launch_align_routing_rows: row_of instead of order, a device token
// count, only routed pairs written) in both forms: one block, and with scratch the grid of CTAs
// that large routings take. Each against the CPU's stable sort (absent pairs and ids outside
// [0, E) sorted last / first, never written), every element, poisoned outputs, guard bands.
void check_routing_rows(const std::vector<std::int64_t>& ids, int k, int experts, bool int64, int token_count,
                        bool grid) {
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  const int tokens = static_cast<int>(n / k);
  const std::int64_t present = std::min<std::int64_t>(n, std::int64_t{std::max(token_count, 0)} * k);
  // CPU: bucket 0 ids < 0, e + 1 expert e, E + 1 ids >= E and absent pairs; stable by index.
  auto bucket = [&](std::int64_t i) {
    if (i >= present) return experts + 1;
    const std::int64_t id = ids[i];
    return id < 0 ? 0 : id >= experts ? experts + 1 : static_cast<int>(id) + 1;
  };
  std::vector<std::int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) { return bucket(a) < bucket(b); });
  std::vector<int> want_off(experts + 1, 0), want_gat(n, -1), want_row(n, -1);
  for (std::int64_t i = 0; i < n; ++i)
    for (int e = bucket(i); e <= experts; ++e) ++want_off[e];  // offsets[e] = pairs in buckets <= e
  for (std::int64_t r = 0; r < n; ++r) {
    const std::int64_t i = idx[r];
    const int b = bucket(i);
    if (b >= 1 && b <= experts) want_gat[r] = static_cast<int>(i / k), want_row[i] = static_cast<int>(r);
  }

  DeviceBuffer d_ids(std::max<std::size_t>(n * 8, 16)), d_count(4);
  if (int64) {
    FP4GEMM_TEST_CUDA(cudaMemcpy(d_ids.get(), ids.data(), n * 8, cudaMemcpyHostToDevice));
  } else {
    std::vector<int> ids32(ids.begin(), ids.end());
    FP4GEMM_TEST_CUDA(cudaMemcpy(d_ids.get(), ids32.data(), n * 4, cudaMemcpyHostToDevice));
  }
  FP4GEMM_TEST_CUDA(cudaMemcpy(d_count.get(), &token_count, 4, cudaMemcpyHostToDevice));
  const std::size_t off_bytes = (experts + 1) * 4, n_bytes = std::max<std::int64_t>(n, 1) * 4;
  DeviceBuffer d_off(off_bytes + 2 * kGuard), d_gat(n_bytes + 2 * kGuard), d_row(n_bytes + 2 * kGuard);
  const std::size_t scratch_bytes = detail::align_routing_grid_scratch_ints(experts) * 4;
  DeviceBuffer d_scratch(scratch_bytes);
  FP4GEMM_TEST_CUDA(cudaMemset(d_scratch.get(), 0x5A, scratch_bytes));  // (its contents are not kept: any)
  for (const DeviceBuffer* b : {&d_off, &d_gat, &d_row}) {
    const std::size_t bytes = b == &d_off ? off_bytes : n_bytes;
    FP4GEMM_TEST_CUDA(cudaMemset(b->get(), 0xA5, bytes + 2 * kGuard));
    FP4GEMM_TEST_CUDA(cudaMemset(b->get() + kGuard, 0xFF, bytes));
  }
  detail::launch_align_routing_rows(d_ids.get(), int64, n, k, experts, reinterpret_cast<int*>(d_off.get() + kGuard),
                                    reinterpret_cast<int*>(d_gat.get() + kGuard),
                                    reinterpret_cast<int*>(d_row.get() + kGuard), nullptr,
                                    reinterpret_cast<const int*>(d_count.get()),
                                    grid ? reinterpret_cast<int*>(d_scratch.get()) : nullptr);
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
  auto fetch = [](const DeviceBuffer& b, std::size_t bytes, std::vector<int>& out) {
    std::vector<std::uint8_t> h(bytes + 2 * kGuard);
    FP4GEMM_TEST_CUDA(cudaMemcpy(h.data(), b.get(), h.size(), cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < kGuard; ++i)
      if (h[i] != 0xA5 || h[kGuard + bytes + i] != 0xA5) return false;
    std::memcpy(out.data(), h.data() + kGuard, out.size() * 4);
    return true;
  };
  std::vector<int> got_off(experts + 1), got_gat(n), got_row(n);
  EXPECT_TRUE(fetch(d_off, off_bytes, got_off)) << "offsets' guard bands were written";
  EXPECT_TRUE(fetch(d_gat, n_bytes, got_gat)) << "gather's guard bands were written";
  EXPECT_TRUE(fetch(d_row, n_bytes, got_row)) << "row_of's guard bands were written";
  EXPECT_EQ(got_off, want_off);
  EXPECT_EQ(got_gat, want_gat) << "gather (-1: a slot no routed pair takes, never written)";
  EXPECT_EQ(got_row, want_row) << "row_of (-1: a pair not routed, never written)";
  (void)tokens;
}

TEST(AlignRoutingRows, GridAndOneBlockMatchTheCpuSort) {
  REQUIRE_GPU();
  std::mt19937_64 rng(20261130);
  const std::int64_t grid_min = detail::align_routing_grid_min_ids();
  int cases = 0;
  // T x k around the grid form's bound, a layer's T 4096 x top-8 and a routing past the grid's
  // CTA cap; every token count from none to all; int32 / int64; ids outside [0, E).
  struct Case {
    int tokens, k, experts;
  };
  const std::vector<Case> shapes = {{static_cast<int>(grid_min / 8) - 1, 8, 128}, {static_cast<int>(grid_min / 8), 8, 128},
                                    {static_cast<int>(grid_min / 8) + 3, 8, 256}, {4096, 8, 128}, {4096, 4, 512},
                                    {2049, 4, 7}, {40000, 8, 64}, {300000, 1, 16}};
  const std::vector<std::string> kinds = {"uniform", "out-of-range", "skewed", "one-hot"};
  for (const Case& c : shapes)
    for (int which = 0; which < 3; ++which) {
      const int count = which == 0 ? c.tokens : which == 1 ? c.tokens / 3 + 1 : 0;
      const std::string& kind = kinds[cases % kinds.size()];
      const auto ids = draw_ids(rng, c.tokens, c.k, c.experts, kind);
      for (bool grid : {false, true}) {
        SCOPED_TRACE("E " + std::to_string(c.experts) + ", T " + std::to_string(c.tokens) + ", k " +
                     std::to_string(c.k) + ", " + kind + ", token count " + std::to_string(count) +
                     (grid ? ", grid" : ", one block"));
        check_routing_rows(ids, c.k, c.experts, cases % 2 == 0, count, grid);
      }
      ++cases;
    }
  EXPECT_EQ(cases, 24);
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
