// GPU-test harness: random grouped problems, guarded device buffers, checks against the reference.
//
// Typical use (any backend):
//
//   test::ProblemConfig cfg;                       // or test::random_config(seed)
//   cfg.shapes = {{80, 4096, 7168}, {0, 4096, 7168}};
//   EXPECT_TRUE(test::run_and_check(cfg, Backend::fast));
//
// or step by step, to reuse one problem and its reference across runs, launches and backends:
//
//   const test::Problem problem = test::make_problem(cfg);     // host data, seeded
//   const test::DeviceProblem device(problem);                // one guarded device arena
//   const test::Expected expected = test::cpu_expected(problem);
//   Plan plan(device.descs(), device.options(Backend::fast));
//   EXPECT_TRUE(test::run_plan_and_check(problem, device, plan, expected));  // both poisons
//
// or lower still (one run: cannot tell "unwritten" from "expected = poison", see Poison below):
//
//   const auto arena = test::run_plan(plan, device, test::Launch::graph);  // resets C first
//   EXPECT_TRUE(test::check_outputs(problem, device, expected, arena));
//
// Every run starts from a pristine arena: inputs, the C cells poisoned, and random garbage
// everywhere else (guard bands of ProblemConfig::guard_bytes, 4 KiB by default, before and after
// each C, gaps, C row padding, stride padding, blocked-scale padding). After a run the whole arena
// is compared with that image outside the C cells, so any write outside C[0:M, 0:N] (row padding
// included) or into an input is reported.
//
// Two poisons (Poison): 0xFF bytes (NaN in every output type) and a finite sentinel (the most
// negative finite value of the output type). A NaN poison alone cannot tell an unwritten element
// from one whose expected value is NaN; a finite one alone cannot tell it from an element whose
// expected value happens to be the sentinel. run_plan_and_check (and so run_and_check) therefore
// runs every plan at least twice, once with each poison, checks both runs and requires them to be
// bitwise identical: an element left unwritten holds a different value in the two runs, whatever
// its expected value, and fails.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::test {

// Throws std::runtime_error("<what>: <error name> (<error string>)") unless err == cudaSuccess.
void cuda_check(cudaError_t err, const char* what);
#define FP4GEMM_TEST_CUDA(call) ::fp4gemm::test::cuda_check((call), #call)

// One cudaMalloc'd buffer, freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::uint8_t* get() const { return ptr_; }

 private:
  std::uint8_t* ptr_ = nullptr;
};

// gpumode: e2m1 values {0, +-0.5, +-1, +-1.5}, scales {1, 2} (E4M3 0x38 / 0x40, UE8M0 127 / 128);
//          every partial sum is a multiple of 0.25, so FP32 accumulation is exact in any order
//          and the output must be bit-identical to the reference (SPEC §3).
// full:    all 16 nibbles; E4M3 scale codes over the whole finite range 2^-9..448 (UE8M0 codes
//          107..147), mostly clustered per row within a few binades so that every block matters,
//          some rows fully random; NaN scale codes only when asked for.
enum class Values { gpumode, full };
const char* to_string(Values v);

struct Shape {
  int m = 0, n = 0, k = 0;
};

struct ProblemConfig {
  Format format = Format::nvfp4;
  ScaleLayout layout = ScaleLayout::linear;
  OutType out_type = OutType::f16;
  Values values = Values::gpumode;
  // One per group; M may be 0. {0, 0, 0} is a blank group: its descriptor is exactly GroupDesc{}
  // (M = N = K = 0, null pointers, zero strides, alpha 1), whatever alphas / alpha_on_device say.
  std::vector<Shape> shapes;
  std::uint64_t seed = 1111;
  bool padded_strides = false;       // lda/ldb/ldc larger than needed (padding = garbage)
  int alignment = 16;                // buffers start at random multiples of this (16..256)
  bool poison_scale_padding = true;  // blocked layout: padding bytes are NaN codes, not 0
  bool nan_scales = false;           // full mode: a few rows of A and B get one NaN scale
  bool null_empty_groups = true;     // groups with M = 0 get null pointers (half of them)
  // Guard bands before and after each C (bytes of garbage that must stay untouched). Smaller
  // guards keep problems with tens of thousands of groups in memory.
  std::size_t guard_bytes = 4096;
  // Per-group alpha; empty: 1 for all, one value: the same for all.
  std::vector<float> alphas;
  // Pass alpha through GroupDesc::alpha_device (GroupDesc::alpha is then NaN, so a kernel that
  // reads the host value fails).
  bool alpha_on_device = false;

