// fp4gemm public API: block-scaled FP4 (NVFP4 / MXFP4) grouped GEMM, plan once, run many times.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <driver_types.h>  // cudaStream_t

#include "fp4gemm/tuning.hpp"

namespace fp4gemm {

// ---------------------------------------------------------------------------------------------
// Formats and options
// ---------------------------------------------------------------------------------------------

// NVFP4: e2m1 values, one E4M3 scale per 16 K-elements. MXFP4: e2m1, one UE8M0 scale per 32.
enum class Format { nvfp4, mxfp4 };

// linear: [rows, K/vec] row-major bytes. blocked: the cuBLASLt / torch._scaled_mm / GPU MODE
// "reordered" layout of 512-byte atoms (128 rows x 4 scale columns), see SPEC §2.
enum class ScaleLayout { linear, blocked };

enum class OutType { f16, bf16, f32 };

// What a plan does with its products (the pointer-array Plan and fp4gemm::MoeGemm alike):
//   none:      C = alpha * A B^T
//   silu:      a gated activation over two products ("dual GEMM", SwiGLU): g = alpha * A B^T,
//              u = alpha_up * A B_up^T, C = silu(g) * u, silu(g) = g / (1 + exp(-g))
//   swigluoai: gpt-oss's, g' = min(g, limit), u' = clamp(u, -limit, limit),
//              g' * sigmoid(swiglu_alpha * g') * (u' + 1)
// evaluated in FP32 from the FP32 accumulators and rounded once to the output type.
enum class Epilogue { none, silu, swigluoai };
// swigluoai's constants as gpt-oss sets them: the default swiglu_alpha / swiglu_limit of every
// options struct and binding.
inline constexpr float kSwigluAlpha = 1.702f, kSwigluLimit = 7.0f;

// Which kernel a plan runs. `automatic` picks the fast fused kernel and fails (with a clear
// error) on a GPU that has none; the reference kernel runs only when asked for.
enum class Backend { automatic, fast, reference };

const char* to_string(Format f);
const char* to_string(ScaleLayout l);
const char* to_string(OutType t);
const char* to_string(Backend b);
const char* to_string(Epilogue e);
int scale_block_size(Format f);      // 16 or 32 K-elements per scale
std::size_t out_type_size(OutType t);  // bytes per output element

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

// Every validation failure and CUDA failure surfaces as fp4gemm::Error. `argument()` names the
// offending argument ("groups[3].ldb", "options.format", ...); `group()` is the group index or
// -1 when the error is not about one group.
class Error : public std::runtime_error {
 public:
  Error(std::string argument, int group, const std::string& message);
  const std::string& argument() const noexcept { return argument_; }
  int group() const noexcept { return group_; }

