// GPU tier for the device-driven MoE GEMM (fp4gemm::MoeGemm, issue 20 part 2; SPEC §2 mode 2, §3).
//
//   MoeCombos      every weight format x activation (W4A4 nvfp4 / mxfp4, W4A16 mxfp4) x weight-scale
//                  layout x output type x layout (contiguous, contiguous + gather, masked): GPU MODE
//                  data bit-exact, full-range data within the FP32 bound, NaN placement
//   MoeRouting     directed routings: all rows to one expert (4096 rows), most experts empty,
//                  capacity exactly full, rows outside the routing untouched, empty routings,
//                  E = 1 and E = 512, token-tile edges, both narrow-tile widths
//   MoeRandom      320 random routings on 80 random weight sets (E 1..512, rows per expert 0..8192)
//   MoeRandomPieces 40 of those shapes on weights in pieces (N, K rounded up), 2 routings each, also
//                  bit for bit against the rows plan
//   MoeGraph       one captured run replayed 1000 times, each with a new routing, new activations
//                  (and new device alphas) written into the same buffers, every replay checked
//   MoeDeterminism, MoeStreams
//   MoeBadRouting  bad device data: nothing written (offsets / counts), check() names the argument
//                  and clears the error word, the next valid run is right
//   MoeRunArgs, MoePlanArgs, MoeGemmObject: host-side argument errors, moved-from plans
//   MoeSanitizer   a small, fast subset for compute-sanitizer: --gtest_filter='MoeSanitizer.*:MoeBadRouting.*'
//
// Every run: outputs poisoned (two runs, two poisons), every element checked, guard bands around C,
// C's row padding and rows no expert owns must stay untouched (gpu/moe_problem.hpp). Seeds are in
// every failure message (MoeConfig::describe).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "device/moe_tiles.hpp"
#include "formats/scale_layout.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "gpu/moe_problem.hpp"

namespace fp4gemm::test::moe {
namespace {

bool fast_kernel_available() { return device_count() > 0 && device_info().has_fast_kernel; }

#define REQUIRE_FAST_KERNEL() \
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE GEMM cannot run here"

// Expects `f()` to throw fp4gemm::Error naming `argument` (and `needle` in its message).
template <typename F>
void expect_error(F&& f, const std::string& argument, const std::string& needle = "") {
  try {
    f();
    ADD_FAILURE() << "expected fp4gemm::Error naming " << argument << "; nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    if (!needle.empty()) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected fp4gemm::Error naming " << argument << "; got another exception: " << e.what();
  }
}

// Runs body(i) for i in [0, count) on all cores.
void parallel_for(std::size_t count, const std::function<void(std::size_t)>& body) {
  const unsigned workers =
      std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), static_cast<unsigned>(count)));
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < count; i = next++) body(i);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

MoeConfig base_config(Format format, MoeActivation act, MoeLayout layout, bool gather, int experts, int n, int k,
                      int capacity, std::uint64_t seed) {
  MoeConfig c;
  c.format = format, c.activation = act, c.layout = layout, c.gather = gather;
  c.experts = experts, c.n = n, c.k = k, c.capacity = capacity, c.seed = seed;
  return c;
}

// One plan of `cfg`, the routings run one after the other (fresh activations each).
void expect_routings(const MoeConfig& cfg, const std::function<std::vector<Routing>(std::mt19937_64&)>& routings,
                     Launch launch = Launch::stream) {
  SCOPED_TRACE(cfg.describe());
  const MoeWeightSet ws(cfg);
  const MoeGemm plan(ws.weights(), ws.options());
  const MoeBuffers buffers(ws);
  std::mt19937_64 rng(cfg.seed ^ 0x3C6EF372FE94F82Bull);
  MoeRunOptions options;
  options.launch = launch;
  for (Routing& r : routings(rng))
    EXPECT_TRUE(run_and_check(plan, ws, buffers, make_inputs(ws, rng, std::move(r)), options));
}

// ---------------------------------------------------------------------------------------------
// Every combination
// ---------------------------------------------------------------------------------------------

// variant: 0 = nvfp4 weights x nvfp4 activations, 1 = mxfp4 x mxfp4, 2 = mxfp4 x bf16 (W4A16);
// layout: 0 = contiguous, 1 = contiguous + gather, 2 = masked.
using Combo = std::tuple<int, ScaleLayout, OutType, int>;
class MoeCombos : public ::testing::TestWithParam<Combo> {};

TEST_P(MoeCombos, GpuModeExactFullRangeBoundedNaNPlaced) {
  REQUIRE_FAST_KERNEL();
  const auto [variant, scale_layout, out_type, layout] = GetParam();
  const Format format = variant == 0 ? Format::nvfp4 : Format::mxfp4;
  const MoeActivation act = variant == 2 ? MoeActivation::bf16 : MoeActivation::fp4;
  const bool masked = layout == 2, gather = layout == 1;
  const int vec = scale_block_size(format);
  // 6 experts, N 200 (not a multiple of the 128/256-row tiles), K = 10 scale blocks (not a
  // multiple of the 64-wide k-block for NVFP4); one expert past 256 rows (two token tiles), an
  // empty one, a single-row one; offsets start at 3 and end short of capacity.
  MoeConfig cfg = base_config(
      format, act, masked ? MoeLayout::masked : MoeLayout::contiguous, gather, 6, 200, 10 * vec, masked ? 130 : 600,
      1000 + variant * 100 + static_cast<int>(scale_layout) * 30 + static_cast<int>(out_type) * 5 + layout);
  cfg.scale_layout = scale_layout;
  cfg.out_type = out_type;
  cfg.num_tokens = gather ? 450 : 0;
  const std::vector<int> counts =
      masked ? std::vector<int>{0, 37, 130, 1, 128, 90} : std::vector<int>{0, 37, 300, 1, 128, 90};
  const auto routings = [&](std::mt19937_64& rng) {
    return std::vector<Routing>{routing_from_counts(cfg, rng, counts, masked ? 0 : 3, "fixed"),
                                make_routing(cfg, rng, RoutingKind::full)};
  };

  {  // GPU MODE values, per-expert powers-of-two alphas on the device, padded strides: bit-exact
    SCOPED_TRACE("gpumode");
    cfg.values = Values::gpumode;
    cfg.alpha = AlphaMode::device;
    cfg.padded = true;
    expect_routings(cfg, routings);
  }
  {  // full range, a scalar alpha, through a graph: the FP32 bound
    SCOPED_TRACE("full range");
    cfg.values = Values::full;
    cfg.alpha = AlphaMode::scalar;
    cfg.padded = false;
    cfg.seed += 7;
    expect_routings(cfg, routings, Launch::graph);
  }
  {  // full range with NaN: a NaN scale (or bf16 NaN) in routed activation rows and in weights
    SCOPED_TRACE("NaN");
    cfg.values = Values::full;
    cfg.alpha = AlphaMode::none;
    cfg.nan_scales = true;
    cfg.default_strides = (cfg.k / 2) % 16 == 0;
    cfg.seed += 7;
    const MoeWeightSet ws(cfg);
    const MoeGemm plan(ws.weights(), ws.options());
    const MoeBuffers buffers(ws);
    std::mt19937_64 rng(cfg.seed);
    MoeInputs in = make_inputs(ws, rng, routing_from_counts(cfg, rng, counts, masked ? 0 : 3, "fixed"));
    const std::vector<int> owner = row_owners(cfg, in.routing);
    int poisoned = 0;
    for (int r = 0; r < cfg.rows() && poisoned < 3; ++r) {
      if (owner[static_cast<std::size_t>(r)] < 0 || r % 7 != 0) continue;
      const int src = gather ? in.routing.gather[static_cast<std::size_t>(r)] : r;
      if (act == MoeActivation::fp4) {
        in.a_scales[static_cast<std::size_t>(src * ws.cols + (r % ws.cols))] = format == Format::nvfp4 ? 0x7F : 0xFF;
      } else {
        const std::uint16_t nan = 0x7FC0;
        std::memcpy(in.a.data() + src * ws.lda + 2 * (r % cfg.k), &nan, 2);
      }
      ++poisoned;
    }
    ASSERT_GT(poisoned, 0);
    EXPECT_TRUE(run_and_check(plan, ws, buffers, in));
  }
}

INSTANTIATE_TEST_SUITE_P(All, MoeCombos,
                         ::testing::Combine(::testing::Values(0, 1, 2),
                                            ::testing::Values(ScaleLayout::blocked, ScaleLayout::linear),
                                            ::testing::Values(OutType::f16, OutType::bf16, OutType::f32),
                                            ::testing::Values(0, 1, 2)),
                         [](const auto& info) {
                           const int v = std::get<0>(info.param);
                           const int l = std::get<3>(info.param);
                           return std::string(v == 0   ? "nvfp4_w4a4"
                                              : v == 1 ? "mxfp4_w4a4"
                                                       : "mxfp4_w4a16") +
                                  "_" + to_string(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param)) +
                                  "_" +
                                  (l == 0   ? "contiguous"
                                   : l == 1 ? "gather"
                                            : "masked");
                         });

// ---------------------------------------------------------------------------------------------
// Directed routings (GPU MODE data: bit-exact)
// ---------------------------------------------------------------------------------------------

std::vector<int> one_hot(int experts, int expert, int rows) {
  std::vector<int> c(static_cast<std::size_t>(experts), 0);
  c[static_cast<std::size_t>(expert)] = rows;
  return c;
}

TEST(MoeRouting, AllRowsToOneExpert) {
  REQUIRE_FAST_KERNEL();
  for (const bool gather : {false, true}) {
    MoeConfig cfg =
        base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, gather, 64, 128, 64, 4096, 2001);
    cfg.num_tokens = gather ? 1000 : 0;
    expect_routings(cfg, [&](std::mt19937_64& rng) {
      return std::vector<Routing>{
          routing_from_counts(cfg, rng, one_hot(64, 0, 4096), 0, "all to expert 0"),
          routing_from_counts(cfg, rng, one_hot(64, 63, 4096), 0, "all to expert 63"),
          routing_from_counts(cfg, rng, one_hot(64, 17, 4000), 96, "all to expert 17, shifted")};
    });
  }
  // W4A16 and the masked layout: one expert's slot full, the others empty.
  MoeConfig cfg = base_config(Format::mxfp4, MoeActivation::bf16, MoeLayout::contiguous, false, 32, 96, 64, 4096, 2002);
  expect_routings(cfg, [&](std::mt19937_64& rng) {
    return std::vector<Routing>{routing_from_counts(cfg, rng, one_hot(32, 31, 4096), 0, "all to the last expert")};
  });
  cfg = base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::masked, false, 4, 128, 64, 4096, 2003);
  expect_routings(cfg, [&](std::mt19937_64& rng) {
    return std::vector<Routing>{routing_from_counts(cfg, rng, one_hot(4, 2, 4096), 0, "masked: expert 2 full")};
  });
}

TEST(MoeRouting, MostExpertsEmpty) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, true, 256, 96, 128, 700, 2011);
  cfg.num_tokens = 300;
  expect_routings(cfg, [&](std::mt19937_64& rng) {
    std::vector<int> counts(256, 0);
    counts[0] = 1, counts[100] = 300, counts[255] = 399;
    std::vector<Routing> out{routing_from_counts(cfg, rng, counts, 0, "3 of 256 experts")};
    for (int i = 0; i < 4; ++i) out.push_back(make_routing(cfg, rng, RoutingKind::few_experts));
    return out;
  });
  cfg = base_config(Format::mxfp4, MoeActivation::bf16, MoeLayout::masked, false, 64, 72, 128, 40, 2012);
  expect_routings(cfg, [&](std::mt19937_64& rng) {
    std::vector<Routing> out;
    for (int i = 0; i < 3; ++i) out.push_back(make_routing(cfg, rng, RoutingKind::few_experts));
    return out;
  });
}

