// Host tier: the expert layer's (fp4gemm::MoeLayer) plan-time and run-time argument checks, which
// run before any CUDA call: every bad field is named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>
#include <string>

#include "device/glu.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe_layer.hpp"
#include "fp4gemm/reference.hpp"
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
  EXPECT_EQ(plan_error([](W&, O& o) { o.graph_cache = -1; }), "options.graph_cache");
  EXPECT_EQ(plan_error([](W&, O& o) { o.decode_tokens = -2; }), "options.decode_tokens");  // -1: by the layer
  EXPECT_EQ(plan_error([](W&, O& o) { o.decode_tokens = 513; }), "options.decode_tokens");  // > the wide kernels' 512 pairs at top-1
  EXPECT_EQ(plan_error([](W&, O& o) { o.topk = 33; }), "options.topk");  // (> experts is allowed: ids may repeat)
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
  // weights in pieces: every layer
  const std::string mx = plan_error([](W&, O& o) { o.format = Format::mxfp4, o.weight_layout = WeightLayout::pieces; });
  EXPECT_TRUE(mx == "device" || mx == "options.device" || mx.rfind("weights.", 0) == 0) << mx;  // (MXFP4 W4A4)
  const std::string nv = plan_error([](W&, O& o) { o.weight_layout = WeightLayout::pieces; });  // NVFP4 W4A4
  EXPECT_TRUE(nv == "device" || nv == "options.device" || nv.rfind("weights.", 0) == 0) << nv;
  EXPECT_EQ(plan_error([](W&, O& o) { o.weight_layout = static_cast<WeightLayout>(5); }), "options.weight_layout");
  const std::string ok = plan_error([](W&, O& o) {
    o.format = Format::mxfp4, o.activations = MoeActivation::bf16, o.weight_layout = WeightLayout::pieces;
  });
  EXPECT_TRUE(ok == "device" || ok == "options.device" || ok.rfind("weights.", 0) == 0) << ok;  // past validation
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
  // Pre-quantised tokens (W4A4) instead of bf16 hidden states.
  EXPECT_EQ(run_error([](MoeLayerArgs& a) {
              a.hidden = nullptr, a.hidden_packed = fake(0x5000), a.hidden_scales = fake(0x6000);
            }),
            "(nothing thrown)");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.hidden_packed = fake(0x5000), a.hidden_scales = fake(0x6000); }),
            "hidden");  // both
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.hidden = nullptr, a.hidden_packed = fake(0x5000); }), "hidden_scales");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.hidden = nullptr, a.hidden_scales = fake(0x6000); }), "hidden_packed");
  EXPECT_EQ(run_error([](MoeLayerArgs& a) {
              a.hidden = nullptr, a.hidden_packed = fake(0x5008), a.hidden_scales = fake(0x6000);
            }),
            "hidden_packed");  // misaligned
  // No tokens: nothing to run, the pointers are not needed.
  EXPECT_EQ(run_error([](MoeLayerArgs& a) { a.tokens = 0, a.hidden = nullptr, a.out = nullptr; }), "(nothing thrown)");
  // Stopping before the combine: expert_rows and row_of together, instead of out; weights unread.
  const auto uncombined = [](MoeLayerArgs& a) {
    a.out = nullptr, a.topk_weights = nullptr, a.expert_rows = reinterpret_cast<void*>(0x10000);  // 16 KiB
    a.row_of = reinterpret_cast<int*>(0x20000);
  };
  EXPECT_EQ(run_error(uncombined), "(nothing thrown)");
  EXPECT_EQ(run_error([&](MoeLayerArgs& a) { uncombined(a), a.row_of = nullptr; }), "row_of");
  EXPECT_EQ(run_error([&](MoeLayerArgs& a) { uncombined(a), a.row_of = reinterpret_cast<int*>(0x20002); }), "row_of");
  EXPECT_EQ(run_error([&](MoeLayerArgs& a) { uncombined(a), a.expert_rows = nullptr; }), "expert_rows");
  EXPECT_EQ(run_error([&](MoeLayerArgs& a) { uncombined(a), a.expert_rows = reinterpret_cast<void*>(0x10008); }),
            "expert_rows");
  EXPECT_EQ(run_error([&](MoeLayerArgs& a) { uncombined(a), a.out = reinterpret_cast<void*>(0x4000); }), "out");
  // Written arrays overlapping what the run still reads (or each other): named.
  EXPECT_EQ(run_error([&](MoeLayerArgs& a) { uncombined(a), a.row_of = reinterpret_cast<int*>(0x2000); }), "row_of");
  EXPECT_EQ(run_error([&](MoeLayerArgs& a) { uncombined(a), a.expert_rows = reinterpret_cast<void*>(0x1000); }),
            "expert_rows");
  EXPECT_EQ(run_error([&](MoeLayerArgs& a) { uncombined(a), a.row_of = reinterpret_cast<int*>(0x10010); }), "row_of");
  EXPECT_EQ(run_error([&](MoeLayerArgs& a) {
              uncombined(a), a.token_count = reinterpret_cast<const int*>(0x20004);
            }),
            "row_of");
  // A layer planned without its combine (options.combine = false) takes only such runs.
  o.combine = false;
  EXPECT_EQ(run_error([](MoeLayerArgs&) {}), "expert_rows");
  EXPECT_EQ(run_error(uncombined), "(nothing thrown)");
  o.combine = true;
  // Expert biases are added in the combine: such a layer cannot stop before it.
  w.w2_bias = fake(0x9000);
  EXPECT_EQ(run_error(uncombined), "expert_rows");
  w.w2_bias = nullptr;
}


