// GPU tier: fp4gemm::EpExchange with W = 1, 2, 4 ranks sharing one device (plain device buffers as
// the exchange buffers; a device synchronisation between phases is the barrier). Each rank holds
// E/W experts as a MoeLayer over its slice of the global weights (pointer offsets: no copies), runs
// its local top-k layer on the rows it received (MoeLayerArgs::token_count, stopped before its
// combine: expert_rows / row_of in the exchange buffer), and every rank's
// output must equal the single-GPU layer over all experts on the same tokens, bit for bit: W4A4
// NVFP4 and MXFP4 (rows quantised inside the dispatch) and W4A16 (bf16 rows); ids -1 and E
// included, one rank with no tokens; the receive rows past the count keep id -1.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fp4gemm/ep.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe_layer.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

bool available() { return device_count() > 0 && device_info().has_fast_kernel; }

struct Rows {
  std::vector<std::uint16_t> x;  // bf16 [T, H]
  std::vector<int> ids;          // [T, k]
  std::vector<float> w;          // [T, k]
  int tokens = 0;
};

template <typename T>
std::unique_ptr<DeviceBuffer> upload(const std::vector<T>& v) {
  auto d = std::make_unique<DeviceBuffer>(std::max<std::size_t>(16, v.size() * sizeof(T)));
  if (!v.empty()) FP4GEMM_TEST_CUDA(cudaMemcpy(d->get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

void run_case(int world, Format format, MoeActivation act, std::uint64_t seed) {
  const int E = 8, H = 128, I = 64, k = 3, max_tokens = 12, vec = scale_block_size(format), local = E / world;
  std::mt19937_64 rng(seed);
  const auto w13 = random_packed(rng, Values::gpumode, E * 2 * I, H, H / 2);
  const auto s13 = random_scales(rng, format, Values::gpumode, E * 2 * I, H / vec);
  const auto w2 = random_packed(rng, Values::full, E * H, I, I / 2);
  const auto s2 = random_scales(rng, format, Values::gpumode, E * H, I / vec);
  auto d_w13 = upload(w13), d_s13 = upload(s13), d_w2 = upload(w2), d_s2 = upload(s2);

  MoeLayerOptions o;
  o.format = format, o.activations = act, o.scale_layout = ScaleLayout::linear, o.topk = k;
  o.batch_invariant = true;  // (as fp4gemm.ep builds its layers: rows independent of their batch)
  if (format == Format::nvfp4 && act == MoeActivation::fp4) o.a1_scale = 0.25f, o.a2_scale = 0.5f;
  auto weights = [&](int e0, int experts) {
    MoeLayerWeights w;
    w.experts = experts, w.hidden = H, w.inter = I;
    w.w13 = d_w13->get() + std::size_t{1} * e0 * 2 * I * H / 2;
    w.w13_scales = d_s13->get() + std::size_t{1} * e0 * 2 * I * H / vec;
    w.w2 = d_w2->get() + std::size_t{1} * e0 * H * I / 2;
    w.w2_scales = d_s2->get() + std::size_t{1} * e0 * H * I / vec;
    return w;
  };
  MoeLayerOptions full_o = o;
  full_o.max_tokens = max_tokens;
  const MoeLayer single(weights(0, E), full_o);

  EpConfig cfg;
  cfg.world = world, cfg.experts = E, cfg.topk = k, cfg.hidden = H, cfg.max_tokens = max_tokens;
  cfg.rows = act == MoeActivation::bf16 ? EpRows::bf16 : format == Format::nvfp4 ? EpRows::nvfp4 : EpRows::mxfp4;
  cfg.global_scale = o.a1_scale;
  const std::size_t bytes = EpExchange::buffer_bytes(cfg);
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<void*> bases;
  for (int r = 0; r < world; ++r) {
    buffers.push_back(std::make_unique<DeviceBuffer>(bytes));
    bases.push_back(buffers.back()->get());
  }
  std::vector<std::unique_ptr<EpExchange>> ex;
  std::vector<std::unique_ptr<MoeLayer>> layers;
  MoeLayerOptions local_o = o;
  local_o.max_tokens = world * max_tokens;  // (top-k over each received token's k slots)
  local_o.combine = false;                  // (every run stops before the combine: no output workspace)
  for (int r = 0; r < world; ++r) {
    EpConfig c = cfg;
    c.rank = r;
    ex.push_back(std::make_unique<EpExchange>(c, bases));
    layers.push_back(std::make_unique<MoeLayer>(weights(r * local, local), local_o));
  }
  const int capacity = ex[0]->received().capacity;
  ASSERT_EQ(capacity, world * max_tokens);
  ASSERT_EQ(ex[0]->received().topk, k);

  for (int step = 0; step < 4; ++step) {
    std::vector<Rows> in(world);
    std::vector<std::unique_ptr<DeviceBuffer>> dx, dids, dw, dout;
    std::uniform_real_distribution<float> val(-2.0f, 2.0f), wt(0.05f, 1.0f);
    for (int r = 0; r < world; ++r) {
      Rows& t = in[r];
      t.tokens = (step + r) % 5 == 4 ? 0 : static_cast<int>(rng() % max_tokens) + 1;
      for (int i = 0; i < t.tokens * H; ++i) {
        const float v = val(rng) * static_cast<float>(1 << (rng() % 8));
        __nv_bfloat16 b = __float2bfloat16(v);
        std::uint16_t bits;
        std::memcpy(&bits, &b, 2);
        t.x.push_back(bits);
      }
      for (int i = 0; i < t.tokens; ++i) {
        std::vector<int> perm(E);
        for (int e = 0; e < E; ++e) perm[e] = e;
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int j = 0; j < k; ++j) {
          int id = perm[j];
          if (rng() % 10 == 0) id = rng() % 2 ? -1 : E;  // outside [0, E): skipped
          t.ids.push_back(id);
          t.w.push_back(wt(rng));
        }
      }
      dx.push_back(upload(t.x)), dids.push_back(upload(t.ids)), dw.push_back(upload(t.w));
      dout.push_back(std::make_unique<DeviceBuffer>(std::max<std::size_t>(16, std::size_t{2} * t.tokens * H)));
      FP4GEMM_TEST_CUDA(cudaMemset(dout.back()->get(), 0xFF, std::max<std::size_t>(16, std::size_t{2} * t.tokens * H)));
    }
    auto args = [&](int r) {
      EpStepArgs a;
      a.hidden = dx[r]->get(), a.topk_ids = dids[r]->get(), a.topk_weights = dw[r]->get();
      a.tokens = in[r].tokens, a.out = dout[r]->get();
      return a;
    };
    for (int r = 0; r < world; ++r) ex[r]->send_counts(args(r));
    FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
    for (int r = 0; r < world; ++r) ex[r]->send_rows(args(r));
    FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
    for (int r = 0; r < world; ++r) {
      const EpReceived got = ex[r]->received();
      MoeLayerArgs la;
      if (cfg.rows == EpRows::bf16) la.hidden = got.rows;
      else la.hidden_packed = got.packed, la.hidden_scales = got.scales;
      la.topk_ids = got.ids, la.tokens = capacity, la.token_count = got.count;
      la.expert_rows = got.y, la.row_of = got.row_of;  // (stopped before its combine: the origins combine)
      layers[r]->run(la);
    }
    FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
    for (int r = 0; r < world; ++r) ex[r]->combine(args(r));
    FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());

    int received = 0, rows_received = 0;
    for (int r = 0; r < world; ++r) {
      const Rows& t = in[r];
      // What this rank received: the sum of its counts; each row a token with at least one of its k
      // slots here (a local id), the others -1; all ids -1 past the count.
      const EpReceived got = ex[r]->received();
      int count = 0;
      FP4GEMM_TEST_CUDA(cudaMemcpy(&count, got.count, 4, cudaMemcpyDeviceToHost));
      std::vector<int> ids(static_cast<std::size_t>(capacity) * k);
      FP4GEMM_TEST_CUDA(cudaMemcpy(ids.data(), got.ids, 4 * ids.size(), cudaMemcpyDeviceToHost));
      for (int i = 0; i < capacity; ++i) {
        int here = 0;
        for (int j = 0; j < k; ++j) {
          const int id = ids[static_cast<std::size_t>(i) * k + j];
          if (i < count) ASSERT_TRUE(id == -1 || (id >= 0 && id < local)) << "rank " << r << " row " << i << " slot " << j;
          else ASSERT_EQ(id, -1) << "rank " << r << " row " << i << " past the count " << count;
          here += id >= 0;
        }
        if (i < count) ASSERT_GT(here, 0) << "rank " << r << " row " << i << " has no expert here";
        received += here;
      }
      rows_received += count;
      if (t.tokens == 0) continue;
      DeviceBuffer want(std::size_t{2} * t.tokens * H);
      MoeLayerArgs sa;
      sa.hidden = dx[r]->get(), sa.topk_ids = dids[r]->get(), sa.topk_weights = dw[r]->get();
      sa.tokens = t.tokens, sa.out = want.get();
      single.run(sa);
      std::vector<std::uint16_t> a(t.tokens * H), b(t.tokens * H);
      FP4GEMM_TEST_CUDA(cudaMemcpy(a.data(), dout[r]->get(), 2 * a.size(), cudaMemcpyDeviceToHost));
      FP4GEMM_TEST_CUDA(cudaMemcpy(b.data(), want.get(), 2 * b.size(), cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < a.size(); ++i)
        ASSERT_EQ(a[i], b[i]) << "world " << world << " step " << step << " rank " << r << " element " << i;
    }
    int sent = 0, rows_sent = 0;
    for (const Rows& t : in) {
      for (int id : t.ids) sent += id >= 0 && id < E;
      for (int i = 0; i < t.tokens; ++i) {  // a token travels once to each rank holding one of its experts
        unsigned mask = 0;
        for (int j = 0; j < k; ++j) {
          const int id = t.ids[static_cast<std::size_t>(i) * k + j];
          if (id >= 0 && id < E) mask |= 1u << (id / local);
        }
        rows_sent += __builtin_popcount(mask);
      }
    }
    EXPECT_EQ(received, sent) << "every valid pair lands on exactly one rank";
    EXPECT_EQ(rows_received, rows_sent) << "a token's row once per rank holding one of its experts";
  }
}

class EpExchangeGpu : public ::testing::TestWithParam<int> {};

TEST_P(EpExchangeGpu, EqualsTheSingleGpuLayer) {
  if (!available()) GTEST_SKIP() << "needs an sm_90 GPU";
  const int world = GetParam();
  run_case(world, Format::nvfp4, MoeActivation::fp4, 10 + world);
  run_case(world, Format::mxfp4, MoeActivation::fp4, 20 + world);
  run_case(world, Format::mxfp4, MoeActivation::bf16, 30 + world);
}

INSTANTIATE_TEST_SUITE_P(Worlds, EpExchangeGpu, ::testing::Values(1, 2, 4));

TEST(EpExchangeGpu, BadArgumentsNamed) {
  if (!available()) GTEST_SKIP() << "needs an sm_90 GPU";
  EpConfig c;
  c.world = 2, c.experts = 8, c.topk = 2, c.hidden = 64, c.max_tokens = 4, c.rows = EpRows::nvfp4;
  DeviceBuffer a(EpExchange::buffer_bytes(c)), b(EpExchange::buffer_bytes(c));
  auto named = [](auto&& f, const std::string& argument) {
    try {
      f();
      ADD_FAILURE() << "no error for a bad " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  };
  named([&] { EpExchange x(c, std::vector<void*>{a.get()}); }, "buffers");                  // one buffer for two ranks
  named([&] { EpExchange x(c, std::vector<void*>{a.get() + 16, b.get()}); }, "buffers");    // misaligned
  std::vector<std::uint8_t> host(1 << 16);
  void* host_aligned = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(host.data()) + 255) / 256 * 256);
  named([&] { EpExchange x(c, std::vector<void*>{host_aligned, b.get()}); }, "buffers");  // not device memory
  EpExchange x(c, std::vector<void*>{a.get(), b.get()});
  EpStepArgs s;
  s.tokens = 5;
  named([&] { x.send_counts(s); }, "tokens");
  s.tokens = 2;
  named([&] { x.send_counts(s); }, "topk_ids");
  s.topk_ids = a.get();
  named([&] { x.send_rows(s); }, "hidden");
  s.hidden = b.get(), s.ld_hidden = 60;
  named([&] { x.send_rows(s); }, "ld_hidden");
  named([&] { x.combine(s); }, "topk_weights");
  s.topk_weights = a.get();
  named([&] { x.combine(s); }, "out");
  EXPECT_NE(x.describe().find("rank 0 of 2"), std::string::npos);
  EpExchange moved(std::move(x));
  named([&] { (void)x.received(); }, "exchange");  // used after being moved from
  EXPECT_EQ(moved.config().world, 2);
}

}  // namespace
}  // namespace fp4gemm::test