 private:
  std::string argument_;
  int group_;
};

// ---------------------------------------------------------------------------------------------
// Problem description (pointer-array mode: every group owns its buffers)
// ---------------------------------------------------------------------------------------------

// Group g computes C[M, N] = alpha * dq(A)[M, K] * dq(B)[N, K]^T.
// A, B: packed e2m1, K-contiguous, two elements per byte (even k in the low nibble); row stride
//       in bytes (multiple of 16, >= K/2).
// sfa, sfb: scale bytes of A (M rows) and B (N rows) in the plan's scale layout, dense.
// C: row-major [M, N], row stride ldc in elements (multiple of 8, >= N), type = options.out_type.
// All pointers are device pointers, 16-byte aligned. M may be 0 (the group is skipped; its
// pointers may then be null).
struct GroupDesc {
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  std::int64_t lda = 0;  // bytes
  const void* b = nullptr;
  std::int64_t ldb = 0;  // bytes
  const void* sfa = nullptr;
  const void* sfb = nullptr;
  void* c = nullptr;
  std::int64_t ldc = 0;  // elements
  float alpha = 1.0f;
  // Optional device pointer to this group's alpha, read at run time (overrides `alpha`).
  const float* alpha_device = nullptr;
  // Options::epilogue != none (a dual GEMM, C = act(alpha A B^T, alpha_up A B_up^T)): `b` holds
  // the gate weights and b_up the up weights, [N, K] each with row stride ldb, a multiple of 16
  // bytes apart; sfb_up their scales (the plan's layout). N must be a multiple of 8. Ignored
  // otherwise.
  const void* b_up = nullptr;
  const void* sfb_up = nullptr;
  float alpha_up = 1.0f;
  const float* alpha_up_device = nullptr;  // optional, overrides alpha_up
};

struct Options {
  Format format = Format::nvfp4;
  ScaleLayout scale_layout = ScaleLayout::linear;  // of both sfa and sfb
  OutType out_type = OutType::f16;
  Backend backend = Backend::automatic;
  int device = -1;  // -1: the current device
  // Dual GEMM (GroupDesc::b_up): the gated activation; swigluoai's constants (gpt-oss's values;
  // limit > 0). Both backends: the fast kernel, and Backend::reference (the GPU reference kernel:
  // both products in FP32 in K order, the same FP32 activation).
  Epilogue epilogue = Epilogue::none;
  float swiglu_alpha = kSwigluAlpha, swiglu_limit = kSwigluLimit;
  // Dual GEMMs read the weight scales from a copy with gate and up rows paired, made at plan time
  // (later changes of the scale bytes are not seen). true: every run reads the scale buffers as
  // they are then -- the kernel gathers them itself (blocked scales, or linear rows of a multiple
  // of 4 bytes; ~8 % slower) or the copy is made again before the run (other linear scales) --
  // for callers that refill the scale buffers between runs (GPU MODE's harness).
  bool rescale_each_run = false;
  // Measurement and test knobs (fp4gemm/tuning.hpp); the defaults are the production choices.
  Tuning tuning = {};
};

// ---------------------------------------------------------------------------------------------
// Plan
// ---------------------------------------------------------------------------------------------

// A plan validates everything (SPEC §6) and does all set-up once: TMA descriptors, the tile
// schedule, device workspace. `run` then allocates nothing, never synchronises the host and is
// capturable in a CUDA graph. A plan is bound to the pointers and shapes it was built with; the
// data behind the pointers may change between runs. Lifetime rule: the caller keeps every buffer
// a plan points to (A, B, scales, C, alpha_device) allocated and in place for as long as the plan
// may run — including replays of CUDA graphs that captured it; a plan that outlives a buffer
// reads or writes freed memory. Movable, not copyable.
class Plan {
 public:
  // Plan-time device work that reads the caller's arrays (a dual GEMM's paired scale copy) is
  // ordered after the work enqueued so far on `stream` -- the stream that wrote them (the legacy
  // default stream, nullptr, also orders after every blocking stream; pass a non-blocking stream
  // that wrote the scales explicitly). The constructor returns when that work is done.
  Plan(std::span<const GroupDesc> groups, const Options& options, cudaStream_t stream = nullptr);
  // A moved-from Plan holds nothing: every member but assignment and destruction throws
  // fp4gemm::Error (argument "plan").
  ~Plan();
  Plan(Plan&&) noexcept;
  Plan& operator=(Plan&&) noexcept;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // Enqueue the grouped GEMM on `stream` (a stream of the plan's device). Throws fp4gemm::Error on
  // a launch failure, on a CUDA error an earlier call left pending (argument "run"; nothing is
  // launched), and on a stream of another device (argument "stream"). Runs of one plan share its
  // workspace, so they are serialised on the device by an event: a run waits for the previous
  // run of the same plan, whichever stream or host thread enqueued it (also across CUDA-graph
  // replays: during capture the wait and record are external-event nodes). Thread-safe. Use
  // separate plans to run the same problem concurrently. Eager runs from the second on launch a
  // CUDA graph of the run's kernels (the same kernels with the same arguments: a plan bakes in
  // every pointer) instead of launching them one by one: less host time per call.
  void run(cudaStream_t stream = nullptr) const;
  // Eager runs served from that graph so far (diagnostics, tests).
  std::size_t graph_replays() const;

  // What will run, e.g. "sm90_fused_swapab" or "reference"; and a one-line description of the
  // configuration (tile shape, stages, CTAs, tiles) for logs.
  std::string kernel_name() const;
  std::string describe() const;

  const Options& options() const;
  int num_groups() const;
  double flops() const;          // sum of 2*M*N*K
  double min_bytes() const;      // A, B, scales, C once each
  std::size_t device_bytes() const;  // device memory the plan holds (workspace, schedule, maps)

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Convenience: plan + run in one call (builds a plan every time; prefer Plan for repeated use).
void grouped_gemm(std::span<const GroupDesc> groups, const Options& options,
                  cudaStream_t stream = nullptr);

// ---------------------------------------------------------------------------------------------
// Device queries
// ---------------------------------------------------------------------------------------------

struct DeviceInfo {
  int index = -1;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  std::size_t l2_bytes = 0;
  std::size_t smem_per_block_optin = 0;
  bool has_fast_kernel = false;  // sm_90 (Hopper) today
};

// Number of CUDA devices usable by this process (0 when there is no GPU or no driver).
int device_count() noexcept;
// Throws fp4gemm::Error("device", -1, ...) when there is no such device.
DeviceInfo device_info(int device = -1);

}  // namespace fp4gemm