  std::string describe() const;  // one line: enough to reproduce the problem
};

// One group's host data, in the layouts handed to the device.
struct GroupData {
  int m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;   // bytes, bytes, elements
  std::vector<std::uint8_t> a, b;           // m * lda and n * ldb bytes
  std::vector<std::uint8_t> sfa_linear, sfb_linear;  // [rows, K/vec], row-major
  std::vector<std::uint8_t> sfa, sfb;       // the same in config.layout (what the device gets)
  float alpha = 1.0f;
  bool null_pointers = false;  // M = 0 group described with null pointers
  bool blank = false;          // shape {0, 0, 0}: described by GroupDesc{} exactly
};

struct Problem {
  ProblemConfig config;
  std::vector<GroupData> groups;

  // gpumode values and every alpha a power of two (or 0): the output must be bit-identical.
  bool bit_exact() const;
  double macs() const;  // sum of M*N*K
  std::string describe() const { return config.describe(); }
};

Problem make_problem(const ProblemConfig& config);

// ---- data helpers shared with other suites (the MoE tier, tests/gpu/moe_problem.cpp) ----------

// Random bytes, eight per draw of `rng`.
void fill_random(std::mt19937_64& rng, std::uint8_t* dst, std::size_t bytes);
// `rows` packed e2m1 rows of K elements with row stride `ld` bytes in `values` mode (bytes past
// K/2 in a row are garbage); what make_problem generates for A and B.
std::vector<std::uint8_t> random_packed(std::mt19937_64& rng, Values values, int rows, int k, std::int64_t ld);
// Linear [rows, cols] scale codes of `format` in `values` mode; what make_problem generates.
std::vector<std::uint8_t> random_scales(std::mt19937_64& rng, Format format, Values values, int rows,
                                        std::int64_t cols);

// Output elements: the bits of element `index` of a buffer of `type`, and their value.
std::uint32_t load_output_bits(const std::uint8_t* base, OutType type, std::int64_t index);
double output_bits_to_double(std::uint32_t bits, OutType type);
// Half the spacing of `type`'s grid at magnitude |v| (finite; subnormal spacing below the
// smallest normal), the spacing of its subnormals, and the magnitude from which values round to
// infinity.
double output_half_ulp(OutType type, double v);
double output_min_step(OutType type);
double output_overflow(OutType type);

// A GLU output (MoE GLU epilogue, dual GEMM) against the float64 value on full-range data: G, U
// the exact gate / up values (alphas applied), mag_g / mag_u the FP32 error bounds of their sums
// (SPEC 3), x_exact = act(G, U). The bound carries them through the activation (derivative bounds)
// plus its FP32 evaluation and the output rounding; an infinite `got` passes when x_exact is within
// the bound of the type's overflow, with its sign.
struct GluBound {
  double tol;
  bool ok;
};
GluBound glu_within_bound(OutType type, double got, double G, double U, double mag_g, double mag_u, double x_exact);

// ---- random problems ------------------------------------------------------------------------

struct RandomLimits {
  int max_groups = 32;
  int max_m = 300;
  int max_n = 1024;
  int max_k = 2048;
  double zero_m_rate = 0.15;      // fraction of groups with M = 0
  double varying_nk_rate = 0.3;   // fraction of problems whose groups differ in N and K
  double mac_budget = 2.0e7;      // shapes are shrunk until sum M*N*K fits (keeps the CPU
                                  // reference fast)
  // Blank groups (GroupDesc{}: M = N = K = 0, null pointers) mixed among the real ones: this
  // fraction of the M = 0 groups become blank, and this fraction of the problems get 1..3 extra
  // blank groups inserted anywhere (first, last, between real groups).
  double blank_rate = 0.5;
  double blank_insert_rate = 0.35;
};

