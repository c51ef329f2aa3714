// GPU-test harness for the device-driven MoE GEMM (fp4gemm::MoeGemm): random expert weights,
// activations and routings, guarded device buffers, checks against reference::moe_gemm.
//
//   const MoeConfig cfg = ...;                         // or random_moe_config(seed)
//   const MoeWeightSet ws(cfg);                        // host + device weights (seeded)
//   const MoeGemm plan(ws.weights(), ws.options());
//   const MoeBuffers buffers(ws);                      // A, scales, routing, guarded C
//   std::mt19937_64 rng(cfg.seed);
//   const MoeInputs in = make_inputs(ws, rng, make_routing(cfg, rng, RoutingKind::uniform));
//   EXPECT_TRUE(run_and_check(plan, ws, buffers, in));  // two runs, two poisons
//
// C lives in one device arena: a guard band of random bytes (MoeConfig::guard_bytes plus a random
// multiple of 16) before C, C's rows (row stride ldc; the padding past N is random bytes too), a
// guard band after. Before a run the C cells [rows, N] hold a poison (Poison::nan: 0xFF bytes,
// NaN in every output type; Poison::finite: the most negative finite value), everything else a
// fixed random image. After a run, every byte outside the C cells and every cell of a row no
// expert owns (before offsets[0], past offsets[E], past an expert's count) must be unchanged;
// every owned element must match the reference: bit for bit (ignoring the sign of zero, as
// check_outputs does) on GPU MODE data (values {0, +-0.5, +-1, +-1.5}, scales {1, 2}, powers-of-
// two alphas: every sum is exact), within SPEC §3's FP32 bound on full-range data, NaN exactly
// where the reference has NaN. Two runs with the two poisons and bitwise-equal owned cells prove
// every owned element was written (and deterministically).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "fp4gemm/moe.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test::moe {

// Alpha: none (1), one scalar (MoeWeights::alpha) or per expert on the device
// (MoeWeights::alpha_device; MoeWeights::alpha is then NaN, so a kernel reading it fails).
enum class AlphaMode { none, scalar, device };
const char* to_string(AlphaMode a);

struct MoeConfig {
  Format format = Format::nvfp4;
  ScaleLayout scale_layout = ScaleLayout::blocked;  // of the weight scales
  OutType out_type = OutType::bf16;
  MoeActivation activation = MoeActivation::fp4;
  MoeLayout layout = MoeLayout::contiguous;
  Values values = Values::gpumode;
  int experts = 8, n = 128, k = 128;
  int capacity = 256;   // contiguous: rows of C; masked: rows per expert slot
  bool gather = false;  // contiguous only: a gather index, A holds num_tokens unsorted rows
  int num_tokens = 0;   // with gather: rows of A (0: capacity)
  AlphaMode alpha = AlphaMode::none;
  bool padded = false;           // ldw, expert strides, lda, ldc beyond the minimum (padding: garbage)
  bool default_strides = false;  // pass 0 for ldw / expert_stride / scale_expert_stride (not padded)
  bool nan_scales = false;       // full values only: a few NaN scales (and NaN bf16 activations)
  int max_scale_code = 0;        // MXFP4 weights: every scale code clamped to <= this, and codes 0
                                 // and this one placed in every expert (0: no clamp)
  std::size_t guard_bytes = 4096;
  std::uint64_t seed = 1;

  int rows() const;              // rows of C: capacity, or experts * capacity (masked)
  int a_rows() const;            // rows of A: num_tokens with gather, else rows()
  std::string describe() const;  // one line: enough to reproduce the case
};

// A random configuration for the many-routings tier: E from 1 to 512, capacity up to 8192 rows,
// N and K shrunk until rows() * N * K <= mac_budget (the CPU reference stays fast) and the weights
// fit in 16 MB.
MoeConfig random_moe_config(std::uint64_t seed, double mac_budget = 2.0e7);
// The GPU tier's MoeRandom runs random_moe_config(kMoeRandomSeed0 + i) for i in
// [0, kMoeRandomSets), kMoeRoutingsPerSet routings each (the host tier checks their coverage).
inline constexpr int kMoeRandomSets = 80, kMoeRoutingsPerSet = 4;
inline constexpr std::uint64_t kMoeRandomSeed0 = 200000;

