// Host tests of detail::validate_groups: one test per class of bad input (SPEC §6), fake pointers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "fp4gemm/fp4gemm.hpp"
#include "host/core/validate.hpp"

namespace fp4gemm {
namespace {

// Group i owns a fake 16 MiB address window; inside it A, B, SFA, SFB and C sit at fixed offsets.
// Nothing is dereferenced (check_pointers = false).
constexpr std::uintptr_t kBase = 0x10000000, kWindow = 0x1000000;
constexpr std::uintptr_t kOffA = 0, kOffB = 0x400000, kOffSfa = 0x800000, kOffSfb = 0xA00000,
                         kOffC = 0xC00000;

void* fake(std::uintptr_t address) { return reinterpret_cast<void*>(address); }
std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

GroupDesc make_group(int i, int m = 64, int n = 128, int k = 256) {
  GroupDesc g;
  g.m = m, g.n = n, g.k = k;
  const std::uintptr_t base = kBase + static_cast<std::uintptr_t>(i) * kWindow;
  g.a = fake(base + kOffA);
  g.lda = k / 2;
  g.b = fake(base + kOffB);
  g.ldb = k / 2;
  g.sfa = fake(base + kOffSfa);
  g.sfb = fake(base + kOffSfb);
  g.c = fake(base + kOffC);
  g.ldc = n;
  g.alpha = 1.0f;
  return g;
}

std::vector<GroupDesc> make_groups(int count) {
  std::vector<GroupDesc> groups;
  for (int i = 0; i < count; ++i) groups.push_back(make_group(i, 16 + 8 * i, 128, 256));
  return groups;
}

void validate(const std::vector<GroupDesc>& groups, const Options& options = {}) {
  detail::validate_groups(groups, options, /*check_pointers=*/false);
}

// Expects an fp4gemm::Error naming `argument` and `group`, whose message contains `needle`.
void expect_error(const std::vector<GroupDesc>& groups, const Options& options,
                  const std::string& argument, int group, const std::string& needle) {
  try {
    validate(groups, options);
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_EQ(e.group(), group) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find(argument), std::string::npos) << what;  // the message names it too
    EXPECT_NE(what.find(needle), std::string::npos) << "'" << needle << "' not in: " << what;
    EXPECT_GT(what.size(), argument.size() + 20) << what;   // a sentence, not just a name
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;  // one line
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected fp4gemm::Error for " << argument << ", got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected fp4gemm::Error for " << argument << ", validation passed";
}

void expect_error(const std::vector<GroupDesc>& groups, const std::string& argument, int group,
                  const std::string& needle) {
  expect_error(groups, Options{}, argument, group, needle);
}

// ---- valid descriptions ---------------------------------------------------------------------

TEST(Validate, ValidDescriptionPasses) {
  for (Format format : {Format::nvfp4, Format::mxfp4})
    for (ScaleLayout layout : {ScaleLayout::linear, ScaleLayout::blocked})
      for (OutType out : {OutType::f16, OutType::bf16, OutType::f32}) {
        Options options;
        options.format = format, options.scale_layout = layout, options.out_type = out;
        std::vector<GroupDesc> groups = make_groups(8);
        groups[3].lda = 256, groups[3].ldb = 144, groups[3].ldc = 136;  // padded strides
        groups[5].alpha = -0.37f;
        groups[6].alpha_device = static_cast<const float*>(fake(kBase + 6 * kWindow + 0xF00000));
        EXPECT_NO_THROW(validate(groups, options))
            << to_string(format) << "/" << to_string(layout) << "/" << to_string(out);
      }
}

TEST(Validate, EmptyGroupListIsValid) {
  EXPECT_NO_THROW(validate({}));
}

TEST(Validate, GroupWithZeroRowsIsSkipped) {
  std::vector<GroupDesc> groups = make_groups(3);
  GroupDesc& empty = groups[1];
  empty = GroupDesc{};  // M = 0: null pointers, zero N/K/strides are all fine
  EXPECT_NO_THROW(validate(groups));
  empty.n = -5, empty.k = 7, empty.lda = 3, empty.c = groups[0].c;  // ignored too
  EXPECT_NO_THROW(validate(groups));
}

TEST(Validate, SharedInputsAreAllowed) {
  std::vector<GroupDesc> groups = make_groups(4);
  for (GroupDesc& g : groups) g.b = groups[0].b, g.sfb = groups[0].sfb;  // one B for all groups
  EXPECT_NO_THROW(validate(groups));
}

TEST(Validate, MinimalShapes) {
  std::vector<GroupDesc> groups = {make_group(0, 1, 1, 16)};
  groups[0].lda = groups[0].ldb = 16, groups[0].ldc = 8;
  EXPECT_NO_THROW(validate(groups));
  Options mx;
  mx.format = Format::mxfp4;
  groups[0].k = 32;
  EXPECT_NO_THROW(validate(groups, mx));
}

// ---- options --------------------------------------------------------------------------------

TEST(Validate, OptionsOutOfRange) {
  const std::vector<GroupDesc> groups = make_groups(2);
  Options o;
  o.format = static_cast<Format>(7);
  expect_error(groups, o, "options.format", -1, "format");
  o = {};
  o.scale_layout = static_cast<ScaleLayout>(-1);
  expect_error(groups, o, "options.scale_layout", -1, "layout");
  o = {};
  o.out_type = static_cast<OutType>(3);
  expect_error(groups, o, "options.out_type", -1, "output type");
  o = {};
  o.backend = static_cast<Backend>(42);
  expect_error(groups, o, "options.backend", -1, "backend");
  o = {};
  o.device = -2;
  expect_error(groups, o, "options.device", -1, "device");
}

// Measurement knobs (fp4gemm/tuning.hpp): unset is the plan's choice; a set one out of range is an
// error naming the field, whatever the backend.
TEST(Validate, TuningOutOfRange) {
  const std::vector<GroupDesc> groups = make_groups(2);
  Options o;
  o.tuning.split_k = true, o.tuning.max_ctas = 3, o.tuning.class_round = 8, o.tuning.tile_tokens = 8;
  o.tuning.narrow_rows = 128, o.tuning.ring_kb = 0, o.tuning.wide_fixed = 0, o.tuning.owner_cost = 0.5;
  o.tuning.tma_store = false, o.tuning.convert_scales = true, o.tuning.share_epilogue = false;
  EXPECT_NO_THROW(validate(groups, o));
  auto expect_tuning_error = [&](auto set, const char* field, const char* needle) {
    for (Backend backend : {Backend::automatic, Backend::reference}) {
      Options bad;
      bad.backend = backend;
      set(bad.tuning);
      expect_error(groups, bad, std::string("options.tuning.") + field, -1, needle);
    }
  };
  expect_tuning_error([](Tuning& t) { t.class_round = 3; }, "class_round", "1, 2, 4 or 8");
  expect_tuning_error([](Tuning& t) { t.moe_split_gain16 = 0.5; }, "moe_split_gain16", "whole number");
  // (an MoE plan's knob: a pointer-array plan rejects it even in range)
  expect_tuning_error([](Tuning& t) { t.moe_split_gain32 = 12.0; }, "moe_split_gain32", "pointer-array plan does not read");
  expect_tuning_error([](Tuning& t) { t.tile_tokens = 7; }, "tile_tokens", "8..256");
  expect_tuning_error([](Tuning& t) { t.tile_tokens = 257; }, "tile_tokens", "257");
  expect_tuning_error([](Tuning& t) { t.narrow_rows = 64; }, "narrow_rows", "128 or 256");
  expect_tuning_error([](Tuning& t) { t.max_ctas = 0; }, "max_ctas", ">= 1");
  expect_tuning_error([](Tuning& t) { t.ring_kb = -1; }, "ring_kb", ">= 0");
  expect_tuning_error([](Tuning& t) { t.narrow_per_token = -1; }, "narrow_per_token", "finite and >= 0");
  expect_tuning_error([](Tuning& t) { t.handoff_cost = std::numeric_limits<double>::quiet_NaN(); }, "handoff_cost",
                      "finite");
}

// ---- shapes ---------------------------------------------------------------------------------

TEST(Validate, NegativeM) {
  std::vector<GroupDesc> groups = make_groups(4);
  groups[2].m = -1;
  expect_error(groups, "groups[2].m", 2, "M must be >= 0");
}

TEST(Validate, NonPositiveNOrK) {
  std::vector<GroupDesc> groups = make_groups(4);
  groups[1].n = 0;
  expect_error(groups, "groups[1].n", 1, "N must be >= 1");
  groups = make_groups(4);
  groups[3].k = 0;
  expect_error(groups, "groups[3].k", 3, "K must be >= 1");
  groups[3].k = -32;
  expect_error(groups, "groups[3].k", 3, "K must be >= 1");
}

TEST(Validate, KNotMultipleOfScaleBlock) {
  std::vector<GroupDesc> groups = make_groups(3);
  groups[1].k = 200;  // 200 = 12.5 x 16
  groups[1].lda = groups[1].ldb = 112;
  expect_error(groups, "groups[1].k", 1, "multiple of the nvfp4 scale block (16)");

  Options mx;
  mx.format = Format::mxfp4;
  groups = make_groups(3);
  groups[2].k = 48;  // fine for NVFP4, not for MXFP4
  groups[2].lda = groups[2].ldb = 32;
  EXPECT_NO_THROW(validate(groups));
  expect_error(groups, mx, "groups[2].k", 2, "multiple of the mxfp4 scale block (32)");
}

// ---- pointers -------------------------------------------------------------------------------

TEST(Validate, NullPointers) {
  const char* fields[] = {"a", "b", "sfa", "sfb", "c"};
  for (const char* field : fields) {
    SCOPED_TRACE(field);
    std::vector<GroupDesc> groups = make_groups(5);
    GroupDesc& g = groups[4];
    const std::string f = field;
    if (f == "a") g.a = nullptr;
    if (f == "b") g.b = nullptr;
    if (f == "sfa") g.sfa = nullptr;
    if (f == "sfb") g.sfb = nullptr;
    if (f == "c") g.c = nullptr;
    expect_error(groups, "groups[4]." + f, 4, "null pointer");
  }
}

TEST(Validate, MisalignedPointers) {
  const char* fields[] = {"a", "b", "sfa", "sfb", "c"};
  for (const char* field : fields) {
    SCOPED_TRACE(field);
    std::vector<GroupDesc> groups = make_groups(3);
    GroupDesc& g = groups[0];
    const std::string f = field;
    if (f == "a") g.a = fake(addr(g.a) + 8);
    if (f == "b") g.b = fake(addr(g.b) + 4);
    if (f == "sfa") g.sfa = fake(addr(g.sfa) + 1);
    if (f == "sfb") g.sfb = fake(addr(g.sfb) + 2);
    if (f == "c") g.c = fake(addr(g.c) + 8);
    expect_error(groups, "groups[0]." + f, 0, "16-byte aligned");
  }
  std::vector<GroupDesc> groups = make_groups(2);
  groups[1].alpha_device = static_cast<const float*>(fake(kBase + kWindow + 0xF00002));
  expect_error(groups, "groups[1].alpha_device", 1, "4-byte aligned");
}

// ---- strides --------------------------------------------------------------------------------

TEST(Validate, RowStrideOfAOrBTooSmall) {
  std::vector<GroupDesc> groups = make_groups(3);
  groups[1].lda = 112;  // K/2 = 128
  expect_error(groups, "groups[1].lda", 1, "less than one packed row");
  groups = make_groups(3);
  groups[2].ldb = 0;
  expect_error(groups, "groups[2].ldb", 2, "less than one packed row");
  groups[2].ldb = -128;
  expect_error(groups, "groups[2].ldb", 2, "less than one packed row");
}

TEST(Validate, RowStrideOfAOrBNotMultipleOf16) {
  std::vector<GroupDesc> groups = {make_group(0, 64, 128, 16)};  // K/2 = 8 bytes: must pad to 16
  groups[0].lda = 8;
  expect_error(groups, "groups[0].lda", 0, "multiple of 16 bytes");
  groups[0].lda = 16, groups[0].ldb = 24;
  expect_error(groups, "groups[0].ldb", 0, "multiple of 16 bytes");
}

TEST(Validate, RowStrideOfCInvalid) {
  std::vector<GroupDesc> groups = make_groups(3);
  groups[0].ldc = 120;  // N = 128
  expect_error(groups, "groups[0].ldc", 0, "less than N");
  groups = make_groups(3);
  groups[1].ldc = 132;
  expect_error(groups, "groups[1].ldc", 1, "multiple of 8 elements");
}

TEST(Validate, StrideLimit) {
  std::vector<GroupDesc> groups = {make_group(0, 1, 128, 256)};
  groups[0].lda = std::int64_t{1} << 40;
  expect_error(groups, "groups[0].lda", 0, "2^40");
  groups = {make_group(0, 1, 128, 256)};
  groups[0].ldc = (std::int64_t{1} << 40) / 2;  // f16: exactly 2^40 bytes
  expect_error(groups, "groups[0].ldc", 0, "2^40");
  Options f32;
  f32.out_type = OutType::f32;
  groups[0].ldc = (std::int64_t{1} << 38) - 8;  // < 2^40 bytes for f32
  EXPECT_NO_THROW(validate(groups, f32));
  groups[0].ldc = std::int64_t{1} << 38;  // = 2^40 bytes for f32
  expect_error(groups, f32, "groups[0].ldc", 0, "2^40");
}

// ---- sizes ----------------------------------------------------------------------------------

TEST(Validate, OverflowingSizes) {
  // (M - 1) * lda does not fit int64.
  std::vector<GroupDesc> groups = make_groups(2);
  groups[1].m = std::numeric_limits<int>::max();
  groups[1].lda = (std::int64_t{1} << 40) - 16;
  expect_error(groups, "groups[1].lda", 1, "overflows");
  // The extent fits int64 but the buffer wraps around the address space.
  groups = make_groups(2);
  groups[0].b = fake(~std::uintptr_t{0xFFFF});  // 16-byte aligned, 64 KiB below the top
  groups[0].ldb = std::int64_t{1} << 20;
  expect_error(groups, "groups[0].b", 0, "wraps around");
  // C: M * ldc * 4 bytes wraps too.
  groups = make_groups(2);
  groups[1].c = fake(~std::uintptr_t{0xFFFFF});
  groups[1].m = 1 << 20;
  Options f32;
  f32.out_type = OutType::f32;
  expect_error(groups, f32, "groups[1].c", 1, "wraps around");
}

// ---- alpha ----------------------------------------------------------------------------------

TEST(Validate, AlphaMustBeFinite) {
  std::vector<GroupDesc> groups = make_groups(3);
  groups[2].alpha = std::numeric_limits<float>::quiet_NaN();
  expect_error(groups, "groups[2].alpha", 2, "finite");
  groups[2].alpha = -std::numeric_limits<float>::infinity();
  expect_error(groups, "groups[2].alpha", 2, "finite");
  // A device alpha overrides the host value, which is then ignored.
  groups[2].alpha_device = static_cast<const float*>(fake(kBase + 2 * kWindow + 0xF00000));
  EXPECT_NO_THROW(validate(groups));
}

// ---- overlapping outputs --------------------------------------------------------------------

TEST(Validate, OverlappingOutputs) {
  std::vector<GroupDesc> groups = make_groups(4);
  groups[3].c = groups[1].c;  // identical outputs
  expect_error(groups, "groups[3].c", 3, "outputs of distinct groups must not overlap");

  groups = make_groups(4);
  // Group 2's C starts inside the last row of group 0's C (rows are 128 f16 = 256 bytes).
  const std::int64_t c0_bytes = ((groups[0].m - 1) * groups[0].ldc + groups[0].n) * 2;
  groups[2].c = fake(addr(groups[0].c) + static_cast<std::uintptr_t>(c0_bytes) - 16);
  expect_error(groups, "groups[2].c", 2, "groups[0].c");

  // Exactly adjacent outputs are fine.
  groups[2].c = fake(addr(groups[0].c) + static_cast<std::uintptr_t>(c0_bytes));
  EXPECT_NO_THROW(validate(groups));
}

TEST(Validate, OverlapWithAnEnclosingOutput) {
  // A wide output (512 KiB) encloses two small ones; then only the later one collides with it.
  std::vector<GroupDesc> groups = make_groups(3);
  const std::uintptr_t base = kBase + 0x40000000;
  groups[0].c = fake(base);
  groups[0].m = 2048;  // 2048 rows x 256 bytes = 512 KiB of C
  groups[1].c = fake(base + 0x100);         // overlaps group 0 (and ends early)
  groups[1].m = 1;
  groups[2].c = fake(base + 0x10000);  // overlaps group 0 only
  groups[2].m = 1;
  expect_error(groups, "groups[1].c", 1, "groups[0].c");
  groups[1].c = fake(base - 0x100);  // now ends exactly where group 0 starts ...
  groups[1].m = 1;                   // ... 256 bytes: no overlap with 0
  expect_error(groups, "groups[2].c", 2, "groups[0].c");
}

TEST(Validate, OverlapFoundAmongManyShuffledGroups) {
  constexpr int kGroups = 200;
  std::vector<GroupDesc> groups = make_groups(kGroups);
  std::mt19937_64 rng(7);
  // Shuffle which window each group's C lives in, then make two of them collide.
  std::vector<int> order(kGroups);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int i = 0; i < kGroups; ++i)
    groups[i].c = fake(kBase + static_cast<std::uintptr_t>(order[i]) * kWindow + kOffC);
  EXPECT_NO_THROW(validate(groups));
  groups[150].c = fake(addr(groups[17].c) + 256);  // row 1 of group 17's C
  expect_error(groups, "groups[150].c", 150, "groups[17].c");
}

TEST(Validate, OutputOverlapsAnInput) {
  // Another group's B.
  std::vector<GroupDesc> groups = make_groups(3);
  groups[1].c = fake(addr(groups[0].b) + 4096);
  expect_error(groups, "groups[1].c", 1, "groups[0].b");
  // Its own scales of A (linear: M x K/16 bytes).
  groups = make_groups(3);
  groups[2].c = fake(addr(groups[2].sfa) + 16);
  expect_error(groups, "groups[2].c", 2, "groups[2].sfa");
  // Blocked scales are padded to 128 rows: 64 rows x 16 columns still occupy 2 KiB.
  Options blocked;
  blocked.scale_layout = ScaleLayout::blocked;
  groups = make_groups(3);
  ASSERT_EQ(groups[0].m, 16);  // scales of A: [16, 16], 256 bytes linear, 2 KiB blocked
  groups[0].c = fake(addr(groups[0].sfa) + 1024);  // inside the blocked padding rows only
  expect_error(groups, blocked, "groups[0].c", 0, "groups[0].sfa");
  // The same placement is outside the 256 bytes of a linear [16, 16] scale matrix.
  EXPECT_NO_THROW(validate(groups));
  // A device alpha counts as an input.
  groups = make_groups(2);
  groups[0].alpha_device = static_cast<const float*>(fake(addr(groups[1].c) + 64));
  expect_error(groups, "groups[1].c", 1, "groups[0].alpha_device");
}

TEST(Validate, ErrorMessageIsReadable) {
  std::vector<GroupDesc> groups = make_groups(5);
  groups[3].ldb = 72;
  try {
    validate(groups);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "groups[3].ldb");
    EXPECT_EQ(e.group(), 3);
    EXPECT_STREQ(e.what(),
                 "fp4gemm: groups[3].ldb: row stride of B is 72 bytes, less than one packed row "
                 "(K/2 = 128 bytes for K = 256)");
  }
}

}  // namespace
}  // namespace fp4gemm

