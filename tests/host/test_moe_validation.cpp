// Host tier: MoeGemm's plan-time argument checks, which run before anything touches a device (so
// they are tested everywhere; the GPU tier repeats them with real buffers, adds the device-buffer
// extents and the run-time MoeArgs checks). Each case breaks one field of an otherwise valid
// description and expects fp4gemm::Error naming that field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "host/core/moe_validate.hpp"

namespace fp4gemm {
namespace {

// Aligned addresses nothing is read from (validation comes first; on a machine with a GPU the
// device-buffer check then names weights.w).
const void* fake(std::uintptr_t address) { return reinterpret_cast<const void*>(address); }

struct Valid {
  MoeWeights w;
  MoeOptions o;
  Valid() {
    w.experts = 4, w.n = 64, w.k = 128;
    w.w = fake(0x100000);
    w.scales = fake(0x200000);
    o.capacity = 64;
  }
};

std::string plan_error(const MoeWeights& w, const MoeOptions& o) {
  try {
    MoeGemm plan(w, o);
  } catch (const Error& e) {
    return e.argument();
  }
  return "(nothing thrown)";
}

TEST(MoePlanValidation, ValidDescriptionPassesValidation) {
  const Valid v;
  // Past validation the plan needs a device (none here) or real device buffers (these are fake).
  const std::string arg = plan_error(v.w, v.o);
  EXPECT_TRUE(arg == "device" || arg == "options.device" || arg == "weights.w") << arg;
}

TEST(MoePlanValidation, KnobsTheMoePlanReadsPassValidation) {
  Valid v;
  v.o.tuning.split_k = false, v.o.tuning.narrow_rows = 128;
  v.o.tuning.wide_fixed = 100.0, v.o.tuning.wide_per_token = 1.0;
  v.o.tuning.narrow_fixed = 300.0, v.o.tuning.narrow_per_token = 2.0;
  v.o.tuning.moe_split_gain16 = 0.0, v.o.tuning.moe_split_gain32 = 100.0;
  const std::string arg = plan_error(v.w, v.o);
  EXPECT_TRUE(arg == "device" || arg == "options.device" || arg == "weights.w") << arg;
}

TEST(MoePlanValidation, EachBadFieldNamed) {
  const auto bad = [](const char* argument, const std::function<void(MoeWeights&, MoeOptions&)>& edit) {
    Valid v;
    edit(v.w, v.o);
    EXPECT_EQ(plan_error(v.w, v.o), argument);
  };
  bad("weights.experts", [](MoeWeights& w, MoeOptions&) { w.experts = 0; });
  bad("weights.experts", [](MoeWeights& w, MoeOptions&) { w.experts = 513; });
  bad("weights.experts", [](MoeWeights& w, MoeOptions&) { w.experts = std::numeric_limits<int>::min(); });
  bad("weights.n", [](MoeWeights& w, MoeOptions&) { w.n = 0; });
  bad("weights.n", [](MoeWeights& w, MoeOptions&) { w.n = -1; });
  bad("weights.k", [](MoeWeights& w, MoeOptions&) { w.k = 0; });
  bad("weights.k", [](MoeWeights& w, MoeOptions&) { w.k = 24; });
  bad("weights.k", [](MoeWeights& w, MoeOptions& o) { o.format = Format::mxfp4, w.k = 48; });
  bad("options.capacity", [](MoeWeights&, MoeOptions& o) { o.capacity = 0; });
  bad("options.capacity", [](MoeWeights&, MoeOptions& o) { o.capacity = -1; });
  bad("options.capacity", [](MoeWeights&, MoeOptions& o) { o.capacity = 1 << 30; });
  bad("options.capacity",
      [](MoeWeights& w, MoeOptions& o) { w.experts = 512, o.layout = MoeLayout::masked, o.capacity = 1 << 22; });
  bad("options.activation", [](MoeWeights&, MoeOptions& o) { o.activation = MoeActivation::bf16; });  // nvfp4 weights
  bad("options.format", [](MoeWeights&, MoeOptions& o) { o.format = static_cast<Format>(5); });
  bad("options.scale_layout", [](MoeWeights&, MoeOptions& o) { o.scale_layout = static_cast<ScaleLayout>(5); });
  bad("options.out_type", [](MoeWeights&, MoeOptions& o) { o.out_type = static_cast<OutType>(5); });
  bad("options.activation", [](MoeWeights&, MoeOptions& o) { o.activation = static_cast<MoeActivation>(5); });
  bad("options.layout", [](MoeWeights&, MoeOptions& o) { o.layout = static_cast<MoeLayout>(5); });
  bad("options.graph_cache", [](MoeWeights&, MoeOptions& o) { o.graph_cache = -1; });
  // Measurement knobs: the four an MoE plan reads are range-checked, the others rejected by name.
  bad("options.tuning.narrow_rows", [](MoeWeights&, MoeOptions& o) { o.tuning.narrow_rows = 192; });
  bad("options.tuning.wide_fixed", [](MoeWeights&, MoeOptions& o) { o.tuning.wide_fixed = -1.0; });
  bad("options.tuning.narrow_per_token", [](MoeWeights&, MoeOptions& o) { o.tuning.narrow_per_token = NAN; });
  bad("options.tuning.ring_kb", [](MoeWeights&, MoeOptions& o) { o.tuning.ring_kb = 64; });
  bad("options.tuning.tile_tokens", [](MoeWeights&, MoeOptions& o) { o.tuning.tile_tokens = 64; });
  bad("options.tuning.max_ctas", [](MoeWeights&, MoeOptions& o) { o.tuning.max_ctas = 8; });
  bad("options.tuning.convert_scales", [](MoeWeights&, MoeOptions& o) { o.tuning.convert_scales = true; });
  bad("options.tuning.share_epilogue", [](MoeWeights&, MoeOptions& o) { o.tuning.share_epilogue = false; });
  bad("options.tuning.moe_split_gain16", [](MoeWeights&, MoeOptions& o) { o.tuning.moe_split_gain16 = 2.5; });
  bad("options.tuning.moe_split_gain32", [](MoeWeights&, MoeOptions& o) { o.tuning.moe_split_gain32 = -1.0; });
  // Quantised output: a GLU option, from bf16 values, N a multiple of the scale block, a usable
  // global scale.
  bad("options.quantize_output", [](MoeWeights&, MoeOptions& o) { o.quantize_output = true; });
  bad("options.quantize_output", [](MoeWeights&, MoeOptions& o) {
    o.quantize_output = true, o.epilogue = MoeEpilogue::silu, o.out_type = OutType::f32;
  });
  bad("weights.n", [](MoeWeights& w, MoeOptions& o) { o.quantize_output = true, o.epilogue = MoeEpilogue::silu, w.n = 24; });
  bad("options.output_global_scale", [](MoeWeights&, MoeOptions& o) {
    o.quantize_output = true, o.epilogue = MoeEpilogue::silu, o.output_global_scale = 0.0f;
  });
  bad("options.output_global_scale", [](MoeWeights&, MoeOptions& o) {
    o.quantize_output = true, o.epilogue = MoeEpilogue::silu, o.output_global_scale = INFINITY;
  });
  bad("weights.w", [](MoeWeights& w, MoeOptions&) { w.w = nullptr; });
  bad("weights.w", [](MoeWeights& w, MoeOptions&) { w.w = fake(0x100008); });
  bad("weights.scales", [](MoeWeights& w, MoeOptions&) { w.scales = nullptr; });
  bad("weights.scales", [](MoeWeights& w, MoeOptions&) { w.scales = fake(0x200001); });
  bad("weights.ldw", [](MoeWeights& w, MoeOptions&) { w.ldw = 48; });
  bad("weights.ldw", [](MoeWeights& w, MoeOptions&) { w.ldw = 72; });
  bad("weights.ldw", [](MoeWeights& w, MoeOptions&) { w.k = 16; });  // default ldw K/2 = 8: not a multiple of 16
  bad("weights.expert_stride", [](MoeWeights& w, MoeOptions&) { w.expert_stride = 64 * 64 - 16; });
  bad("weights.expert_stride", [](MoeWeights& w, MoeOptions&) { w.expert_stride = 64 * 64 + 8; });
  bad("weights.expert_stride", [](MoeWeights& w, MoeOptions&) { w.ldw = 80, w.expert_stride = 64 * 64; });  // < N * ldw
  bad("weights.scale_expert_stride", [](MoeWeights& w, MoeOptions&) {
    w.scale_expert_stride = static_cast<std::int64_t>(formats::blocked_scale_bytes(64, 8)) - 16;
  });
  bad("weights.scale_expert_stride", [](MoeWeights& w, MoeOptions&) {
    w.scale_expert_stride = static_cast<std::int64_t>(formats::blocked_scale_bytes(64, 8)) + 8;
  });
  bad("weights.scale_expert_stride",
      [](MoeWeights& w, MoeOptions& o) { o.scale_layout = ScaleLayout::linear, w.scale_expert_stride = 511; });
  bad("weights.alpha", [](MoeWeights& w, MoeOptions&) { w.alpha = std::numeric_limits<float>::quiet_NaN(); });
  bad("weights.alpha", [](MoeWeights& w, MoeOptions&) { w.alpha = -INFINITY; });
  bad("weights.alpha_device",
      [](MoeWeights& w, MoeOptions&) { w.alpha_device = static_cast<const float*>(fake(0x300002)); });
}

// What must pass validation: W4A16 with MXFP4 weights, a NaN host alpha beside a device alpha,
// linear scales with a stride that is not a multiple of 16, the defaults (0) for the strides.
TEST(MoePlanValidation, AcceptedCombinations) {
  const auto accepted = [](const std::function<void(MoeWeights&, MoeOptions&)>& edit) {
    Valid v;
    edit(v.w, v.o);
    const std::string arg = plan_error(v.w, v.o);
    EXPECT_TRUE(arg == "device" || arg == "options.device" || arg == "weights.w") << arg;
  };
  accepted([](MoeWeights&, MoeOptions& o) { o.format = Format::mxfp4, o.activation = MoeActivation::bf16; });
  accepted([](MoeWeights& w, MoeOptions&) {
    w.alpha_device = static_cast<const float*>(fake(0x300000)), w.alpha = std::numeric_limits<float>::quiet_NaN();
  });
  accepted(
      [](MoeWeights& w, MoeOptions& o) { o.scale_layout = ScaleLayout::linear, w.scale_expert_stride = 64 * 8 + 3; });
  accepted([](MoeWeights& w, MoeOptions&) { w.experts = 512; });
  accepted([](MoeWeights& w, MoeOptions&) { w.experts = 1, w.n = 1, w.k = 32; });
  accepted([](MoeWeights&, MoeOptions& o) { o.layout = MoeLayout::masked, o.capacity = 1; });
  accepted([](MoeWeights&, MoeOptions& o) { o.quantize_output = true, o.epilogue = MoeEpilogue::silu; });
  accepted([](MoeWeights& w, MoeOptions& o) {
    o.quantize_output = true, o.epilogue = MoeEpilogue::swigluoai, o.format = Format::mxfp4, w.n = 64;
  });
}

// The run-time checks of quantised output (MoeOptions::quantize_output): the packed rows' stride in
// bytes, the scales required; and scales refused without it. (Host-only: MoeGemm::run calls this
// first, before anything is enqueued.)
TEST(MoeRunValidation, QuantisedOutputArguments) {
  Valid v;
  v.o.epilogue = MoeEpilogue::silu, v.o.quantize_output = true;
  MoeArgs a;
  a.a = fake(0x400000), a.lda = 64, a.a_scales = fake(0x500000), a.expert_offsets = static_cast<const int*>(fake(0x600000));
  a.c = const_cast<void*>(fake(0x700000)), a.ldc = 32, a.c_scales = const_cast<void*>(fake(0x800000));
  const auto arg = [&](const MoeOptions& o, const MoeArgs& x) -> std::string {
    try {
      detail::check_moe_args(v.w, o, x);
    } catch (const Error& e) {
      return e.argument();
    }
    return "(nothing thrown)";
  };
  EXPECT_EQ(arg(v.o, a), "(nothing thrown)");  // N 64: packed rows of 32 bytes
  MoeArgs bad = a;
  bad.c_scales = nullptr;
  EXPECT_EQ(arg(v.o, bad), "c_scales");
  bad = a, bad.ldc = 24;  // < N/2
  EXPECT_EQ(arg(v.o, bad), "ldc");
  bad = a, bad.ldc = 36;  // not a multiple of 8
  EXPECT_EQ(arg(v.o, bad), "ldc");
  MoeOptions plain = v.o;
  plain.quantize_output = false;
  bad = a, bad.ldc = 64;
  EXPECT_EQ(arg(plain, bad), "c_scales");  // scales without quantised output
  bad.c_scales = nullptr;
  EXPECT_EQ(arg(plain, bad), "(nothing thrown)");
}

// WeightLayout::pieces: its size rule and the fields it constrains, each named.
TEST(MoePlanValidation, WeightsInPieces) {
  EXPECT_EQ(pieces_bytes(16, 128), 1024);
  EXPECT_EQ(pieces_bytes(5760, 2880), std::int64_t{360} * 23 * 1024);  // gpt-oss w13: k padded to 23 x 128
  EXPECT_EQ(pieces_bytes(2880, 2880), std::int64_t{180} * 23 * 1024);
  EXPECT_EQ(pieces_bytes(32, 32), 2048);
  auto bytes_error = [](int rows, int k) {
    try {
      pieces_bytes(rows, k);
    } catch (const Error& e) {
      return e.argument();
    }
    return std::string("(nothing thrown)");
  };
  EXPECT_EQ(bytes_error(8, 128), "rows");
  EXPECT_EQ(bytes_error(0, 128), "rows");
  EXPECT_EQ(bytes_error(24, 128), "rows");
  EXPECT_EQ(bytes_error(16, 16), "k");
  EXPECT_EQ(bytes_error(16, 0), "k");
  Valid v;
  v.o.weight_layout = WeightLayout::pieces;
  const std::string arg = plan_error(v.w, v.o);
  EXPECT_TRUE(arg == "device" || arg == "options.device" || arg == "weights.w") << arg;
  auto with = [&](const std::function<void(MoeWeights&, MoeOptions&)>& edit) {
    Valid b;
    b.o.weight_layout = WeightLayout::pieces;
    edit(b.w, b.o);
    return plan_error(b.w, b.o);
  };
  EXPECT_EQ(with([](MoeWeights& w, MoeOptions&) { w.n = 72; }), "weights.n");
  EXPECT_EQ(with([](MoeWeights& w, MoeOptions&) { w.k = 144; }), "weights.k");  // nvfp4 block, not 32
  EXPECT_EQ(with([](MoeWeights& w, MoeOptions&) { w.ldw = 128; }), "weights.ldw");
  EXPECT_EQ(with([](MoeWeights& w, MoeOptions&) { w.expert_stride = 64 * 64 + 512; }), "weights.expert_stride");
  EXPECT_EQ(with([](MoeWeights& w, MoeOptions& o) {
              o.epilogue = MoeEpilogue::silu, o.gate_up = GateUpLayout::separate, w.n = 32;
              w.w_up = fake(0x500000), w.scales_up = fake(0x600000);
            }),
            "options.weight_layout");
  EXPECT_EQ(with([](MoeWeights&, MoeOptions& o) { o.weight_layout = static_cast<WeightLayout>(3); }),
            "options.weight_layout");
  // (a GLU of I 8: 16 rows, one piece row block)
  const std::string glu = with([](MoeWeights& w, MoeOptions& o) { o.epilogue = MoeEpilogue::silu, w.n = 8; });
  EXPECT_TRUE(glu == "device" || glu == "options.device" || glu == "weights.w") << glu;
  EXPECT_STREQ(to_string(WeightLayout::pieces), "pieces");
  EXPECT_STREQ(to_string(WeightLayout::rows), "rows");
}

}  // namespace
}  // namespace fp4gemm