// The random problems of the GPU tier, shared with the host tier's coverage test
// (tests/host/test_random_coverage.cpp): ReferenceRandom runs random_config(seed) for seed in
// [0, kReferenceRandomProblems); FusedRandom runs random_config(kFusedRandomSeed0 + i,
// fused_random_limits()) for i in [0, kFusedRandomProblems).
inline constexpr int kReferenceRandomProblems = 240;
inline constexpr int kFusedRandomProblems = 520;
inline constexpr std::uint64_t kFusedRandomSeed0 = 100000;
RandomLimits fused_random_limits();

std::vector<Shape> random_shapes(std::mt19937_64& rng, Format format, const RandomLimits& limits);
// Random format, layout, output type, values, shapes (blank groups included), strides,
// alignment, alphas (powers of two in gpumode so that bit-exactness still holds), alpha_device,
// NaN scales (full mode).
ProblemConfig random_config(std::uint64_t seed, const RandomLimits& limits = {});

// ---- device buffers -------------------------------------------------------------------------

// What the C cells hold before a run: 0xFF bytes (NaN in f16, bf16 and f32) or the most negative
// finite value of the output type (f16 0xFBFF, bf16 0xFF7F, f32 0xFF7FFFFF).
enum class Poison { nan, finite };
const char* to_string(Poison p);
// The poison's bits in `type` (for reports: "never written").
std::uint32_t poison_bits(Poison p, OutType type);

// All buffers of a problem in one device allocation (an "arena"), with guard bands.
class DeviceProblem {
 public:
  explicit DeviceProblem(const Problem& problem);
  ~DeviceProblem();
  DeviceProblem(const DeviceProblem&) = delete;
  DeviceProblem& operator=(const DeviceProblem&) = delete;

  // Device pointers of every group, ready for Plan / grouped_gemm.
  const std::vector<GroupDesc>& descs() const { return descs_; }
  // Options matching the problem (format, layout, out type) with `backend`, current device.
  Options options(Backend backend) const;

  // Restores the pristine image on the device, the C cells filled with `poison`, and
  // synchronises. Outside the C cells the image is the same for both poisons.
  void reset(Poison poison = Poison::nan) const;
  // Synchronises the device and copies the whole arena back.
  std::vector<std::uint8_t> download() const;

  // Byte offsets of each group's buffers in the arena (kNone: null pointer / not allocated).
  static constexpr std::size_t kNone = ~std::size_t{0};
  std::size_t guard_bytes() const { return guard_bytes_; }
  struct Offsets {
    std::size_t a = kNone, b = kNone, sfa = kNone, sfb = kNone, c = kNone, alpha = kNone;
    std::size_t c_bytes = 0;  // m * ldc * element size
  };
  const std::vector<Offsets>& offsets() const { return offsets_; }
  const std::vector<std::uint8_t>& image() const { return image_; }
  std::size_t bytes() const { return image_.size(); }

 private:
  const Problem* problem_;
  std::vector<std::uint8_t> image_;
  std::vector<Offsets> offsets_;
  std::vector<GroupDesc> descs_;
  std::size_t guard_bytes_ = 0;
  std::uint8_t* device_ = nullptr;
};

// ---- expected outputs -----------------------------------------------------------------------

// Expected C of (a subset of) the rows of every group, dense [rows[g].size(), N] out_type bits.
struct Expected {
  std::vector<std::vector<int>> rows;
  std::vector<std::vector<std::uint8_t>> values;
  std::string source;
};