TEST(MoeRouting, CapacityExactlyFull) {
  REQUIRE_FAST_KERNEL();
  for (const MoeLayout layout : {MoeLayout::contiguous, MoeLayout::masked}) {
    MoeConfig cfg = base_config(Format::mxfp4, MoeActivation::fp4, layout, false, 16, 64, 256,
                                layout == MoeLayout::masked ? 77 : 777, 2021);
    cfg.out_type = OutType::f16;
    expect_routings(cfg, [&](std::mt19937_64& rng) {
      std::vector<Routing> out;
      for (int i = 0; i < 3; ++i) {
        out.push_back(make_routing(cfg, rng, RoutingKind::full));
        if (layout == MoeLayout::contiguous) EXPECT_EQ(out.back().offsets.back(), cfg.capacity);
      }
      return out;
    });
  }
}

// Rows before offsets[0] and past offsets[E] belong to nobody: poisoned, they must keep the poison.
TEST(MoeRouting, RowsOutsideTheRoutingUntouched) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, false, 10, 136, 96, 1000, 2031);
  cfg.padded = true;
  expect_routings(cfg, [&](std::mt19937_64& rng) {
    std::vector<int> counts{50, 0, 250, 7, 0, 0, 1, 99, 0, 3};  // 410 rows
    return std::vector<Routing>{routing_from_counts(cfg, rng, counts, 0, "ends at 410"),
                                routing_from_counts(cfg, rng, counts, 100, "rows 100..510"),
                                routing_from_counts(cfg, rng, counts, 590, "rows 590..1000"),
                                make_routing(cfg, rng, RoutingKind::partial),
                                make_routing(cfg, rng, RoutingKind::shifted)};
  });
}

// No rows at all: C stays untouched entirely, and check() passes.
TEST(MoeRouting, EmptyRoutings) {
  REQUIRE_FAST_KERNEL();
  for (const MoeLayout layout : {MoeLayout::contiguous, MoeLayout::masked}) {
    MoeConfig cfg =
        base_config(Format::nvfp4, MoeActivation::fp4, layout, layout == MoeLayout::contiguous, 8, 64, 64, 64, 2041);
    expect_routings(cfg, [&](std::mt19937_64& rng) {
      const std::vector<int> zeros(8, 0);
      std::vector<Routing> out{routing_from_counts(cfg, rng, zeros, 0, "empty at 0")};
      if (layout == MoeLayout::contiguous) {
        out.push_back(routing_from_counts(cfg, rng, zeros, 37, "empty at 37"));
        out.push_back(routing_from_counts(cfg, rng, zeros, 64, "empty at capacity"));
      }
      return out;
    });
  }
}

TEST(MoeRouting, SingleExpert) {
  REQUIRE_FAST_KERNEL();
  for (const int rows : {0, 1, 7, 8, 9, 255, 256, 257, 511, 512, 513, 600}) {
    MoeConfig cfg = base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, rows % 2 == 1, 1, 128, 128,
                                600, 2050 + rows);
    expect_routings(cfg, [&](std::mt19937_64& rng) {
      return std::vector<Routing>{routing_from_counts(cfg, rng, {rows}, 0, std::to_string(rows) + " rows")};
    });
  }
  MoeConfig cfg = base_config(Format::mxfp4, MoeActivation::bf16, MoeLayout::masked, false, 1, 128, 128, 300, 2049);
  expect_routings(cfg, [&](std::mt19937_64& rng) {
    return std::vector<Routing>{routing_from_counts(cfg, rng, {300}, 0, "full"),
                                routing_from_counts(cfg, rng, {129}, 0, "129")};
  });
}

TEST(MoeRouting, FiveHundredTwelveExperts) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, true, 512, 64, 64, 1536, 2061);
  cfg.num_tokens = 700;
  cfg.alpha = AlphaMode::device;
  expect_routings(cfg, [&](std::mt19937_64& rng) {
    std::vector<int> two(512, 2), last = one_hot(512, 511, 1536), alternate(512, 0);
    for (int e = 1; e < 512; e += 2) alternate[static_cast<std::size_t>(e)] = 3;
    return std::vector<Routing>{routing_from_counts(cfg, rng, two, 0, "2 rows each"),
                                routing_from_counts(cfg, rng, last, 0, "all to expert 511"),
                                routing_from_counts(cfg, rng, alternate, 5, "odd experts 3 rows"),
                                make_routing(cfg, rng, RoutingKind::topk), make_routing(cfg, rng, RoutingKind::skewed)};
  });
  cfg = base_config(Format::mxfp4, MoeActivation::fp4, MoeLayout::masked, false, 512, 40, 64, 8, 2062);
  expect_routings(cfg, [&](std::mt19937_64& rng) {
    return std::vector<Routing>{make_routing(cfg, rng, RoutingKind::full),
                                make_routing(cfg, rng, RoutingKind::uniform)};
  });
}

// Rows per expert at the token-tile edges (8-row steps, 16-token width classes, the 128-token
// narrow limit, 256-token tiles, several tiles), in shuffled expert order.
TEST(MoeRouting, TokenTileEdges) {
  REQUIRE_FAST_KERNEL();
  std::vector<int> counts{1, 7, 8, 9, 15, 16, 17, 127, 128, 129, 255, 256, 257, 511, 512, 513, 4096};
  const int total = std::accumulate(counts.begin(), counts.end(), 0);
  MoeConfig cfg =
      base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, false, 17, 136, 64, total, 2071);
  cfg.out_type = OutType::f32;
  expect_routings(cfg, [&](std::mt19937_64& rng) {
    std::vector<Routing> out{routing_from_counts(cfg, rng, counts, 0, "edges")};
    std::shuffle(counts.begin(), counts.end(), rng);
    out.push_back(routing_from_counts(cfg, rng, counts, 0, "edges, shuffled"));
    return out;
  });
}

// One stream-K test's cases: each case's plan (seed seed0 + its index), run with GPU MODE data,
// then full-range data (the seed advanced by `step` before each), launched as a graph for even
// cases and on the stream for odd ones; `routings` draws each plan's routings.
struct StreamKCase {
  Format format;
  MoeActivation act;
  MoeLayout layout;
  bool gather;
  int experts, n, k, capacity;
};
void expect_stream_k_cases(
    const std::vector<StreamKCase>& cases, std::uint64_t seed0, std::uint64_t step,
    const std::function<void(const StreamKCase&, MoeConfig&)>& setup,
    const std::function<std::vector<Routing>(const StreamKCase&, const MoeConfig&, std::mt19937_64&)>& routings) {
  int i = 0;
  for (const StreamKCase& c : cases) {
    MoeConfig cfg = base_config(c.format, c.act, c.layout, c.gather, c.experts, c.n, c.k, c.capacity, seed0 + i);
    setup(c, cfg);
    for (const Values v : {Values::gpumode, Values::full}) {
      cfg.values = v;
      cfg.seed += step;
      expect_routings(
          cfg, [&](std::mt19937_64& rng) { return routings(c, cfg, rng); }, i % 2 == 0 ? Launch::graph : Launch::stream);
    }
    ++i;
  }
}

// Stream-K of the 16- and 32-token classes (decode-like runs: at most 3/4 of a tile per CTA, K of
// >= 4 k-blocks; device/moe_schedule.cuh): tiles split over up to dozens of CTAs (few experts,
// long K), shares ending inside a tile, a class next to one that is not split, N off the tile
// height, every layout and activation type; several runs on one plan (the tile flags reset
// between them) and graph replays. GPU MODE data: bit-exact whatever the split; full range: the
// FP32 bound.
TEST(MoeStreamK, DecodeSharesMatchTheReference) {
  REQUIRE_FAST_KERNEL();
  const std::vector<StreamKCase> cases{
      {Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, true, 8, 256, 2048, 64},    // ~8 CTAs per tile
      {Format::mxfp4, MoeActivation::bf16, MoeLayout::contiguous, false, 16, 192, 4096, 40},  // N off the tiles
      {Format::nvfp4, MoeActivation::fp4, MoeLayout::masked, false, 4, 320, 1024, 16},
      {Format::mxfp4, MoeActivation::fp4, MoeLayout::contiguous, true, 64, 512, 512, 96},     // ~1-2 tiles per CTA
      {Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, false, 1, 128, 8192, 30},    // one tile, 128 k-blocks
  };
  expect_stream_k_cases(
      cases, 9100, 17,
      [](const StreamKCase& c, MoeConfig& cfg) {
        cfg.num_tokens = c.gather ? c.capacity / 2 + 1 : 0;
        cfg.alpha = AlphaMode::device;
      },
      [](const StreamKCase&, const MoeConfig& cfg, std::mt19937_64& rng) {
        return std::vector<Routing>{make_routing(cfg, rng, RoutingKind::uniform), make_routing(cfg, rng, RoutingKind::skewed),
                                    make_routing(cfg, rng, RoutingKind::few_experts),
                                    make_routing(cfg, rng, RoutingKind::full)};
      });
}

// A 16- or 32-token class with full rounds of whole tiles and a partial last round splits
// that round by stream-K (moe_sk_tiles, where it saves enough): split pieces and whole tiles in one
// CTA's list, one or two classes, every activation kind and layout. The routings from counts put
// every expert in the 16-token class with one row block each (256-row tiles), so the class has
// `experts` tiles: checked below to be a hybrid split on this GPU's SM count, so that the test
// cannot pass without running the split. GPU MODE data bit-exact, full range within the bound.
TEST(MoeStreamK, SplitLastRoundMatchesTheReference) {
  REQUIRE_FAST_KERNEL();
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  const std::vector<StreamKCase> cases{
      {Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, true, 150, 256, 2048, 150 * 24},
      {Format::mxfp4, MoeActivation::bf16, MoeLayout::contiguous, false, 150, 256, 2048, 150 * 24},
      {Format::mxfp4, MoeActivation::fp4, MoeLayout::masked, false, 150, 192, 2048, 24},
  };
  for (const StreamKCase& c : cases) {
    const int kblocks = c.k / 64;
    // (the 16-token class's production rule: every expert has 1..16 rows in the first routing)
    const int gain = detail::moe_split_min_gain(0);
    ASSERT_GT(detail::moe_sk_tiles(c.experts, kblocks, sms, gain), 0) << sms << " SMs";
    ASSERT_LT(detail::moe_sk_tiles(c.experts, kblocks, sms, gain), c.experts) << "not a partial last round on " << sms << " SMs";
  }
  expect_stream_k_cases(
      cases, 9300, 13, [](const StreamKCase& c, MoeConfig& cfg) { cfg.num_tokens = c.gather ? 1000 : 0; },
      [](const StreamKCase& c, const MoeConfig& cfg, std::mt19937_64& rng) {
        std::vector<int> one_class(c.experts), two_classes(c.experts);
        for (int e = 0; e < c.experts; ++e)
          one_class[e] = 1 + static_cast<int>(rng() % 16), two_classes[e] = 1 + static_cast<int>(rng() % 24);
        return std::vector<Routing>{routing_from_counts(cfg, rng, one_class, 0, "1..16 rows each"),
                                    routing_from_counts(cfg, rng, two_classes, 0, "1..24 rows each"),
                                    make_routing(cfg, rng, RoutingKind::uniform)};
      });
}

