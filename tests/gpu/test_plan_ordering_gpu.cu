// GPU tier: plan-time reads of the caller's weights are ordered after the caller's stream, and a
// plan's copies are remade on request (MoeGemm::reload_scales).
//
// The defect these pin down: a plan's set-up (the blocked copy of linear scales, the MXFP4 scale
// scan) ran on a private stream that did not wait for the stream that had just written the
// weights, so it could copy stale bytes (NaN scale codes in a recycled allocation: an all-NaN
// output, no error). Here the scales are written on a non-blocking stream behind a ~100 ms kernel
// while the device buffer holds 0xFF bytes (NaN codes); a plan built with that stream must see the
// real scales.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "fp4gemm/moe.hpp"
#include "gpu/moe_problem.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test::moe {
namespace {

bool fast_kernel_available() { return device_count() > 0 && device_info().has_fast_kernel; }

#define REQUIRE_FAST_KERNEL() \
  if (!fast_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the fused kernel cannot run here"

// Holds its stream for `ns` nanoseconds.
__global__ void spin_for(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

MoeConfig linear_config(Format f, std::uint64_t seed) {
  MoeConfig cfg;
  cfg.format = f;
  cfg.scale_layout = ScaleLayout::linear;
  cfg.experts = 8, cfg.n = 256, cfg.k = 512, cfg.capacity = 128;
  cfg.max_scale_code = f == Format::mxfp4 ? 128 : 0;  // MXFP4: the one-multiply decode
  cfg.seed = seed;
  return cfg;
}

// The scales of `ws` replaced on `stream` by `src` (device bytes of the same size) after ~100 ms,
// while the buffer holds NaN codes until then.
void rewrite_scales_late(const MoeWeightSet& ws, const std::uint8_t* src, cudaStream_t stream) {
  FP4GEMM_TEST_CUDA(cudaMemset(ws.device_scales(), 0xFF, ws.scales.size()));
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
  spin_for<<<1, 1, 0, stream>>>(100'000'000ull);
  FP4GEMM_TEST_CUDA(cudaGetLastError());
  FP4GEMM_TEST_CUDA(cudaMemcpyAsync(ws.device_scales(), src, ws.scales.size(), cudaMemcpyDeviceToDevice, stream));
}

class PlanOrdering : public ::testing::TestWithParam<Format> {};

TEST_P(PlanOrdering, PlanReadsWhatTheCallersStreamWrote) {
  REQUIRE_FAST_KERNEL();
  const MoeConfig cfg = linear_config(GetParam(), 41);
  const MoeWeightSet ws(cfg);
  DeviceBuffer saved(ws.scales.size());
  FP4GEMM_TEST_CUDA(cudaMemcpy(saved.get(), ws.device_scales(), ws.scales.size(), cudaMemcpyDeviceToDevice));
  const Stream writer;
  rewrite_scales_late(ws, saved.get(), writer);
  const MoeGemm plan(ws.weights(), ws.options(), writer);  // set-up waits for `writer`
  const MoeBuffers buffers(ws);
  std::mt19937_64 rng(cfg.seed);
  const MoeInputs in = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::uniform));
  EXPECT_TRUE(run_and_check(plan, ws, buffers, in));
}

TEST_P(PlanOrdering, ReloadScalesSeesNewScales) {
  REQUIRE_FAST_KERNEL();
  const MoeConfig cfg = linear_config(GetParam(), 43);
  MoeConfig other_cfg = cfg;
  other_cfg.seed = 44;
  const MoeWeightSet ws(cfg), other(other_cfg);  // same shapes, other values
  const MoeGemm plan(ws.weights(), ws.options());
  const MoeBuffers buffers(ws);
  std::mt19937_64 rng(cfg.seed);
  const MoeInputs in = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::uniform));
  ASSERT_TRUE(run_and_check(plan, ws, buffers, in));
  // `other`'s weights and scales into the plan's buffers, late on a stream; the packed weights
  // are read at every run, the scales from the plan's copy: reload_scales on that stream.
  const Stream writer;
  FP4GEMM_TEST_CUDA(cudaMemcpy(ws.device_w(), other.device_w(), ws.w.size(), cudaMemcpyDeviceToDevice));
  rewrite_scales_late(ws, other.device_scales(), writer);
  plan.reload_scales(writer);
  FP4GEMM_TEST_CUDA(cudaStreamSynchronize(writer));
  // The plan on ws's buffers (now holding other's weights) with new activations, checked
  // against other's host data.
  const MoeInputs in2 = make_inputs(other, rng, make_routing(other_cfg, rng, RoutingKind::uniform));
  const Stream s;
  buffers.upload(in2, s);
  buffers.reset_c(Poison::nan, s);
  plan.run(buffers.args(), s);
  const std::vector<std::uint8_t> got = buffers.download_c(s);
  plan.check(s);
  EXPECT_TRUE(check_c(other, buffers, in2, got, expected_c(other, buffers, in2, Poison::nan)));
}

INSTANTIATE_TEST_SUITE_P(Formats, PlanOrdering, ::testing::Values(Format::nvfp4, Format::mxfp4),
                         [](const auto& info) { return std::string(info.param == Format::nvfp4 ? "nvfp4" : "mxfp4"); });

TEST(PlanOrdering, OneMultiplyPlanRefusesLargeCodesAndKeepsItsCopy) {
  REQUIRE_FAST_KERNEL();
  const MoeConfig cfg = linear_config(Format::mxfp4, 47);
  const MoeWeightSet ws(cfg);
  const MoeGemm plan(ws.weights(), ws.options());
  ASSERT_NE(plan.describe().find("one multiply"), std::string::npos) << plan.describe();
  const MoeBuffers buffers(ws);
  std::mt19937_64 rng(cfg.seed);
  const MoeInputs in = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::uniform));
  const std::uint8_t big = 200, old = ws.scales[5];
  FP4GEMM_TEST_CUDA(cudaMemcpy(ws.device_scales() + 5, &big, 1, cudaMemcpyHostToDevice));
  try {
    plan.reload_scales();
    ADD_FAILURE() << "reload_scales accepted a code of 200 into a one-multiply plan";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "weights.scales") << e.what();
    EXPECT_NE(std::string(e.what()).find("200"), std::string::npos) << e.what();
  }
  // the plan still holds the old copy: the old answer (the device scales still hold 200, so the
  // inputs check is off)
  MoeRunOptions opts;
  opts.check_inputs = false;
  EXPECT_TRUE(run_and_check(plan, ws, buffers, in, opts));
  FP4GEMM_TEST_CUDA(cudaMemcpy(ws.device_scales() + 5, &old, 1, cudaMemcpyHostToDevice));
  plan.reload_scales();  // accepted again
  EXPECT_TRUE(run_and_check(plan, ws, buffers, in));
}

TEST(PlanOrdering, ReloadIsRefusedDuringCapture) {
  REQUIRE_FAST_KERNEL();
  const MoeConfig cfg = linear_config(Format::nvfp4, 49);
  const MoeWeightSet ws(cfg);
  const MoeGemm plan(ws.weights(), ws.options());
  const Stream s;
  FP4GEMM_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  bool threw = false;
  try {
    plan.reload_scales(s);
  } catch (const Error& e) {
    threw = e.argument() == "stream";
  }
  cudaGraph_t g = nullptr;
  FP4GEMM_TEST_CUDA(cudaStreamEndCapture(s, &g));
  if (g) cudaGraphDestroy(g);
  EXPECT_TRUE(threw);
}

}  // namespace
}  // namespace fp4gemm::test::moe