// The exact CPU reference (reference::grouped_gemm). When sum M*N*K exceeds `mac_budget`, a
// random subset of rows of each group is computed (first and last rows included, >= 4 per group);
// the remaining rows are still checked for "written, and NaN exactly where expected".
constexpr double kDefaultMacBudget = 2.0e9;
Expected cpu_expected(const Problem& problem, double mac_budget = kDefaultMacBudget);
// The output of another backend (all rows), e.g. Backend::reference as a fast oracle for big
// shapes. Only sensible as bit-exact oracle in gpumode; in full mode the tolerance check below
// falls back to the exact host dot product anyway. The oracle runs once with each poison and
// must give bitwise the same C (else std::runtime_error: it left elements unwritten).
Expected backend_expected(const Problem& problem, const DeviceProblem& device, Backend oracle);

// ---- running and checking -------------------------------------------------------------------

enum class Launch { stream, graph };  // plan.run on a stream, or captured into a CUDA graph

// Resets the device arena (C cells = `poison`), runs the plan once on a fresh non-blocking stream
// (or through a CUDA graph captured from it), synchronises, checks for CUDA errors and returns the
// whole arena. CUDA failures throw std::runtime_error, library failures fp4gemm::Error.
// One run cannot tell "unwritten" from "expected value = poison": check with
// run_plan_and_check, which runs with both poisons.
std::vector<std::uint8_t> run_plan(const Plan& plan, const DeviceProblem& device,
                                   Launch launch = Launch::stream, Poison poison = Poison::nan);

// full-mode tolerance (gpumode problems with power-of-two alphas are always compared bit-exactly,
// +0 == -0):
//   gpumode_rule: |out - ref| <= 1e-3 + 1e-3 |ref| (SPEC §3); when that fails, the exact value x
//                 and s = |alpha| sum_k |a_k b_k| are computed on the host and
//                 |out - x| <= 1e-3 + 1e-3 |x| + K 2^-22 s + half an output ulp is accepted
//                 (FP32 accumulation in any order).
//   fp32_bound:   no absolute slack: out == ref, or |out - x| <= K 2^-22 s + 2^-22 |x| + half an
//                 output ulp (+ the smallest subnormal step): what any exact-dequantisation FP32
//                 kernel meets, also for tiny outputs that 1e-3 would wave through.
// Both: NaN exactly where the reference has NaN; +-inf accepted only when x (within the bound)
// rounds past the largest finite value.
enum class Tolerance { gpumode_rule, fp32_bound };

struct CheckOptions {
  Tolerance tolerance = Tolerance::gpumode_rule;
  int max_reports = 10;  // mismatches listed in the failure message
};

// Checks an arena returned by run_plan: nothing outside the C cells changed (guard bands, row
// padding, gaps, inputs), every checked element matches, every other element is NaN exactly where
// expected. Elements holding a poison pattern are reported as "never written". One arena alone
// does not prove every element was written (see Poison); run_plan_and_check does. The failure
// message lists the first mismatches with group / row / col / values.
::testing::AssertionResult check_outputs(const Problem& problem, const DeviceProblem& device,
                                         const Expected& expected,
                                         std::span<const std::uint8_t> arena,
                                         const CheckOptions& options = {});

struct RunOptions {
  Launch launch = Launch::stream;
  CheckOptions check;
  double mac_budget = kDefaultMacBudget;
  // Runs of the one plan, alternating the poisons (NaN first): each is checked, and all must be
  // bitwise identical (every element written, and deterministic, SPEC §3). At least 2.
  int runs = 2;
  // The plan's measurement and test knobs (run_and_check: Options::tuning).
  Tuning tuning;
};

// Runs `plan` options.runs (>= 2) times with alternating poisons, checks every run with
// check_outputs and requires bitwise-equal arenas. Exceptions become failures.
::testing::AssertionResult run_plan_and_check(const Problem& problem, const DeviceProblem& device,
                                              const Plan& plan, const Expected& expected,
                                              const RunOptions& options = {});

// make_problem + DeviceProblem + Plan(backend) + cpu_expected + run_plan_and_check.
// Exceptions become failures; the message starts with the problem description.
::testing::AssertionResult run_and_check(const ProblemConfig& config, Backend backend,
                                         const RunOptions& options = {});

}  // namespace fp4gemm::test