// MoeOptions::tuning: the knobs an MoE plan reads change its schedule, never its result. Stream-K
// off, forced 128- and 256-row narrow tiles, another cost model and 0 / 3 / 64 early weight k-blocks, on the routings of the test
// above (a split last round when stream-K is on); GPU MODE data bit-exact, full range within the
// bound.
TEST(MoeTuning, KnobsChangeTheScheduleNotTheResult) {
  REQUIRE_FAST_KERNEL();
  for (int i = 0; i < 3; ++i) {
    const bool w4a16 = i == 1;
    MoeConfig cfg = base_config(w4a16 ? Format::mxfp4 : Format::nvfp4, w4a16 ? MoeActivation::bf16 : MoeActivation::fp4,
                                MoeLayout::contiguous, i == 0, 150, 256, 2048, 150 * 24, 9500 + i);
    cfg.num_tokens = cfg.gather ? 1000 : 0;
    cfg.values = i == 2 ? Values::full : Values::gpumode;
    SCOPED_TRACE(cfg.describe());
    const MoeWeightSet ws(cfg);
    MoeOptions o = ws.options();
    o.tuning.split_k = i == 2;  // (true: stream-K where the device schedule finds it pays, as unset)
    o.tuning.narrow_rows = i == 0 ? 128 : 256;
    if (i == 1) o.tuning.narrow_fixed = 100.0, o.tuning.narrow_per_token = 10.0;
    if (i == 2) o.tuning.moe_split_gain16 = 0.0, o.tuning.moe_split_gain32 = 1000.0;  // (split any / no last round)
    const MoeGemm plan(ws.weights(), o);
    // (the registry's MoE kernel, named first in describe())
    ASSERT_STREQ(plan.kernel_name(), "sm90_fused_swapab_moe");
    ASSERT_EQ(plan.describe().rfind(std::string(plan.kernel_name()) + " on ", 0), 0u) << plan.describe();
    ASSERT_EQ(plan.describe().find("no stream-K") != std::string::npos, i != 2) << plan.describe();
    ASSERT_NE(plan.describe().find(i == 0 ? "narrow tiles 128" : "narrow tiles 256"), std::string::npos)
        << plan.describe();
    const MoeBuffers buffers(ws);
    std::mt19937_64 rng(cfg.seed ^ 0x3C6EF372FE94F82Bull);
    std::vector<int> counts(cfg.experts);
    for (int& c : counts) c = 1 + static_cast<int>(rng() % 24);
    std::vector<Routing> routings{routing_from_counts(cfg, rng, counts, 0, "1..24 rows each"),
                                  make_routing(cfg, rng, RoutingKind::uniform), make_routing(cfg, rng, RoutingKind::skewed)};
    for (Routing& r : routings)
      EXPECT_TRUE(run_and_check(plan, ws, buffers, make_inputs(ws, rng, std::move(r)), MoeRunOptions{}));
  }
}

// 16-token tiles run two k-blocks per commit group, and a piece's odd last k-block alone
// (mainloop.cuh, kPairs): every k-block count from 1 to 7 (a lone k-block, pairs only, pairs and an
// odd tail), at 16-token widths and the one-k-block loop's 32 and 48 beside them, both formats and
// both activation kinds.
TEST(MoePairedMainloop, EveryKblockCountAtNarrowWidths) {
  REQUIRE_FAST_KERNEL();
  struct Case {
    Format format;
    MoeActivation act;
  };
  const Case kinds[] = {{Format::nvfp4, MoeActivation::fp4}, {Format::mxfp4, MoeActivation::bf16},
                        {Format::mxfp4, MoeActivation::fp4}};
  int i = 0;
  for (const int kblocks : {1, 2, 3, 4, 5, 7}) {
    const Case& c = kinds[i % 3];
    // 6 experts x <= 48 rows on average: widths 16, 32 and 48, and skewed experts past them
    MoeConfig cfg = base_config(c.format, c.act, MoeLayout::contiguous, i % 2 == 0, 6, 320, 64 * kblocks, 200, 9400 + i);
    cfg.num_tokens = cfg.gather ? 120 : 0;
    for (const Values v : {Values::gpumode, Values::full}) {
      cfg.values = v;
      cfg.seed += 31;
      expect_routings(
          cfg,
          [&](std::mt19937_64& rng) {
            return std::vector<Routing>{make_routing(cfg, rng, RoutingKind::uniform),
                                        make_routing(cfg, rng, RoutingKind::skewed),
                                        routing_from_counts(cfg, rng, {16, 32, 48, 1, 17, 40}, 0, "widths 16-48")};
          },
          i % 2 == 0 ? Launch::graph : Launch::stream);
    }
    ++i;
  }
}

// Narrow tiles take 256 weight rows when the experts' row blocks fill the GPU (E * ceil(N / 256)
// >= SMs), 128 otherwise: both, with rows in every width class.
TEST(MoeRouting, BothNarrowTileHeights) {
  REQUIRE_FAST_KERNEL();
  const int sms = device_info().multiprocessors;
  for (const int experts : {4, sms + 3}) {
    MoeConfig cfg =
        base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, false, experts, 256, 64, 4000, 2081);
    cfg.values = Values::full;
    expect_routings(cfg, [&](std::mt19937_64& rng) {
      return std::vector<Routing>{make_routing(cfg, rng, RoutingKind::uniform),
                                  make_routing(cfg, rng, RoutingKind::skewed)};
    });
  }
}

// MXFP4 plans take one multiply per weight pair when every scale code the kernel can read is <= 128
// (FusedParams::small_mx_scales) and two otherwise: both paths on full-range values, with codes 0
// and the largest placed in every expert, W4A16 and W4A4, for the plan's own copy (linear weight
// scales) and the user's blocked scales (no padding here: the harness pads blocked scales with NaN
// codes, which the plan's scan sees -- the last case). (160, not higher: with codes >= ~220 the
// full-range products overflow the FP32 accumulator mid-sum, and >= 253 the dequantised weight
// itself, docs/DESIGN.md "Limits".)
TEST(MoeRouting, Mxfp4ScalePathsAtTheLimit) {
  REQUIRE_FAST_KERNEL();
  struct Case {
    ScaleLayout layout;
    int n, k;
    bool padded;  // blocked scales with padding (NaN codes)
  };
  for (const Case c : {Case{ScaleLayout::linear, 200, 320, false}, Case{ScaleLayout::blocked, 256, 384, false},
                       Case{ScaleLayout::blocked, 200, 320, true}}) {
    for (const MoeActivation act : {MoeActivation::bf16, MoeActivation::fp4}) {
      for (const int max_code : {128, 129, 160}) {
        if (c.padded && max_code != 128) continue;
        MoeConfig cfg = base_config(Format::mxfp4, act, MoeLayout::contiguous, false, 12, c.n, c.k, 700,
                                    2091 + static_cast<std::uint64_t>(max_code));
        cfg.scale_layout = c.layout;
        cfg.values = Values::full;
        cfg.max_scale_code = max_code;
        SCOPED_TRACE(cfg.describe());
        {
          const MoeWeightSet ws(cfg);
          const MoeGemm plan(ws.weights(), ws.options());
          const bool one = max_code <= 128 && !c.padded;
          EXPECT_EQ(plan.describe().find("one multiply") != std::string::npos, one) << plan.describe();
          EXPECT_EQ(plan.describe().find("checked at every run") != std::string::npos,
                    one && c.layout == ScaleLayout::blocked)
              << plan.describe();
        }
        expect_routings(cfg, [&](std::mt19937_64& rng) {
          return std::vector<Routing>{make_routing(cfg, rng, RoutingKind::uniform),
                                      make_routing(cfg, rng, RoutingKind::skewed)};
        });
      }
    }
  }
}

// A plan on the weight set's rows packed by pack_pieces into `pieces` (experts x pieces_bytes(n, k) bytes, filled with
// `poison` first: the plan must read only what the pack wrote).
MoeGemm plan_on_pieces(const MoeWeightSet& ws, const MoeConfig& cfg, DeviceBuffer& pieces, int poison) {
  FP4GEMM_TEST_CUDA(cudaMemset(pieces.get(), poison, static_cast<std::size_t>(pieces_bytes(cfg.n, cfg.k) * cfg.experts)));
  pack_pieces(ws.device_w(), pieces.get(), cfg.experts, cfg.n, cfg.k, cfg.format);
  MoeWeights w = ws.weights();
  w.w = pieces.get(), w.ldw = 0, w.expert_stride = 0;
  MoeOptions o = ws.options();
  o.weight_layout = WeightLayout::pieces;
  return MoeGemm(w, o);
}

// WeightLayout::pieces (fp4gemm::pack_pieces): every format and activation, both scale layouts, MXFP4's three scale
// decodes (two multiplies: codes past 128; one on the plan's copy: linear; one checked at every run: blocked), K not a
// multiple of 128 (the pieces' zero k-block) and of 64, narrow and wide tiles and stream-K shares; the same plan
// checks as every MoE case (two poisons, every element, guard bands), and bit for bit against the rows plan.
TEST(MoePieces, EveryFormatMatchesTheReferenceAndTheRowsPlan) {
  REQUIRE_FAST_KERNEL();
  struct Case {
    Format f;
    MoeActivation act;
    ScaleLayout layout;
    Values values;
    int n, k, capacity, max_code;
  };
  const Case cases[] = {
      {Format::nvfp4, MoeActivation::fp4, ScaleLayout::blocked, Values::gpumode, 256, 512, 700, 0},
      {Format::nvfp4, MoeActivation::fp4, ScaleLayout::linear, Values::full, 176, 352, 90, 0},
      {Format::mxfp4, MoeActivation::fp4, ScaleLayout::blocked, Values::full, 208, 288, 400, 160},
      {Format::mxfp4, MoeActivation::fp4, ScaleLayout::linear, Values::gpumode, 128, 320, 1500, 0},
      {Format::mxfp4, MoeActivation::bf16, ScaleLayout::blocked, Values::gpumode, 384, 416, 40, 0},
      {Format::mxfp4, MoeActivation::bf16, ScaleLayout::blocked, Values::full, 368, 2880, 64, 128},
      {Format::mxfp4, MoeActivation::bf16, ScaleLayout::linear, Values::full, 96, 2048, 24, 0},
  };
  std::uint64_t seed = 7700;
  for (const Case& c : cases) {
    MoeConfig cfg = base_config(c.f, c.act, MoeLayout::contiguous, seed % 2 == 0, 12, c.n, c.k, c.capacity, seed);
    ++seed;
    cfg.scale_layout = c.layout, cfg.values = c.values, cfg.max_scale_code = c.max_code, cfg.default_strides = true;
    SCOPED_TRACE(cfg.describe());
    const MoeWeightSet ws(cfg);
    DeviceBuffer d_pieces(static_cast<std::size_t>(pieces_bytes(c.n, c.k) * cfg.experts));
    const MoeGemm plan = plan_on_pieces(ws, cfg, d_pieces, 0xA5), rows(ws.weights(), ws.options());
    EXPECT_NE(plan.describe().find("weights in pieces"), std::string::npos) << plan.describe();
    EXPECT_EQ(rows.describe().find("weights in pieces"), std::string::npos) << rows.describe();
    const MoeBuffers buffers(ws);
    std::mt19937_64 rng(cfg.seed * 3 + 1);
    for (const RoutingKind kind : {RoutingKind::uniform, RoutingKind::skewed, RoutingKind::few_experts}) {
      const MoeInputs in = make_inputs(ws, rng, make_routing(cfg, rng, kind));
      EXPECT_TRUE(run_and_check(plan, ws, buffers, in));
      const std::vector<std::uint8_t> got = buffers.download_c(nullptr);
      EXPECT_TRUE(run_and_check(rows, ws, buffers, in));
      EXPECT_TRUE(buffers.download_c(nullptr) == got) << "the pieces plan's bytes differ from the rows plan's";
    }
  }
}