namespace fp4gemm {
namespace {

// Dual GEMMs (Options::epilogue): b_up / sfb_up beside b / sfb in each group's window.
constexpr std::uintptr_t kOffBUp = 0x600000, kOffSfbUp = 0xB00000;

std::vector<GroupDesc> dual_groups(int count) {
  std::vector<GroupDesc> groups = make_groups(count);
  for (int i = 0; i < count; ++i) {
    const std::uintptr_t base = kBase + static_cast<std::uintptr_t>(i) * kWindow;
    groups[i].b_up = fake(base + kOffBUp), groups[i].sfb_up = fake(base + kOffSfbUp);
  }
  return groups;
}

Options dual_options(Epilogue e = Epilogue::silu) {
  Options o;
  o.epilogue = e;
  return o;
}

TEST(ValidateDual, ValidDualPasses) {
  EXPECT_NO_THROW(validate(dual_groups(3), dual_options()));
  EXPECT_NO_THROW(validate(dual_groups(2), dual_options(Epilogue::swigluoai)));
  std::vector<GroupDesc> g = dual_groups(1);
  std::swap(g[0].b, g[0].b_up);  // up below gate: fine
  EXPECT_NO_THROW(validate(g, dual_options()));
  // Host arrays (no TMA map): b and b_up may lie any distance apart; plans on the device need < 2^40.
  std::vector<GroupDesc> far = dual_groups(1);
  far[0].b_up = fake(addr(far[0].b) + (std::uintptr_t{1} << 44));
  EXPECT_NO_THROW(validate(far, dual_options()));
  // Plain plans ignore b_up entirely (null, unaligned, anything).
  g[0].b_up = fake(3), g[0].sfb_up = nullptr;
  EXPECT_NO_THROW(validate(g));
}

TEST(ValidateDual, BadDualArgumentsNamed) {
  auto expect_named = [](std::vector<GroupDesc> g, const Options& o, const std::string& arg, int group,
                         const std::string& needle) { expect_error(g, o, arg, group, needle); };
  {
    auto g = dual_groups(2);
    g[1].b_up = nullptr;
    expect_named(g, dual_options(), "groups[1].b_up", 1, "null");
  }
  {
    auto g = dual_groups(2);
    g[0].sfb_up = fake(addr(g[0].sfb_up) + 4);
    expect_named(g, dual_options(), "groups[0].sfb_up", 0, "aligned");
  }
  {
    auto g = dual_groups(1);
    g[0].n = 100, g[0].ldc = 104;
    expect_named(g, dual_options(), "groups[0].n", 0, "multiple of 8");
  }
  {
    auto g = dual_groups(1);
    g[0].b_up = g[0].b;
    expect_named(g, dual_options(), "groups[0].b_up", 0, "distinct");
  }
  {
    auto g = dual_groups(1);
    g[0].alpha_up = std::numeric_limits<float>::infinity();
    expect_named(g, dual_options(), "groups[0].alpha_up", 0, "finite");
    g[0].alpha_up_device = reinterpret_cast<const float*>(fake(kBase + 0xE00002));
    expect_named(g, dual_options(), "groups[0].alpha_up_device", 0, "4-byte");
  }
  {
    auto g = dual_groups(2);
    g[1].c = fake(addr(g[1].b_up));  // the output over the up weights
    expect_named(g, dual_options(), "groups[1].c", 1, "overlaps");
  }
  {
    Options o = dual_options();
    o.swiglu_limit = 0;
    expect_named(dual_groups(1), o, "options.swiglu_limit", -1, "> 0");
    o = dual_options();
    o.swiglu_alpha = std::numeric_limits<float>::quiet_NaN();
    expect_named(dual_groups(1), o, "options.swiglu_alpha", -1, "finite");
    o = dual_options();
    o.backend = Backend::reference;  // (the GPU reference kernel has the dual GEMM too)
    EXPECT_NO_THROW(validate(dual_groups(1), o));
    o = dual_options();
    o.epilogue = static_cast<Epilogue>(7);
    expect_named(dual_groups(1), o, "options.epilogue", -1, "unknown");
  }
}

}  // namespace
}  // namespace fp4gemm