// The expert weights of a configuration: host data and their device copies.
class MoeWeightSet {
 public:
  // on_device = false: host data only (the host tier checks the harness itself without a GPU;
  // the device pointers are then null).
  explicit MoeWeightSet(const MoeConfig& cfg, bool on_device = true);
  MoeWeightSet(const MoeWeightSet&) = delete;
  MoeWeightSet& operator=(const MoeWeightSet&) = delete;

  const MoeConfig& config() const { return cfg_; }
  MoeWeights weights() const;  // device pointers, strides (0 with default_strides), alpha
  MoeOptions options() const;

  // Host data. Expert e's packed rows at w[e * expert_stride] (row stride ldw); its scales at
  // scales[e * scale_stride] in config().scale_layout (blocked padding and stride padding: NaN
  // codes), and dense linear in scales_linear[e * n * cols].
  std::int64_t ldw = 0, expert_stride = 0, scale_stride = 0, cols = 0;
  std::int64_t lda = 0, ldc = 0;  // of the runs' A (bytes) and C (elements)
  std::vector<std::uint8_t> w, scales, scales_linear;
  float scalar_alpha = 1.0f;         // AlphaMode::scalar
  std::vector<float> device_alphas;  // AlphaMode::device: what alpha_device holds at first

  // Expert e's weights dequantised, [n][k] floats (exact), built on first use (thread-safe).
  const std::vector<float>& dequantised(int e) const;
  // Device pointers (tests that break them on purpose).
  std::uint8_t* device_w() const { return d_w_ ? d_w_->get() : nullptr; }
  std::uint8_t* device_scales() const { return d_scales_ ? d_scales_->get() : nullptr; }
  float* device_alpha() const { return d_alpha_ ? reinterpret_cast<float*>(d_alpha_->get()) : nullptr; }

 private:
  MoeConfig cfg_;
  std::unique_ptr<DeviceBuffer> d_w_, d_scales_, d_alpha_;
  mutable std::vector<std::vector<float>> dq_;
  mutable std::unique_ptr<std::once_flag[]> dq_once_;
};

// ---- routings ---------------------------------------------------------------------------------

struct Routing {
  std::vector<int> offsets;  // contiguous: [E + 1]
  std::vector<int> counts;   // masked: [E]
  std::vector<int> gather;   // contiguous with gather: [capacity] (entries outside the routed rows
                             // hold valid tokens too)
  std::string kind;
  std::string describe() const;  // kind, totals, and the offsets / counts when short
};

enum class RoutingKind {
  uniform,      // every routed row to a random expert; offsets[E] random <= capacity
  one_expert,   // all rows to one expert (the first, the last or any)
  few_experts,  // 1..3 experts own rows, the others are empty
  full,         // offsets[E] == capacity (masked: every count == capacity)
  partial,      // offsets[E] < capacity (rows past it must stay untouched)
  shifted,      // offsets[0] > 0 (rows before it must stay untouched too)
  skewed,       // Zipf-like expert popularity
  empty,        // no rows at all
  topk,         // T tokens x top-k distinct experts, sorted by expert (gather = token ids)
  balanced,     // near-equal rows per expert
};
inline constexpr int kRoutingKinds = 10;
const char* to_string(RoutingKind k);

// A random routing of `kind` for `cfg` with at most `max_rows` routed rows in all (the MAC budget;
// the full / one-expert kinds then route fewer rows than capacity).
Routing make_routing(const MoeConfig& cfg, std::mt19937_64& rng, RoutingKind kind,
                     std::int64_t max_rows = std::int64_t{1} << 40);
// Contiguous routing from rows per expert (offsets start at `first`), with a random gather index
// when cfg.gather.
Routing routing_from_counts(const MoeConfig& cfg, std::mt19937_64& rng, const std::vector<int>& counts, int first = 0,
                            const std::string& kind = "counts");
// The expert owning each row of C, or -1.
std::vector<int> row_owners(const MoeConfig& cfg, const Routing& routing);

// ---- one run's inputs -------------------------------------------------------------------------

struct MoeInputs {
  std::vector<std::uint8_t> a;         // a_rows * lda bytes: packed e2m1 or bf16 bits
  std::vector<std::uint8_t> a_scales;  // FP4: linear [a_rows, cols]
  Routing routing;
  std::vector<float> alphas;  // per expert: what the run multiplies by (1, the scalar, or the
                              // device values, which upload() writes to alpha_device)
};

// New random activations (and the weight set's alphas) with `routing`.
MoeInputs make_inputs(const MoeWeightSet& ws, std::mt19937_64& rng, Routing routing);

// ---- device buffers of the runs -----------------------------------------------------------------