// Weights in pieces: wrong strides, rows not a multiple of 16, separate gate / up weights and a buffer too small are
// refused by name; pack_pieces / pack_pieces_gate_up refuse bad arguments by name.
TEST(MoePieces, BadArgumentsNamed) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::mxfp4, MoeActivation::bf16, MoeLayout::contiguous, false, 4, 64, 256, 64, 7790);
  cfg.default_strides = true;
  const MoeWeightSet ws(cfg);
  DeviceBuffer d_pieces(static_cast<std::size_t>(pieces_bytes(64, 256) * 4));
  MoeWeights w = ws.weights();
  w.w = d_pieces.get(), w.ldw = 0, w.expert_stride = 0;
  MoeOptions o = ws.options();
  o.weight_layout = WeightLayout::pieces;
  EXPECT_NO_THROW(MoeGemm(w, o));
  {
    MoeWeights b = w;
    b.expert_stride = pieces_bytes(64, 256) + 512;
    expect_error([&] { MoeGemm(b, o); }, "weights.expert_stride", "pieces");
    b = w, b.ldw = 256;
    expect_error([&] { MoeGemm(b, o); }, "weights.ldw", "pieces");
    b = w, b.n = 56;
    expect_error([&] { MoeGemm(b, o); }, "weights.n", "multiple of 16");
    b = w, b.experts = 5;  // one expert past the buffer
    expect_error([&] { MoeGemm(b, o); }, "weights.w");
    MoeOptions g = o;
    g.epilogue = MoeEpilogue::silu, g.gate_up = GateUpLayout::separate;
    b = w, b.n = 32, b.w_up = ws.device_w(), b.scales_up = ws.device_scales();
    expect_error([&] { MoeGemm(b, g); }, "options.weight_layout", "stacked or interleaved");
    MoeOptions bad = o;
    bad.weight_layout = static_cast<WeightLayout>(7);
    expect_error([&] { MoeGemm(w, bad); }, "options.weight_layout");
  }
  expect_error([&] { pack_pieces(ws.device_w(), d_pieces.get(), 4, 60, 256, Format::mxfp4); }, "rows", "multiple of 16");
  expect_error([&] { pack_pieces(ws.device_w(), d_pieces.get(), 4, 64, 48, Format::mxfp4); }, "k", "multiple of 32");
  expect_error([&] { pack_pieces(ws.device_w(), d_pieces.get(), 0, 64, 256, Format::mxfp4); }, "experts");
  expect_error([&] { pack_pieces(ws.device_w(), d_pieces.get() + 1024, 4, 64, 256, Format::nvfp4); }, "out");  // too small
  expect_error([&] { pack_pieces(nullptr, d_pieces.get(), 4, 64, 256, Format::nvfp4); }, "w");
  expect_error([&] { pack_pieces(ws.device_w(), ws.device_w(), 1, 16, 256, Format::mxfp4); }, "out", "overlap");
  expect_error([&] { pack_pieces(ws.device_w(), d_pieces.get(), 4, 64, 256, static_cast<Format>(7)); }, "format");
  expect_error([&] { pack_pieces_gate_up(ws.device_w(), d_pieces.get(), 4, 32, 256, GateUpLayout::separate, Format::mxfp4); }, "gate_up");
  expect_error([&] { pack_pieces_gate_up(ws.device_w(), d_pieces.get(), 4, 12, 256, GateUpLayout::stacked, Format::mxfp4); }, "inter");
  EXPECT_EQ(pieces_bytes(2880, 2880), std::int64_t{2880 / 16} * 23 * 1024);
}

// The one-multiply decode checks the codes it reads (a user's blocked scales can change after
// planning) but not those of a tile's second half when that half lies wholly past N: the producer
// does not load it, and its stage holds stale bytes. 256-row tiles (E * ceil(N / 256) >= SMs) over
// N = 384: every expert's second tile has one loaded half. Right answers and no error reported.
TEST(MoeRouting, Mxfp4OneMultiplyHalfPastN) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::mxfp4, MoeActivation::bf16, MoeLayout::contiguous, false,
                              device_info().multiprocessors + 3, 384, 128, 3000, 2117);
  cfg.scale_layout = ScaleLayout::blocked;
  cfg.values = Values::full;
  cfg.max_scale_code = 128;
  {
    const MoeWeightSet ws(cfg);
    const MoeGemm plan(ws.weights(), ws.options());
    ASSERT_NE(plan.describe().find("checked at every run"), std::string::npos) << plan.describe();
    ASSERT_NE(plan.describe().find("narrow tiles 256"), std::string::npos) << plan.describe();
  }
  expect_routings(cfg, [&](std::mt19937_64& rng) {
    return std::vector<Routing>{make_routing(cfg, rng, RoutingKind::uniform), make_routing(cfg, rng, RoutingKind::full),
                                make_routing(cfg, rng, RoutingKind::skewed)};
  });
}

// A scale code > 128 written into a user's blocked MXFP4 scales after a one-multiply plan was built
// is reported by the next check(), naming weights.scales and the expert (codes 129, the first that
// the decode cannot hold, and 255); the error word is then clear, and with the code restored the
// plan is right again.
TEST(MoeBadScales, CodeAbove128AfterPlanningIsReported) {
  REQUIRE_FAST_KERNEL();
  for (const MoeActivation act : {MoeActivation::bf16, MoeActivation::fp4}) {
    for (const int code : {129, 255}) {
      MoeConfig cfg = base_config(Format::mxfp4, act, MoeLayout::contiguous, false, 6, 256, 384, 600,
                                  2131 + static_cast<std::uint64_t>(code));
      cfg.scale_layout = ScaleLayout::blocked;
      cfg.values = Values::full;
      cfg.max_scale_code = 128;
      SCOPED_TRACE(cfg.describe() + ", code " + std::to_string(code));
      const MoeWeightSet ws(cfg);
      const MoeGemm plan(ws.weights(), ws.options());
      ASSERT_NE(plan.describe().find("checked at every run"), std::string::npos) << plan.describe();
      const MoeBuffers buffers(ws);
      const Stream stream;
      std::mt19937_64 rng(cfg.seed);
      const MoeInputs in = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::balanced));
      EXPECT_TRUE(run_and_check(plan, ws, buffers, in));
      // Expert 3's blocked byte of row 37, column 5.
      const int expert = 3;
      const std::int64_t at = expert * ws.scale_stride + ::fp4gemm::formats::detail::blocked_offset<std::int64_t>(37, 5, ws.cols);
      std::uint8_t* byte = ws.device_scales() + at;
      const std::uint8_t was = ws.scales[static_cast<std::size_t>(at)];
      ASSERT_LE(was, 128);
      const std::uint8_t bad = static_cast<std::uint8_t>(code);
      FP4GEMM_TEST_CUDA(cudaMemcpy(byte, &bad, 1, cudaMemcpyHostToDevice));
      buffers.upload(in, stream);
      buffers.reset_c(Poison::finite, stream);
      plan.run(buffers.args(), stream);
      try {
        plan.check(stream);
        ADD_FAILURE() << "a code " << code << " written after planning was not reported";
      } catch (const Error& e) {
        EXPECT_EQ(e.argument(), "weights.scales") << e.what();
        EXPECT_EQ(e.group(), expert) << e.what();
        EXPECT_NE(std::string(e.what()).find("> 128"), std::string::npos) << e.what();
      }
      EXPECT_NO_THROW(plan.check(stream)) << "check() must clear the error word";
      FP4GEMM_TEST_CUDA(cudaMemcpy(byte, &was, 1, cudaMemcpyHostToDevice));
      EXPECT_TRUE(run_and_check(plan, ws, buffers, in));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Random routings: 80 weight sets x 4 routings = 320
// ---------------------------------------------------------------------------------------------

// (kMoeRandomSets, kMoeRoutingsPerSet, kMoeRandomSeed0: gpu/moe_problem.hpp; the host tier checks
// what these configurations cover, host/test_moe_harness.cpp.)
static_assert(kMoeRandomSets * kMoeRoutingsPerSet >= 300, "issue 20: >= 300 random routings");
class MoeRandom : public ::testing::TestWithParam<int> {};

TEST_P(MoeRandom, RoutingsMatchTheReference) {
  REQUIRE_FAST_KERNEL();
  const std::uint64_t seed = kMoeRandomSeed0 + static_cast<std::uint64_t>(GetParam());
  const MoeConfig cfg = random_moe_config(seed);
  SCOPED_TRACE("random_moe_config(" + std::to_string(seed) + ")");
  expect_routings(
      cfg,
      [&](std::mt19937_64& rng) {
        std::vector<Routing> out;
        for (int j = 0; j < kMoeRoutingsPerSet; ++j)
          out.push_back(make_routing(
              cfg, rng,
              static_cast<RoutingKind>((GetParam() * kMoeRoutingsPerSet + j + GetParam() / 10) % kRoutingKinds)));
        return out;
      },
      GetParam() % 7 == 3 ? Launch::graph : Launch::stream);
}

INSTANTIATE_TEST_SUITE_P(Seeds, MoeRandom, ::testing::Range(0, kMoeRandomSets));

// The random tier on weights in pieces: random_moe_config's shapes with N rounded up to 16, K to 32 and dense rows
// (what pack_pieces packs), both scale layouts and formats, masked and gathered layouts; each routing checked against
// the reference (two poisons, every element, guard bands) and bit for bit against the rows plan of the same weights.
class MoeRandomPieces : public ::testing::TestWithParam<int> {};

TEST_P(MoeRandomPieces, RoutingsMatchTheReferenceAndTheRowsPlan) {
  REQUIRE_FAST_KERNEL();
  const std::uint64_t seed = kMoeRandomSeed0 + 7919 + static_cast<std::uint64_t>(GetParam());
  MoeConfig cfg = random_moe_config(seed, 1.0e7);
  cfg.n = (cfg.n + 15) / 16 * 16, cfg.k = (cfg.k + 31) / 32 * 32, cfg.padded = false;
  SCOPED_TRACE("random_moe_config(" + std::to_string(seed) + ") in pieces: " + cfg.describe());
  const MoeWeightSet ws(cfg);
  DeviceBuffer d_pieces(static_cast<std::size_t>(pieces_bytes(cfg.n, cfg.k) * cfg.experts));
  const MoeGemm plan = plan_on_pieces(ws, cfg, d_pieces, 0x5A), rows(ws.weights(), ws.options());
  const MoeBuffers buffers(ws);
  std::mt19937_64 rng(cfg.seed ^ 0x3C6EF372FE94F82Bull);
  for (int j = 0; j < 2; ++j) {
    const auto kind = static_cast<RoutingKind>((GetParam() * 2 + j) % kRoutingKinds);
    const MoeInputs in = make_inputs(ws, rng, make_routing(cfg, rng, kind));
    EXPECT_TRUE(run_and_check(plan, ws, buffers, in)) << "routing " << in.routing.describe();
    const std::vector<std::uint8_t> got = buffers.download_c(nullptr);
    EXPECT_TRUE(run_and_check(rows, ws, buffers, in));
    EXPECT_TRUE(buffers.download_c(nullptr) == got) << "the pieces plan's bytes differ from the rows plan's, routing "
                                                    << in.routing.describe();
  }
  EXPECT_NO_THROW(plan.check(nullptr));
}

INSTANTIATE_TEST_SUITE_P(Seeds, MoeRandomPieces, ::testing::Range(0, 40));

// ---------------------------------------------------------------------------------------------
// CUDA graphs: one capture, replays with a new routing each time
// ---------------------------------------------------------------------------------------------

// Captures one run, then replays it `replays` times; before each replay a new routing (cycling
// through every kind), new activations and (device alphas) new alphas are written into the same
// device buffers and C is re-poisoned (the two poisons alternate). Every replay is checked in full.
void replay_with_new_routings(const MoeConfig& cfg, int replays) {
  SCOPED_TRACE(cfg.describe());
  const MoeWeightSet ws(cfg);
  const MoeGemm plan(ws.weights(), ws.options());
  const MoeBuffers buffers(ws);
  const Stream stream;
  const Graph graph(plan, buffers.args(), stream);
  std::mt19937_64 rng(cfg.seed ^ 0xA54FF53A5F1D36F1ull);
  struct Replay {
    MoeInputs in;
    Poison poison;
    std::vector<std::uint8_t> got;
  };
  constexpr int kBatch = 64;
  int failures = 0, nonempty = 0;
  for (int base = 0; base < replays && failures < 3; base += kBatch) {
    std::vector<Replay> batch;
    for (int i = base; i < std::min(replays, base + kBatch); ++i) {
      Replay r;
      r.in = make_inputs(ws, rng, make_routing(cfg, rng, static_cast<RoutingKind>(i % kRoutingKinds)));
      if (cfg.alpha == AlphaMode::device)
        for (float& a : r.in.alphas)
          a = cfg.values == Values::gpumode
                  ? std::ldexp(1.0f, static_cast<int>(rng() % 5) - 2) * ((rng() & 1) ? -1.0f : 1.0f)
                  : static_cast<float>(std::uniform_real_distribution<double>(-2.0, 2.0)(rng));
      r.poison = i % 2 == 0 ? Poison::nan : Poison::finite;
      buffers.upload(r.in, stream);
      buffers.reset_c(r.poison, stream);
      graph.launch(stream);
      r.got = buffers.download_c(stream);
      const std::vector<int> owner = row_owners(cfg, r.in.routing);
      nonempty += std::any_of(owner.begin(), owner.end(), [](int e) { return e >= 0; });
      batch.push_back(std::move(r));
    }
    FP4GEMM_TEST_CUDA(cudaGetLastError());
    std::vector<std::string> errors(batch.size());
    parallel_for(batch.size(), [&](std::size_t j) {
      try {
        const std::vector<std::uint8_t> expected = expected_c(ws, buffers, batch[j].in, batch[j].poison, 1);
        const ::testing::AssertionResult result = check_c(ws, buffers, batch[j].in, batch[j].got, expected);
        if (!result) errors[j] = result.message();
      } catch (const std::exception& e) {
        errors[j] = std::string("exception: ") + e.what();
      }
    });
    for (std::size_t j = 0; j < batch.size(); ++j)
      if (!errors[j].empty() && failures++ < 3)
        ADD_FAILURE() << "replay " << base + static_cast<int>(j) << " (" << to_string(batch[j].poison) << "), routing "
                      << batch[j].in.routing.describe() << ": " << errors[j];
  }
  EXPECT_EQ(failures, 0) << "replays failed";
  EXPECT_GT(nonempty, replays / 2);
  EXPECT_NO_THROW(plan.check(stream));
}

TEST(MoeGraph, ThousandReplaysEachWithANewRouting) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, true, 16, 256, 128, 256, 3001);
  cfg.num_tokens = 200;
  cfg.alpha = AlphaMode::device;
  cfg.out_type = OutType::f16;
  replay_with_new_routings(cfg, 1000);
}