// reference::moe_layer (routing sort, moe_gemm with gather and GLU, quantisers, combine) against a
// naive per-token float64 composition of the same steps: no sorting, no gather, dequantised
// weights. GPU MODE weights and tokens keep every sum exact, so the two must agree bit for bit;
// ids outside [0, E) and repeated experts included; with and without expert biases (gpt-oss: the
// gate/up bias in the fma before the activation, the down bias added to each pair's bf16 y).
TEST(MoeLayerReference, MatchesANaivePerTokenComposition) {
 for (const bool with_bias : {false, true}) {
  struct Mode {
    Format f;
    bool bf16;
    reference::Activation act;
    int gate_up;
  };
  for (const Mode m : {Mode{Format::nvfp4, false, reference::Activation::silu, 0},
                       Mode{Format::mxfp4, false, reference::Activation::swigluoai, 1},
                       Mode{Format::mxfp4, true, reference::Activation::silu, 1}}) {
    const int E = 5, H = 64, I = 32, k = 3, T = 7, vec = scale_block_size(m.f);
    std::mt19937_64 rng(77 + static_cast<int>(m.f) + (m.bf16 ? 10 : 0) + (with_bias ? 100 : 0));
    auto packed = [&](std::size_t bytes) {
      std::vector<std::uint8_t> v(bytes);
      static const std::uint8_t kNib[7] = {0x0, 0x1, 0x9, 0x2, 0xA, 0x3, 0xB};  // 0, +-0.5, +-1, +-1.5
      for (auto& b : v) b = static_cast<std::uint8_t>(kNib[rng() % 7] | (kNib[rng() % 7] << 4));
      return v;
    };
    auto scales = [&](std::size_t n) {
      std::vector<std::uint8_t> v(n);
      for (auto& b : v) b = m.f == Format::nvfp4 ? (rng() % 2 ? 0x38 : 0x40) : (rng() % 2 ? 127 : 128);
      return v;
    };
    const auto w13 = packed(std::size_t{E} * 2 * I * H / 2), w2 = packed(std::size_t{E} * H * I / 2);
    const auto s13 = scales(std::size_t{E} * 2 * I * H / vec), s2 = scales(std::size_t{E} * H * I / vec);
    std::vector<float> a13(E), a13u(E), a2(E);
    for (int e = 0; e < E; ++e) a13[e] = std::ldexp(1.0f, static_cast<int>(rng() % 3) - 1), a13u[e] = 0.5f,
                                a2[e] = 0.75f + 0.125f * e;
    const float a1 = m.bf16 || m.f == Format::mxfp4 ? 1.0f : 0.5f, a2s = m.bf16 || m.f == Format::mxfp4 ? 1.0f : 0.3f;
    std::vector<std::uint16_t> x(static_cast<std::size_t>(T) * H), out(static_cast<std::size_t>(T) * H, 0xFFFF),
        naive(x.size());
    static const float kVal[7] = {0, 0.5f, -0.5f, 1, -1, 1.5f, -1.5f};
    for (auto& v : x) v = reference::float_to_bf16_bits(kVal[rng() % 7]);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(T) * k);
    std::vector<float> wts(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = i % 11 == 4 ? -1 : i % 13 == 6 ? E : static_cast<std::int64_t>(rng() % E), wts[i] = 0.1f * (1 + rng() % 9);
    std::vector<float> b13(static_cast<std::size_t>(E) * 2 * I), b2(static_cast<std::size_t>(E) * H);
    static const float kBias[5] = {-1.0f, -0.5f, 0.0f, 0.25f, 1.0f};
    for (auto& b : b13) b = kBias[rng() % 5];
    for (auto& b : b2) b = kBias[rng() % 5];
    reference::MoeLayerHostProblem p;
    p.experts = E, p.hidden = H, p.inter = I, p.topk = k, p.tokens = T, p.format = m.f, p.bf16_activations = m.bf16;
    if (with_bias) p.w13_bias = b13.data(), p.w2_bias = b2.data();
    p.act = reference::DualActivation{m.act}, p.gate_up = m.gate_up;
    p.w13 = w13.data(), p.w13_scales = s13.data(), p.w2 = w2.data(), p.w2_scales = s2.data();
    p.w13_alpha = a13.data(), p.w13_alpha_up = a13u.data(), p.w2_alpha = a2.data(), p.a1_scale = a1, p.a2_scale = a2s;
    p.x = x.data(), p.ld_x = H, p.topk_ids = ids.data(), p.topk_weights = wts.data();
    p.out = out.data(), p.ld_out = H;
    reference::moe_layer(p);

    // The naive composition.
    std::vector<float> xf(x.size()), xq(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) xf[i] = static_cast<float>(reference::bf16_bits_to_double(x[i]));
    if (m.bf16) {
      xq = xf;
    } else {
      std::vector<std::uint8_t> qp(x.size() / 2), qs(x.size() / vec);
      formats::quantize(m.f, xf.data(), T, H, H, qp.data(), qs.data(), a1);
      formats::dequantize(m.f, ScaleLayout::linear, qp.data(), T, H, H / 2, qs.data(), xq.data());
    }
    auto dq = [&](const std::vector<std::uint8_t>& w, const std::vector<std::uint8_t>& s, int e, int rows, int kk) {
      std::vector<float> d(static_cast<std::size_t>(rows) * kk);
      formats::dequantize(m.f, ScaleLayout::linear, w.data() + static_cast<std::size_t>(e) * rows * kk / 2, rows, kk,
                          kk / 2, s.data() + static_cast<std::size_t>(e) * rows * (kk / vec), d.data());
      return d;
    };
    for (int t = 0; t < T; ++t) {
      std::vector<float> acc(H, 0.0f);
      for (int j = 0; j < k; ++j) {
        const std::int64_t e = ids[static_cast<std::size_t>(t) * k + j];
        if (e < 0 || e >= E) continue;
        const auto d13 = dq(w13, s13, static_cast<int>(e), 2 * I, H), d2 = dq(w2, s2, static_cast<int>(e), H, I);
        std::vector<float> mid(I);
        for (int i = 0; i < I; ++i) {
          const int gr = m.gate_up ? 2 * i : i, ur = m.gate_up ? 2 * i + 1 : I + i;
          double g = 0, u = 0;
          for (int h = 0; h < H; ++h)
            g += double{xq[t * H + h]} * d13[gr * H + h], u += double{xq[t * H + h]} * d13[ur * H + h];
          const float bg = with_bias ? b13[e * 2 * I + gr] : -0.0f, bu = with_bias ? b13[e * 2 * I + ur] : -0.0f;
          const float gf = std::fma(static_cast<float>(g), a13[e] * a1, bg);
          const float uf = std::fma(static_cast<float>(u), a13u[e] * a1, bu);
          const float v = detail::glu_activate(m.act == reference::Activation::silu ? detail::kGluSilu : detail::kGluSwigluOai,
                                               gf, uf, 1.702f, 7.0f);
          mid[i] = static_cast<float>(reference::bf16_bits_to_double(reference::float_to_bf16_bits(v)));
        }
        if (!m.bf16) {
          std::vector<std::uint8_t> qp(I / 2), qs(I / vec);
          formats::quantize(m.f, mid.data(), 1, I, I, qp.data(), qs.data(), a2s);
          formats::dequantize(m.f, ScaleLayout::linear, qp.data(), 1, I, I / 2, qs.data(), mid.data());
        }
        for (int h = 0; h < H; ++h) {
          double y = 0;
          for (int i = 0; i < I; ++i) y += double{mid[i]} * d2[h * I + i];
          const double ya = y * (a2[e] * a2s);
          float yb = static_cast<float>(reference::bf16_bits_to_double(reference::float_to_bf16_bits(ya)));
          if (with_bias) yb += b2[e * H + h];
          acc[h] = std::fma(wts[static_cast<std::size_t>(t) * k + j], yb, acc[h]);
        }
      }
      for (int h = 0; h < H; ++h) naive[t * H + h] = reference::float_to_bf16_bits(acc[h]);
    }
    int bad = 0;
    for (std::size_t i = 0; i < out.size(); ++i)
      if (out[i] != naive[i] && bad++ < 5)
        ADD_FAILURE() << "mode " << to_string(m.f) << (m.bf16 ? " W4A16" : " W4A4") << (with_bias ? " biases" : "")
                      << ": out[" << i / H << ", "
                      << i % H << "] = " << reference::bf16_bits_to_double(out[i]) << ", naive "
                      << reference::bf16_bits_to_double(naive[i]);
    EXPECT_EQ(bad, 0);
  }
 }
}

}  // namespace
}  // namespace fp4gemm
