// Host tier: the expert layer's (fp4gemm::MoeLayer) plan-time and run-time argument checks, which
// run before any CUDA call: every bad field is named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "fp4gemm/moe_layer.hpp"
#include "host/core/moe_validate.hpp"

namespace fp4gemm {
namespace {

const void* fake(std::uintptr_t address) { return reinterpret_cast<const void*>(address); }

void good(MoeLayerWeights& w, MoeLayerOptions& o) {
  w.experts = 8, w.hidden = 256, w.inter = 128;
  w.w13 = fake(0x100000), w.w13_scales = fake(0x200000), w.w2 = fake(0x300000), w.w2_scales = fake(0x400000);
  o.max_tokens = 64, o.topk = 2;
}

std::string plan_error(const std::function<void(MoeLayerWeights&, MoeLayerOptions&)>& edit) {
  MoeLayerWeights w;
  MoeLayerOptions o;
  good(w, o);
  edit(w, o);
  try {
    MoeLayer layer(w, o);
  } catch (const Error& e) {
    return e.argument();
  }
  return "(nothing thrown)";
}

TEST(MoeLayerValidation, EachBadPlanFieldNamed) {
  using W = MoeLayerWeights;
  using O = MoeLayerOptions;
  EXPECT_EQ(plan_error([](W&, O& o) { o.format = static_cast<Format>(9); }), "options.format");
  EXPECT_EQ(plan_error([](W&, O& o) { o.activations = MoeActivation::bf16; }), "options.activations");  // nvfp4
  EXPECT_EQ(plan_error([](W&, O& o) { o.scale_layout = static_cast<ScaleLayout>(9); }), "options.scale_layout");
  EXPECT_EQ(plan_error([](W&, O& o) { o.activation = MoeEpilogue::none; }), "options.activation");
  EXPECT_EQ(plan_error([](W&, O& o) { o.gate_up = GateUpLayout::separate; }), "options.gate_up");
  EXPECT_EQ(plan_error([](W& w, O&) { w.experts = 0; }), "weights.experts");
  EXPECT_EQ(plan_error([](W& w, O&) { w.experts = 513; }), "weights.experts");
  EXPECT_EQ(plan_error([](W& w, O&) { w.hidden = 240; }), "weights.hidden");
  EXPECT_EQ(plan_error([](W& w, O&) { w.inter = 48; }), "weights.inter");
  EXPECT_EQ(plan_error([](W& w, O&) { w.w13 = nullptr; }), "weights.w13");
  EXPECT_EQ(plan_error([](W& w, O&) { w.w13_scales = nullptr; }), "weights.w13_scales");
  EXPECT_EQ(plan_error([](W& w, O&) { w.w2 = nullptr; }), "weights.w2");
  EXPECT_EQ(plan_error([](W& w, O&) { w.w2_scales = nullptr; }), "weights.w2_scales");
  EXPECT_EQ(plan_error([](W&, O& o) { o.max_tokens = 0; }), "options.max_tokens");
  EXPECT_EQ(plan_error([](W&, O& o) { o.max_tokens = 1 << 28, o.topk = 8; }), "options.max_tokens");
  EXPECT_EQ(plan_error([](W&, O& o) { o.topk = 0; }), "options.topk");
  EXPECT_EQ(plan_error([](W&, O& o) { o.topk = 9; }), "options.topk");  // > experts
  EXPECT_EQ(plan_error([](W&, O& o) { o.a1_scale = 0; }), "options.a1_scale");
  EXPECT_EQ(plan_error([](W&, O& o) { o.a2_scale = std::numeric_limits<float>::infinity(); }), "options.a2_scale");
  EXPECT_EQ(plan_error([](W&, O& o) { o.a2_scale = std::nanf(""); }), "options.a2_scale");
  EXPECT_EQ(plan_error([](W&, O& o) { o.format = Format::mxfp4, o.a1_scale = 0.5f; }), "options.a1_scale");
  EXPECT_EQ(plan_error([](W&, O& o) {
              o.activation = MoeEpilogue::swigluoai, o.swiglu_limit = 0;
            }),
            "options.swiglu_limit");
  EXPECT_EQ(plan_error([](W&, O& o) {
              o.activation = MoeEpilogue::swigluoai, o.swiglu_alpha = std::nanf("");
            }),
            "options.swiglu_alpha");
}

TEST(MoeLayerValidation, EachBadRunFieldNamed) {
  MoeLayerWeights w;
  MoeLayerOptions o;
  good(w, o);
  const auto run_error = [&](const std::function<void(MoeLayerArgs&)>& edit) -> std::string {
    MoeLayerArgs a;
    a.hidden = fake(0x1000), a.topk_ids = fake(0x2000), a.topk_weights = fake(0x3000), a.out = reinterpret_cast<void*>(0x4000);
    a.tokens = 16;
    edit(a);
    try {
      detail::check_moe_layer_args(w, o, a);
    } catch (const Error& e) {
      return e.argument();
    }
    return "(nothing thrown)";
  };
  EXPECT_EQ(run_error([](MoeLayerArgs&) {}), "(nothing thrown)");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.tokens = 65; }), "tokens");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.tokens = -1; }), "tokens");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.ld_hidden = 100; }), "ld_hidden");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.ld_hidden = 260; }), "ld_hidden");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.ld_out = 255; }), "ld_out");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.hidden = nullptr; }), "hidden");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.hidden = fake(0x1008); }), "hidden");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.topk_ids = nullptr; }), "topk_ids");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.ids_int64 = true, a.topk_ids = fake(0x2004); }), "topk_ids");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.topk_weights = fake(0x3002); }), "topk_weights");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.out = nullptr; }), "out");
  // No tokens: nothing to run, the pointers are not needed.
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.tokens = 0, a.hidden = nullptr, a.out = nullptr; }), "(nothing thrown)");
}

}  // namespace
}  // namespace fp4gemm