TEST(MoeGraph, MaskedW4A16FullRangeReplays) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::mxfp4, MoeActivation::bf16, MoeLayout::masked, false, 8, 128, 256, 64, 3002);
  cfg.values = Values::full;
  cfg.alpha = AlphaMode::device;
  cfg.out_type = OutType::f32;
  cfg.scale_layout = ScaleLayout::linear;
  replay_with_new_routings(cfg, 200);
}

TEST(MoeGraph, ContiguousMxfp4FullRangeReplays) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::mxfp4, MoeActivation::fp4, MoeLayout::contiguous, false, 32, 160, 128, 384, 3003);
  cfg.values = Values::full;
  cfg.alpha = AlphaMode::scalar;
  cfg.padded = true;
  replay_with_new_routings(cfg, 200);
}

// Eager runs through the plan's graph cache (MoeOptions::graph_cache): the same buffers with a new
// routing, new data and new poison every run; run 1 launches directly, run 2 captures the graph,
// later runs replay it. Every run is checked in full against the reference (guard bands, poison);
// a plan without the cache, a cache of one key alternating between two output buffers (evicting
// each other: always direct), and the replay count.
TEST(MoeGraphCache, EagerReplaysWithNewRoutingsMatchTheReference) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, true, 16, 256, 128, 256, 3101);
  cfg.num_tokens = 120;
  cfg.alpha = AlphaMode::device;
  const MoeWeightSet ws(cfg);
  MoeOptions direct_options = ws.options(), one_key = ws.options();
  direct_options.graph_cache = 0, one_key.graph_cache = 1;
  const MoeGemm cached(ws.weights(), ws.options()), direct(ws.weights(), direct_options),
      single(ws.weights(), one_key);
  const MoeBuffers buffers(ws), other(ws);
  const Stream stream;
  std::mt19937_64 rng(cfg.seed);
  for (int run = 0; run < 12; ++run) {
    MoeInputs in = make_inputs(ws, rng, make_routing(cfg, rng, static_cast<RoutingKind>(run % kRoutingKinds)));
    for (float& a : in.alphas) a = static_cast<float>(std::uniform_real_distribution<double>(-2.0, 2.0)(rng));
    const Poison poison = run % 2 ? Poison::finite : Poison::nan;
    std::vector<std::uint8_t> outputs[3];
    const MoeGemm* plans[3] = {&cached, &direct, &single};
    for (int k = 0; k < 3; ++k) {
      const MoeBuffers& b = (k == 2 && run % 2) ? other : buffers;  // `single` alternates its key
      b.upload(in, stream);
      b.reset_c(poison, stream);
      plans[k]->run(b.args(), stream);
      outputs[k] = b.download_c(stream);
      const std::vector<std::uint8_t> expected = expected_c(ws, b, in, poison, 1);
      ASSERT_TRUE(check_c(ws, b, in, outputs[k], expected)) << "run " << run << ", plan " << k;
    }
    EXPECT_TRUE(outputs[0] == outputs[1]) << "run " << run << ": the graph replay differs from direct launches";
  }
  EXPECT_EQ(cached.graph_replays(), 11u);
  EXPECT_EQ(direct.graph_replays(), 0u);
  EXPECT_EQ(single.graph_replays(), 0u);
}

// ---------------------------------------------------------------------------------------------
// Determinism, streams
// ---------------------------------------------------------------------------------------------

// Same inputs -> bitwise the same C: runs of one plan on a stream and through a graph, and runs of
// a second plan of the same weights on another stream (full-range values, f32 output: every
// accumulation bit shows).
// NaN FP32 values among owned cells (FP32 output; the NaN poison marks a cell never written).
std::int64_t nan_f32_cells(const std::vector<std::uint8_t>& cells) {
  std::int64_t nans = 0;
  for (std::size_t i = 0; i + 4 <= cells.size(); i += 4) {
    float v;
    std::memcpy(&v, cells.data() + i, 4);
    nans += std::isnan(v);
  }
  return nans;
}

TEST(MoeDeterminism, SameInputsSameBits) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg =
      base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, true, 32, 256, 1024, 2048, 4001);
  cfg.values = Values::full;
  cfg.out_type = OutType::f32;
  cfg.num_tokens = 1500;
  const MoeWeightSet ws(cfg);
  const MoeBuffers buffers(ws);
  std::mt19937_64 rng(cfg.seed);
  const MoeInputs in = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::skewed));
  const MoeGemm plan(ws.weights(), ws.options());
  ASSERT_TRUE(run_and_check(plan, ws, buffers, in));
  const MoeGemm plan2(ws.weights(), ws.options());
  const Stream s1, s2;
  buffers.upload(in, s1);
  const Graph graph(plan, buffers.args(), s1);
  std::vector<std::uint8_t> first;
  for (int run = 0; run < 8; ++run) {
    buffers.reset_c(Poison::nan, s1);
    const cudaStream_t s = run % 2 ? s2 : s1;
    if (run < 3)
      plan.run(buffers.args(), s);
    else if (run < 5)
      graph.launch(s);
    else
      plan2.run(buffers.args(), s);
    const std::vector<std::uint8_t> got = buffers.download_c(s);
    const std::vector<std::uint8_t> cells = owned_cells(ws, buffers, in.routing, got);
    ASSERT_FALSE(cells.empty());
    // No NaN scales: every owned element is a number, the NaN poison means "never written".
    EXPECT_EQ(nan_f32_cells(cells), 0) << "run " << run;
    if (run == 0)
      first = cells;
    else
      EXPECT_TRUE(cells == first) << "run " << run << " differs bitwise from run 0";
  }
}

// Determinism where a tile is split over CTAs: the 16-token class's partial last round runs
// stream-K (checked: the plan splits), full-range values and FP32 output, so the partial sums'
// order shows in the bits. Runs on one plan, two streams and a second plan are bitwise equal.
TEST(MoeDeterminism, StreamKSplitSameBits) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg =
      base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, true, 150, 256, 2048, 150 * 24, 4003);
  cfg.values = Values::full;
  cfg.out_type = OutType::f32;
  cfg.num_tokens = 1000;
  const MoeWeightSet ws(cfg);
  const MoeBuffers buffers(ws);
  MoeOptions o = ws.options();
  o.tuning.moe_split_gain16 = 0.0, o.tuning.moe_split_gain32 = 0.0;  // (split any partial last round)
  const MoeGemm plan(ws.weights(), o), plan2(ws.weights(), o);
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  // (150 one-tile experts of 32 k-blocks: a partial last round on any SM count below 150, split)
  ASSERT_GT(detail::moe_sk_tiles(cfg.experts, cfg.k / 64, sms, 0), 0) << sms << " SMs";
  std::mt19937_64 rng(cfg.seed);
  std::vector<int> counts(cfg.experts);
  for (int& c : counts) c = 1 + static_cast<int>(rng() % 16);  // (one 16-token tile per expert)
  const MoeInputs in = make_inputs(ws, rng, routing_from_counts(cfg, rng, counts, 0, "1..16 rows each"));
  ASSERT_TRUE(run_and_check(plan, ws, buffers, in));
  const Stream s1, s2;
  buffers.upload(in, s1);
  std::vector<std::uint8_t> first;
  for (int run = 0; run < 6; ++run) {
    const Poison poison = run % 2 ? Poison::finite : Poison::nan;  // (a cell left unwritten differs between runs)
    buffers.reset_c(poison, s1);
    ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
    const cudaStream_t s = run % 2 ? s2 : s1;
    (run < 4 ? plan : plan2).run(buffers.args(), s);
    const std::vector<std::uint8_t> cells = owned_cells(ws, buffers, in.routing, buffers.download_c(s));
    ASSERT_FALSE(cells.empty());
    EXPECT_EQ(nan_f32_cells(cells), 0) << "run " << run << " (" << to_string(poison) << " poison)";
    if (run == 0)
      first = cells;
    else
      EXPECT_TRUE(cells == first) << "run " << run << " differs bitwise from run 0";
  }
}