class MoeBuffers {
 public:
  // on_device = false: the C image and its layout only (no device buffers; the device calls
  // below then throw std::logic_error).
  explicit MoeBuffers(const MoeWeightSet& ws, bool on_device = true);
  ~MoeBuffers();
  MoeBuffers(const MoeBuffers&) = delete;
  MoeBuffers& operator=(const MoeBuffers&) = delete;

  // Writes A, its scales, the routing (whatever it holds: tests of bad data upload bad ones) and,
  // for AlphaMode::device, the alphas, on `stream` (the host data may change once this returns).
  void upload(const MoeInputs& in, cudaStream_t stream) const;
  // The C arena's pristine image with `poison` in the C cells, and writing it on `stream`.
  std::vector<std::uint8_t> c_image(Poison poison) const;
  void reset_c(Poison poison, cudaStream_t stream) const;
  // Synchronises `stream` and copies the whole C arena back.
  std::vector<std::uint8_t> download_c(cudaStream_t stream) const;
  std::size_t c_offset() const { return c_offset_; }  // of C in the arena
  std::size_t c_bytes() const { return c_bytes_; }    // rows * ldc * element size

  MoeArgs args() const;  // every pointer of this buffer set
  int* device_offsets() const { return offsets_; }
  int* device_counts() const { return counts_; }
  int* device_gather() const { return gather_; }
  std::uint8_t* device_a() const { return a_; }
  std::uint8_t* device_a_scales() const { return a_scales_; }
  std::uint8_t* device_c() const { return arena_ + c_offset_; }

  // Downloads A, its scales, the routing, the weights and the alphas and compares them with what
  // was uploaded: a kernel writing into an input is caught.
  ::testing::AssertionResult inputs_unchanged(const MoeInputs& in, cudaStream_t stream) const;

 private:
  const MoeWeightSet* ws_;
  std::uint8_t *a_ = nullptr, *a_scales_ = nullptr, *arena_ = nullptr;
  int *offsets_ = nullptr, *counts_ = nullptr, *gather_ = nullptr;
  std::size_t a_bytes_ = 0, a_scale_bytes_ = 0, c_offset_ = 0, c_bytes_ = 0;
  std::vector<std::uint8_t> image_;  // the arena with the NaN poison
};

// ---- expected outputs and checks ----------------------------------------------------------------

// The C arena the run must leave: c_image(poison) with reference::moe_gemm's rows written (its
// threads: 0 = all cores).
std::vector<std::uint8_t> expected_c(const MoeWeightSet& ws, const MoeBuffers& buffers, const MoeInputs& in,
                                     Poison poison, int threads = 0);

// Compares a downloaded arena with the expected one (see the top of this file). Rows flagged in
// `skip_rows` (size rows()) are owned rows whose values are undefined (a bad gather index) and not
// compared; every other cell and every byte outside the C cells is.
::testing::AssertionResult check_c(const MoeWeightSet& ws, const MoeBuffers& buffers, const MoeInputs& in,
                                   std::span<const std::uint8_t> got, std::span<const std::uint8_t> expected,
                                   const std::vector<char>* skip_rows = nullptr, int max_reports = 10);

// The owned cells (rows * N elements, owned rows only) of an arena, for bitwise comparisons.
std::vector<std::uint8_t> owned_cells(const MoeWeightSet& ws, const MoeBuffers& buffers, const Routing& routing,
                                      std::span<const std::uint8_t> arena);

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  operator cudaStream_t() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// A CUDA graph of one plan.run(args, stream), captured on `stream`.
class Graph {
 public:
  Graph(const MoeGemm& plan, const MoeArgs& args, cudaStream_t stream);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void launch(cudaStream_t stream) const;

 private:
  cudaGraphExec_t exec_ = nullptr;
};

struct MoeRunOptions {
  Launch launch = Launch::stream;
  bool check_inputs = true;  // inputs_unchanged after the runs
  int reference_threads = 0;
};

// Uploads `in`, runs the plan twice (NaN poison, then the finite one; on a stream or through a
// freshly captured graph), checks both arenas, requires the owned cells to be bitwise equal, the
// inputs unchanged and plan.check() to pass. Exceptions become failures; the message starts with
// the configuration and the routing.
::testing::AssertionResult run_and_check(const MoeGemm& plan, const MoeWeightSet& ws, const MoeBuffers& buffers,
                                         const MoeInputs& in, const MoeRunOptions& options = {});

}  // namespace fp4gemm::test::moe