// Two runs of one plan on two streams with different routings and buffers, both in flight at
// once: the plan serialises them (its workspace is shared); both are right.
TEST(MoeStreams, TwoStreamsTwoRoutings) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg =
      base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, false, 24, 192, 256, 1024, 4101);
  const MoeWeightSet ws(cfg);
  const MoeGemm plan(ws.weights(), ws.options());
  const MoeBuffers b1(ws), b2(ws);
  std::mt19937_64 rng(cfg.seed);
  const MoeInputs in1 = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::full));
  const MoeInputs in2 = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::skewed));
  const Stream s1, s2;
  b1.upload(in1, s1);
  b2.upload(in2, s2);
  b1.reset_c(Poison::nan, s1);
  b2.reset_c(Poison::finite, s2);
  for (int i = 0; i < 3; ++i) {
    plan.run(b1.args(), s1);
    plan.run(b2.args(), s2);
  }
  const std::vector<std::uint8_t> got1 = b1.download_c(s1), got2 = b2.download_c(s2);
  EXPECT_TRUE(check_c(ws, b1, in1, got1, expected_c(ws, b1, in1, Poison::nan))) << in1.routing.describe();
  EXPECT_TRUE(check_c(ws, b2, in2, got2, expected_c(ws, b2, in2, Poison::finite))) << in2.routing.describe();
  EXPECT_NO_THROW(plan.check(s1));
}

// ---------------------------------------------------------------------------------------------
// Bad device data
// ---------------------------------------------------------------------------------------------

struct BadCase {
  const char* name;
  MoeLayout layout;
  bool gather;
  const char* argument;
  std::function<void(Routing&, const MoeConfig&)> corrupt;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

// The first row of expert e (contiguous).
int first_row(const Routing& r, int e) { return r.offsets[static_cast<std::size_t>(e)]; }

const BadCase kBadCases[] = {
    {"offsets_decreasing", MoeLayout::contiguous, false, "expert_offsets",
     [](Routing& r, const MoeConfig&) { r.offsets[4] = r.offsets[3] - 1; }},
    {"offsets_last_decreasing", MoeLayout::contiguous, false, "expert_offsets",
     [](Routing& r, const MoeConfig& c) {
       r.offsets[static_cast<std::size_t>(c.experts)] = r.offsets[static_cast<std::size_t>(c.experts) - 1] - 5;
     }},
    {"offsets_first_negative", MoeLayout::contiguous, false, "expert_offsets",
     [](Routing& r, const MoeConfig&) { r.offsets[0] = -1; }},
    {"offsets_first_int_min", MoeLayout::contiguous, false, "expert_offsets",
     [](Routing& r, const MoeConfig&) { r.offsets[0] = INT_MIN; }},
    {"offsets_end_past_capacity", MoeLayout::contiguous, false, "expert_offsets",
     [](Routing& r, const MoeConfig& c) { r.offsets[static_cast<std::size_t>(c.experts)] = c.capacity + 1; }},
    {"offsets_end_int_max", MoeLayout::contiguous, false, "expert_offsets",
     [](Routing& r, const MoeConfig& c) { r.offsets[static_cast<std::size_t>(c.experts)] = INT_MAX; }},
    {"offsets_all_past_capacity", MoeLayout::contiguous, false, "expert_offsets",
     [](Routing& r, const MoeConfig& c) { std::fill(r.offsets.begin(), r.offsets.end(), c.capacity + 10); }},
    {"offsets_jump_past_capacity", MoeLayout::contiguous, false, "expert_offsets",
     [](Routing& r, const MoeConfig&) {
       for (std::size_t e = 2; e < r.offsets.size(); ++e) r.offsets[e] += 100000;
     }},
    {"offsets_int_max_then_back", MoeLayout::contiguous, false, "expert_offsets",
     [](Routing& r, const MoeConfig&) { r.offsets[1] = INT_MAX; }},
    {"offsets_decreasing_with_gather", MoeLayout::contiguous, true, "expert_offsets",
     [](Routing& r, const MoeConfig&) { r.offsets[2] = r.offsets[1] - 3; }},
    {"counts_negative", MoeLayout::masked, false, "expert_counts",
     [](Routing& r, const MoeConfig&) { r.counts[3] = -1; }},
    {"counts_past_capacity", MoeLayout::masked, false, "expert_counts",
     [](Routing& r, const MoeConfig& c) { r.counts[0] = c.capacity + 1; }},
    {"counts_int_max", MoeLayout::masked, false, "expert_counts",
     [](Routing& r, const MoeConfig& c) { r.counts[static_cast<std::size_t>(c.experts) - 1] = INT_MAX; }},
    {"counts_int_min", MoeLayout::masked, false, "expert_counts",
     [](Routing& r, const MoeConfig&) { r.counts[5] = INT_MIN; }},
    {"gather_negative", MoeLayout::contiguous, true, "gather_index",
     [](Routing& r, const MoeConfig&) { r.gather[static_cast<std::size_t>(first_row(r, 2))] = -1; }},
    {"gather_num_tokens", MoeLayout::contiguous, true, "gather_index",
     [](Routing& r, const MoeConfig& c) { r.gather[static_cast<std::size_t>(r.offsets.back() - 1)] = c.a_rows(); }},
    {"gather_extremes", MoeLayout::contiguous, true, "gather_index",
     [](Routing& r, const MoeConfig&) {
       r.gather[static_cast<std::size_t>(first_row(r, 0))] = INT_MAX;
       r.gather[static_cast<std::size_t>(first_row(r, 5) + 1)] = INT_MIN;
     }},
};

// Every expert owns rows (the corruptions above pick rows of experts 0, 2 and 5).
Routing bad_case_routing(const MoeConfig& cfg, std::mt19937_64& rng) {
  return routing_from_counts(cfg, rng, {12, 20, 15, 9, 18, 11, 14, 16}, 0, "fixed");
}

MoeConfig bad_case_config(const BadCase& c, std::uint64_t seed) {
  MoeConfig cfg = base_config(Format::nvfp4, MoeActivation::fp4, c.layout, c.gather, 8, 72, 128,
                              c.layout == MoeLayout::masked ? 40 : 200, seed);
  cfg.out_type = OutType::f16;
  cfg.num_tokens = c.gather ? 150 : 0;
  return cfg;
}

// A bad run: for offsets and counts nothing of C is written; for a gather index out of range the
// rows with a bad index are undefined but every other row is right and nothing outside them is
// written. Either way check() throws naming the argument, once; a valid run afterwards is right.
void expect_bad_run(const MoeGemm& plan, const MoeWeightSet& ws, const MoeBuffers& buffers, const MoeInputs& bad,
                    const char* argument, cudaStream_t stream, std::function<void()> launch = nullptr) {
  const MoeConfig& cfg = ws.config();
  buffers.upload(bad, stream);
  buffers.reset_c(Poison::nan, stream);
  if (launch)
    launch();
  else
    plan.run(buffers.args(), stream);
  const std::vector<std::uint8_t> got = buffers.download_c(stream);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  if (std::string(argument) != "gather_index") {
    const std::vector<std::uint8_t> image = buffers.c_image(Poison::nan);
    const auto diff = std::mismatch(got.begin(), got.end(), image.begin());
    EXPECT_TRUE(diff.first == got.end()) << "a run with bad " << argument << " wrote C: arena byte "
                                         << diff.first - got.begin() << " (C starts at " << buffers.c_offset() << ")";
  } else {
    MoeInputs clean = bad;  // the reference needs valid indices: the bad rows are skipped anyway
    std::vector<char> skip(static_cast<std::size_t>(cfg.rows()), 0);
    for (std::size_t r = 0; r < clean.routing.gather.size(); ++r)
      if (clean.routing.gather[r] < 0 || clean.routing.gather[r] >= cfg.a_rows())
        skip[r] = 1, clean.routing.gather[r] = 0;
    EXPECT_TRUE(check_c(ws, buffers, bad, got, expected_c(ws, buffers, clean, Poison::nan), &skip));
  }
  EXPECT_TRUE(buffers.inputs_unchanged(bad, stream));
  expect_error([&] { plan.check(stream); }, argument);
  EXPECT_NO_THROW(plan.check(stream)) << "check() must clear the error word";
}

class MoeBadRouting : public ::testing::TestWithParam<BadCase> {};

TEST_P(MoeBadRouting, NothingWrittenErrorNamedThenRecovers) {
  REQUIRE_FAST_KERNEL();
  const BadCase& c = GetParam();
  std::uint64_t index = 0;  // (GetParam() is gtest's copy: find the case by name)
  while (index < std::size(kBadCases) && std::string(kBadCases[index].name) != c.name) ++index;
  const MoeConfig cfg = bad_case_config(c, 5000 + index);
  SCOPED_TRACE(cfg.describe());
  const MoeWeightSet ws(cfg);
  const MoeGemm plan(ws.weights(), ws.options());
  const MoeBuffers buffers(ws);
  const Stream stream;
  std::mt19937_64 rng(cfg.seed);
  EXPECT_TRUE(run_and_check(plan, ws, buffers, make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::uniform))));
  MoeInputs bad = make_inputs(ws, rng, bad_case_routing(cfg, rng));
  c.corrupt(bad.routing, cfg);
  SCOPED_TRACE("bad routing: " + bad.routing.describe());
  expect_bad_run(plan, ws, buffers, bad, c.argument, stream);
  EXPECT_TRUE(run_and_check(plan, ws, buffers, make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::full))));
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeBadRouting, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The error word collects every bad run until check(): a bad run followed by valid ones (which are
// right) still throws at the next check(), which then clears it.
TEST(MoeBadRoutingSequence, ErrorKeptUntilCheckThenCleared) {
  REQUIRE_FAST_KERNEL();
  const MoeConfig cfg = bad_case_config(kBadCases[0], 5101);
  const MoeWeightSet ws(cfg);
  const MoeGemm plan(ws.weights(), ws.options());
  const MoeBuffers buffers(ws);
  const Stream stream;
  std::mt19937_64 rng(cfg.seed);
  MoeInputs bad = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::balanced));
  bad.routing.offsets[0] = -4;
  buffers.upload(bad, stream);
  plan.run(buffers.args(), stream);
  const MoeInputs good = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::uniform));
  MoeRunOptions options;
  buffers.upload(good, stream);
  for (int i = 0; i < 2; ++i) {               // valid runs after the bad one are right (run_and_check's own
    buffers.reset_c(Poison::finite, stream);  // check() would throw: run them by hand)
    plan.run(buffers.args(), stream);
    EXPECT_TRUE(check_c(ws, buffers, good, buffers.download_c(stream), expected_c(ws, buffers, good, Poison::finite)));
  }
  expect_error([&] { plan.check(stream); }, "expert_offsets");
  EXPECT_NO_THROW(plan.check(stream));
  EXPECT_TRUE(run_and_check(plan, ws, buffers, good, options));
}

// A captured graph replayed with good, bad and good routings written into its buffers.
TEST(MoeBadRoutingSequence, BadRoutingInAGraphReplay) {
  REQUIRE_FAST_KERNEL();
  for (const BadCase* c : {&kBadCases[5], &kBadCases[12], &kBadCases[14]}) {
    const MoeConfig cfg = bad_case_config(*c, 5201);
    SCOPED_TRACE(std::string(c->name) + ": " + cfg.describe());
    const MoeWeightSet ws(cfg);
    const MoeGemm plan(ws.weights(), ws.options());
    const MoeBuffers buffers(ws);
    const Stream stream;
    const Graph graph(plan, buffers.args(), stream);
    std::mt19937_64 rng(cfg.seed);
    for (int i = 0; i < 3; ++i) {
      MoeInputs in =
          make_inputs(ws, rng, i == 1 ? bad_case_routing(cfg, rng) : make_routing(cfg, rng, RoutingKind::balanced));
      if (i == 1) {
        c->corrupt(in.routing, cfg);
        expect_bad_run(plan, ws, buffers, in, c->argument, stream, [&] { graph.launch(stream); });
        continue;
      }
      buffers.upload(in, stream);
      buffers.reset_c(Poison::finite, stream);
      graph.launch(stream);
      EXPECT_TRUE(check_c(ws, buffers, in, buffers.download_c(stream), expected_c(ws, buffers, in, Poison::finite)));
      EXPECT_NO_THROW(plan.check(stream));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host-side arguments
// ---------------------------------------------------------------------------------------------

// Each bad MoeArgs field is named, and a rejected run launches nothing (C untouched).
TEST(MoeRunArgs, ContiguousBadArgumentsNamed) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, true, 4, 64, 128, 100, 6001);
  cfg.num_tokens = 50;
  const MoeWeightSet ws(cfg);
  const MoeGemm plan(ws.weights(), ws.options());
  const MoeBuffers buffers(ws);
  const Stream stream;
  std::mt19937_64 rng(cfg.seed);
  const MoeInputs in = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::full));
  buffers.upload(in, stream);
  buffers.reset_c(Poison::nan, stream);
  const auto rejected = [&](const char* argument, const std::function<void(MoeArgs&)>& edit) {
    SCOPED_TRACE(argument);
    MoeArgs args = buffers.args();
    edit(args);
    expect_error([&] { plan.run(args, stream); }, argument);
    EXPECT_TRUE(buffers.download_c(stream) == buffers.c_image(Poison::nan)) << "a rejected run wrote C";
  };
  rejected("a", [](MoeArgs& a) { a.a = nullptr; });
  rejected("a", [&](MoeArgs& a) { a.a = buffers.device_a() + 8; });
  rejected("lda", [](MoeArgs& a) { a.lda = 0; });
  rejected("lda", [](MoeArgs& a) { a.lda = 48; });  // < K/2 = 64
  rejected("lda", [](MoeArgs& a) { a.lda = 72; });  // not a multiple of 16
  rejected("a_scales", [](MoeArgs& a) { a.a_scales = nullptr; });
  rejected("expert_offsets", [](MoeArgs& a) { a.expert_offsets = nullptr; });
  rejected("expert_offsets", [&](MoeArgs& a) {
    a.expert_offsets =
        reinterpret_cast<const int*>(reinterpret_cast<const std::uint8_t*>(buffers.device_offsets()) + 2);
  });
  rejected("expert_counts", [&](MoeArgs& a) { a.expert_counts = buffers.device_counts(); });
  rejected("gather_index", [&](MoeArgs& a) {
    a.gather_index = reinterpret_cast<const int*>(reinterpret_cast<const std::uint8_t*>(buffers.device_gather()) + 1);
  });
  rejected("num_tokens", [](MoeArgs& a) { a.num_tokens = 0; });
  rejected("c", [](MoeArgs& a) { a.c = nullptr; });
  rejected("c", [&](MoeArgs& a) { a.c = buffers.device_c() + 8; });
  rejected("ldc", [](MoeArgs& a) { a.ldc = 56; });  // < N = 64
  rejected("ldc", [](MoeArgs& a) { a.ldc = 68; });  // not a multiple of 8
  EXPECT_NO_THROW(plan.check(stream));
  EXPECT_TRUE(run_and_check(plan, ws, buffers, in));
}

TEST(MoeRunArgs, MaskedAndW4A16BadArgumentsNamed) {
  REQUIRE_FAST_KERNEL();
  const MoeConfig cfg = base_config(Format::mxfp4, MoeActivation::bf16, MoeLayout::masked, false, 4, 64, 128, 32, 6002);
  const MoeWeightSet ws(cfg);
  const MoeGemm plan(ws.weights(), ws.options());
  const MoeBuffers buffers(ws);
  const Stream stream;
  std::mt19937_64 rng(cfg.seed);
  const MoeInputs in = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::full));
  buffers.upload(in, stream);
  buffers.reset_c(Poison::nan, stream);
  const auto rejected = [&](const char* argument, const std::function<void(MoeArgs&)>& edit) {
    SCOPED_TRACE(argument);
    MoeArgs args = buffers.args();
    edit(args);
    expect_error([&] { plan.run(args, stream); }, argument);
    EXPECT_TRUE(buffers.download_c(stream) == buffers.c_image(Poison::nan)) << "a rejected run wrote C";
  };
  rejected("expert_counts", [](MoeArgs& a) { a.expert_counts = nullptr; });
  rejected("expert_offsets", [&](MoeArgs& a) { a.expert_offsets = buffers.device_offsets(); });
  rejected("gather_index", [&](MoeArgs& a) { a.gather_index = buffers.device_gather(), a.num_tokens = 10; });
  rejected("a_scales", [&](MoeArgs& a) { a.a_scales = buffers.device_a(); });  // bf16 activations have none
  rejected("lda", [](MoeArgs& a) { a.lda = 128; });                            // one FP4 row, half a bf16 row (K = 128)
  EXPECT_TRUE(run_and_check(plan, ws, buffers, in));
}

// A buffer of `bytes` bytes ending exactly at the end of a 2 MiB allocation (whatever the
// allocator rounds, one byte more would be outside it).
class TailBuffer {
 public:
  explicit TailBuffer(std::size_t bytes) : buffer_(kArena), bytes_(bytes) {}
  std::uint8_t* get() const { return buffer_.get() + kArena - bytes_; }

 private:
  static constexpr std::size_t kArena = std::size_t{2} << 20;
  DeviceBuffer buffer_;
  std::size_t bytes_;
};

TEST(MoePlanArgs, BadArgumentsNamed) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, false, 4, 64, 128, 64, 6101);
  cfg.alpha = AlphaMode::device;
  const MoeWeightSet ws(cfg);
  EXPECT_NO_THROW(MoeGemm(ws.weights(), ws.options()));
  const auto rejected = [&](const char* argument, const std::function<void(MoeWeights&, MoeOptions&)>& edit) {
    SCOPED_TRACE(argument);
    MoeWeights w = ws.weights();
    MoeOptions o = ws.options();
    edit(w, o);
    expect_error([&] { MoeGemm plan(w, o); }, argument);
  };
  rejected("weights.experts", [](MoeWeights& w, MoeOptions&) { w.experts = 0; });
  rejected("weights.experts", [](MoeWeights& w, MoeOptions&) { w.experts = -3; });
  rejected("weights.experts", [](MoeWeights& w, MoeOptions&) { w.experts = 513; });
  rejected("weights.n", [](MoeWeights& w, MoeOptions&) { w.n = 0; });
  rejected("weights.k", [](MoeWeights& w, MoeOptions&) { w.k = 0; });
  rejected("weights.k", [](MoeWeights& w, MoeOptions&) { w.k = 136; });  // not a multiple of 16
  rejected("weights.k", [](MoeWeights& w, MoeOptions& o) { o.format = Format::mxfp4, w.k = 80; });  // nor of 32
  rejected("options.capacity", [](MoeWeights&, MoeOptions& o) { o.capacity = 0; });
  rejected("options.capacity", [](MoeWeights&, MoeOptions& o) { o.capacity = -5; });
  rejected("options.capacity", [](MoeWeights&, MoeOptions& o) { o.capacity = 1 << 30; });  // rows x k-blocks >= 2^31
  rejected("options.capacity",
           [](MoeWeights& w, MoeOptions& o) { w.experts = 512, o.layout = MoeLayout::masked, o.capacity = 1 << 22; });
  rejected("options.activation", [](MoeWeights&, MoeOptions& o) { o.activation = MoeActivation::bf16; });  // nvfp4
  rejected("options.format", [](MoeWeights&, MoeOptions& o) { o.format = static_cast<Format>(7); });
  rejected("options.scale_layout", [](MoeWeights&, MoeOptions& o) { o.scale_layout = static_cast<ScaleLayout>(7); });
  rejected("options.out_type", [](MoeWeights&, MoeOptions& o) { o.out_type = static_cast<OutType>(7); });
  rejected("options.activation", [](MoeWeights&, MoeOptions& o) { o.activation = static_cast<MoeActivation>(7); });
  rejected("options.layout", [](MoeWeights&, MoeOptions& o) { o.layout = static_cast<MoeLayout>(7); });
  rejected("weights.w", [](MoeWeights& w, MoeOptions&) { w.w = nullptr; });
  rejected("weights.w", [](MoeWeights& w, MoeOptions&) { w.w = static_cast<const std::uint8_t*>(w.w) + 8; });
  rejected("weights.scales", [](MoeWeights& w, MoeOptions&) { w.scales = nullptr; });
  rejected("weights.scales",
           [](MoeWeights& w, MoeOptions&) { w.scales = static_cast<const std::uint8_t*>(w.scales) + 4; });
  rejected("weights.ldw", [](MoeWeights& w, MoeOptions&) { w.ldw = 48; });  // < K/2
  rejected("weights.ldw", [](MoeWeights& w, MoeOptions&) { w.ldw = 72; });  // not a multiple of 16
  rejected("weights.expert_stride", [](MoeWeights& w, MoeOptions&) { w.expert_stride = 64 * 64 - 16; });
  rejected("weights.expert_stride", [](MoeWeights& w, MoeOptions&) { w.expert_stride = 64 * 64 + 8; });
  rejected("weights.scale_expert_stride", [](MoeWeights& w, MoeOptions&) {
    w.scale_expert_stride = static_cast<std::int64_t>(formats::blocked_scale_bytes(64, 8)) - 16;
  });
  rejected("weights.scale_expert_stride", [](MoeWeights& w, MoeOptions&) {
    w.scale_expert_stride =
        static_cast<std::int64_t>(formats::blocked_scale_bytes(64, 8)) + 4;  // blocked: 16-byte steps
  });
  rejected("weights.scale_expert_stride", [](MoeWeights& w, MoeOptions& o) {
    o.scale_layout = ScaleLayout::linear, w.scale_expert_stride = 64 * 8 - 1;
  });
  rejected("weights.alpha", [](MoeWeights& w, MoeOptions&) {
    w.alpha_device = nullptr, w.alpha = std::numeric_limits<float>::quiet_NaN();
  });
  rejected("weights.alpha", [](MoeWeights& w, MoeOptions&) { w.alpha_device = nullptr, w.alpha = INFINITY; });
  rejected("weights.alpha_device", [](MoeWeights& w, MoeOptions&) {
    w.alpha_device = reinterpret_cast<const float*>(reinterpret_cast<const std::uint8_t*>(w.alpha_device) + 2);
  });
  // Host memory where device memory is needed.
  std::vector<std::uint8_t> host(ws.w.size() + 64);
  rejected("weights.w", [&](MoeWeights& w, MoeOptions&) {
    w.w = host.data() + (16 - reinterpret_cast<std::uintptr_t>(host.data()) % 16) % 16;
  });
}

// Weight buffers sized for E - 1 experts (check_device_buffer): the weights, their scales and the
// device alphas; exactly E experts' worth at the very end of an allocation is accepted.
TEST(MoePlanArgs, BuffersTooSmallForTheExperts) {
  REQUIRE_FAST_KERNEL();
  for (const ScaleLayout layout : {ScaleLayout::blocked, ScaleLayout::linear}) {
    SCOPED_TRACE(to_string(layout));
    MoeConfig cfg = base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, false, 5, 200, 256, 64, 6201);
    cfg.scale_layout = layout;
    cfg.alpha = AlphaMode::device;
    const MoeWeightSet ws(cfg);
    const int E = cfg.experts;
    const std::int64_t w_bytes = (E - 1) * ws.expert_stride + (cfg.n - 1) * ws.ldw + cfg.k / 2;
    const std::int64_t s_bytes =
        (E - 1) * ws.scale_stride + static_cast<std::int64_t>(formats::scale_bytes(layout, cfg.n, ws.cols));
    ASSERT_EQ(w_bytes % 16, 0);
    ASSERT_EQ(s_bytes % 16, 0);
    {  // exact sizes at the very end of their allocations: accepted
      const TailBuffer w(static_cast<std::size_t>(w_bytes)), s(static_cast<std::size_t>(s_bytes)), a(sizeof(float) * E);
      FP4GEMM_TEST_CUDA(cudaMemcpy(w.get(), ws.w.data(), static_cast<std::size_t>(w_bytes), cudaMemcpyHostToDevice));
      FP4GEMM_TEST_CUDA(
          cudaMemcpy(s.get(), ws.scales.data(), static_cast<std::size_t>(s_bytes), cudaMemcpyHostToDevice));
      FP4GEMM_TEST_CUDA(cudaMemcpy(a.get(), ws.device_alphas.data(), sizeof(float) * E, cudaMemcpyHostToDevice));
      MoeWeights mw = ws.weights();
      mw.w = w.get(), mw.scales = s.get(), mw.alpha_device = reinterpret_cast<const float*>(a.get());
      EXPECT_NO_THROW(MoeGemm(mw, ws.options()));
    }
    {  // 16 bytes short
      const TailBuffer w(static_cast<std::size_t>(w_bytes - 16));
      MoeWeights mw = ws.weights();
      mw.w = w.get();
      expect_error([&] { MoeGemm plan(mw, ws.options()); }, "weights.w", "bytes short");
    }
    {
      const TailBuffer s(static_cast<std::size_t>(s_bytes - 16));
      MoeWeights mw = ws.weights();
      mw.scales = s.get();
      expect_error([&] { MoeGemm plan(mw, ws.options()); }, "weights.scales", "bytes short");
    }
    {  // E - 1 experts' alphas
      const TailBuffer a(sizeof(float) * (E - 1));
      MoeWeights mw = ws.weights();
      mw.alpha_device = reinterpret_cast<const float*>(a.get());
      expect_error([&] { MoeGemm plan(mw, ws.options()); }, "weights.alpha_device", "bytes short");
    }
  }
}

TEST(MoePlanArgs, W4A16NeedsMxfp4Weights) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::mxfp4, MoeActivation::bf16, MoeLayout::contiguous, false, 2, 64, 128, 16, 6301);
  const MoeWeightSet ws(cfg);
  EXPECT_NO_THROW(MoeGemm(ws.weights(), ws.options()));
  MoeOptions o = ws.options();
  o.format = Format::nvfp4;  // K = 128 is a multiple of 16: only the activation type is wrong
  expect_error([&] { MoeGemm plan(ws.weights(), o); }, "options.activation");
}

// ---------------------------------------------------------------------------------------------
// The plan object
// ---------------------------------------------------------------------------------------------

TEST(MoeGemmObject, MovedFromThrowsPlan) {
  REQUIRE_FAST_KERNEL();
  const MoeConfig cfg =
      base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, false, 3, 64, 64, 32, 7001);
  const MoeWeightSet ws(cfg);
  const MoeBuffers buffers(ws);
  const Stream stream;
  MoeGemm a(ws.weights(), ws.options());
  MoeGemm b(std::move(a));
  const auto moved = [&](const MoeGemm& p) {
    expect_error([&] { p.run(buffers.args(), stream); }, "plan");
    expect_error([&] { p.check(stream); }, "plan");
    expect_error([&] { (void)p.describe(); }, "plan");
    expect_error([&] { (void)p.options(); }, "plan");
    expect_error([&] { (void)p.experts(); }, "plan");
    expect_error([&] { (void)p.n(); }, "plan");
    expect_error([&] { (void)p.k(); }, "plan");
    expect_error([&] { (void)p.rows(); }, "plan");
    expect_error([&] { (void)p.device_bytes(); }, "plan");
  };
  moved(a);
  std::mt19937_64 rng(cfg.seed);
  EXPECT_TRUE(run_and_check(b, ws, buffers, make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::full))));
  MoeGemm c(ws.weights(), ws.options());
  c = std::move(b);  // move assignment: b holds nothing, c the plan
  moved(b);
  EXPECT_TRUE(run_and_check(c, ws, buffers, make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::uniform))));
  a = std::move(c);  // a moved-from plan can be assigned to
  EXPECT_TRUE(run_and_check(a, ws, buffers, make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::skewed))));
}

TEST(MoeGemmObject, Accessors) {
  REQUIRE_FAST_KERNEL();
  for (const MoeLayout layout : {MoeLayout::contiguous, MoeLayout::masked}) {
    MoeConfig cfg = base_config(Format::mxfp4, MoeActivation::bf16, layout, false, 5, 72, 96, 40, 7101);
    cfg.out_type = OutType::f32;
    const MoeWeightSet ws(cfg);
    const MoeGemm plan(ws.weights(), ws.options());
    EXPECT_EQ(plan.experts(), 5);
    EXPECT_EQ(plan.n(), 72);
    EXPECT_EQ(plan.k(), 96);
    EXPECT_EQ(plan.rows(), layout == MoeLayout::masked ? 200 : 40);
    EXPECT_EQ(plan.options().format, Format::mxfp4);
    EXPECT_EQ(plan.options().activation, MoeActivation::bf16);
    EXPECT_EQ(plan.options().layout, layout);
    EXPECT_EQ(plan.options().out_type, OutType::f32);
    EXPECT_EQ(plan.options().capacity, 40);
    EXPECT_GE(plan.options().device, 0);
    EXPECT_GT(plan.device_bytes(), 0u);
    EXPECT_NE(plan.describe().find("5 experts"), std::string::npos) << plan.describe();
  }
}

// ---------------------------------------------------------------------------------------------
// compute-sanitizer subset: --gtest_filter='MoeSanitizer.*:MoeBadRouting.*'
// ---------------------------------------------------------------------------------------------

// Small problems in every mode: two token tiles (> 256 rows), N and K off the tile sizes, padded
// strides, linear and blocked weight scales, gather, masked, W4A16, rows left untouched.
TEST(MoeSanitizer, EveryModeSmall) {
  REQUIRE_FAST_KERNEL();
  struct Mode {
    Format format;
    MoeActivation act;
    MoeLayout layout;
    bool gather;
    ScaleLayout scales;
  };
  const Mode modes[] = {
      {Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, false, ScaleLayout::linear},
      {Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, true, ScaleLayout::blocked},
      {Format::nvfp4, MoeActivation::fp4, MoeLayout::masked, false, ScaleLayout::blocked},
      {Format::mxfp4, MoeActivation::fp4, MoeLayout::contiguous, true, ScaleLayout::linear},
      {Format::mxfp4, MoeActivation::bf16, MoeLayout::contiguous, true, ScaleLayout::blocked},
      {Format::mxfp4, MoeActivation::bf16, MoeLayout::masked, false, ScaleLayout::linear},
  };
  int i = 0;
  for (const Mode& m : modes) {
    const bool masked = m.layout == MoeLayout::masked;
    MoeConfig cfg = base_config(m.format, m.act, m.layout, m.gather, 3, 40, 3 * scale_block_size(m.format),
                                masked ? 70 : 300, 8001 + i++);
    cfg.scale_layout = m.scales;
    cfg.num_tokens = m.gather ? 120 : 0;
    cfg.padded = true;
    cfg.alpha = AlphaMode::device;
    cfg.out_type = static_cast<OutType>(i % 3);
    expect_routings(cfg, [&](std::mt19937_64& rng) {
      return std::vector<Routing>{make_routing(cfg, rng, RoutingKind::full),
                                  make_routing(cfg, rng, RoutingKind::shifted),
                                  make_routing(cfg, rng, RoutingKind::one_expert)};
    });
  }
}

TEST(MoeSanitizer, GraphReplaysWithABadRoutingBetween) {
  REQUIRE_FAST_KERNEL();
  MoeConfig cfg = base_config(Format::nvfp4, MoeActivation::fp4, MoeLayout::contiguous, true, 4, 48, 64, 96, 8101);
  cfg.num_tokens = 60;
  const MoeWeightSet ws(cfg);
  const MoeGemm plan(ws.weights(), ws.options());
  const MoeBuffers buffers(ws);
  const Stream stream;
  const Graph graph(plan, buffers.args(), stream);
  std::mt19937_64 rng(cfg.seed);
  for (int i = 0; i < 12; ++i) {
    const bool bad = i == 4 || i == 8;
    MoeInputs in = make_inputs(ws, rng,
                               bad ? routing_from_counts(cfg, rng, {30, 0, 20, 10}, 0, "fixed")
                                   : make_routing(cfg, rng, static_cast<RoutingKind>(i % kRoutingKinds)));
    if (bad) {
      if (i == 4)
        in.routing.offsets.back() = INT_MAX;
      else
        in.routing.gather[0] = INT_MIN, in.routing.gather[59] = 60;
      expect_bad_run(plan, ws, buffers, in, i == 4 ? "expert_offsets" : "gather_index", stream,
                     [&] { graph.launch(stream); });
      continue;
    }
    buffers.upload(in, stream);
    buffers.reset_c(i % 2 ? Poison::finite : Poison::nan, stream);
    graph.launch(stream);
    EXPECT_TRUE(check_c(ws, buffers, in, buffers.download_c(stream),
                        expected_c(ws, buffers, in, i % 2 ? Poison::finite : Poison::nan)))
        << "replay " << i << ": " << in.routing.describe();
    EXPECT_NO_THROW(plan.check(stream));
  }
}

}  // namespace
}  // namespace fp4gemm::test::moe
