// The kernels behind the plans, one interface per plan kind: each entry says where it runs and
// builds its per-plan set-up. A pointer-array Plan picks its kernel by the requested backend; an
// MoeGemm takes the first MoE kernel that runs on its device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "device/group_params.hpp"
#include "fp4gemm/fp4gemm.hpp"
#include "fp4gemm/moe.hpp"
// The expert layer's own kernels (MoeLayer, host/moe_layer.cpp): the decode path, the top-k
// combine and the alpha folding. Host code reaches every kernel through this header.
#include "kernels/combine.hpp"
#include "kernels/decode_layer.hpp"
// The expert-parallel exchange's kernels (EpExchange, host/ep_exchange.cpp).
#include "kernels/ep.hpp"
// The MoE routing's kernel (fp4gemm::align_routing and the layer's routing, host/routing.cpp).
#include "kernels/routing.hpp"
// The expert weights' repack into pieces (fp4gemm::pack_pieces, host/pieces.cpp).
#include "kernels/pieces.hpp"
// The GPU activation quantiser (fp4gemm::quantize_activations and the layer's, host/quantize.cpp).
#include "kernels/quantize.hpp"
// The fused GEMM's launches and the dual GEMM's paired scale copies (the plans, host/plans/).
#include "kernels/sm90/fused_launch.hpp"
#include "kernels/sm90/glu_scales.hpp"
#include "kernels/sm90/plan_kernels.hpp"

namespace fp4gemm::detail {

// One kernel's set-up for one plan: built once (throws fp4gemm::Error), run many times. `run`
// enqueues only: no allocation, no synchronisation.
class KernelPlan {
 public:
  virtual ~KernelPlan() = default;
  virtual void run(cudaStream_t stream) const = 0;
  virtual std::string describe() const = 0;  // configuration for logs ("" when nothing to say)
  virtual std::size_t device_bytes() const = 0;
};

// What a kernel's build gets: the validated groups, the options, the device, and the plan's device
// copy of the group table (one GroupParams per group).
struct KernelContext {
  std::span<const GroupDesc> groups;
  const Options& options;
  const DeviceInfo& device;
  const GroupParams* d_groups;
  int max_m, max_n;  // over the groups with work
  cudaStream_t after;  // plan-time reads of the caller's arrays wait for this stream's work
};

struct KernelEntry {
  const char* name;  // Plan::kernel_name()
  Backend backend;   // Backend::fast or Backend::reference
  bool (*runs_on)(const DeviceInfo& device);
  std::unique_ptr<KernelPlan> (*build)(const KernelContext& context);
};

// Every kernel, fast ones first.
std::span<const KernelEntry> kernels();

// The kernel for `requested` on `device`: automatic and fast take the first fast kernel that runs
// there (Error naming options.backend when none does); reference the reference kernel.
const KernelEntry& select_kernel(Backend requested, const DeviceInfo& device);

// ---- MoE kernels (MoeGemm) ----

// Where a MoE plan's pre-pass writes its activations (MoeKernelPlan::prepared_input): rows as the
// routed rows, ld elements each; rows null where the plan has no such workspace.
struct MoePreparedInput {
  void* rows = nullptr;
  std::int64_t ld = 0;
};

// One MoE kernel's set-up for one weight set: built once (throws fp4gemm::Error), then enqueued
// with a new routing each run. `enqueue` launches only (no allocation, no synchronisation, no
// validation: MoeGemm has checked the arguments); bad routing data is reported through the plan's
// device error word (device/moe_error.hpp).
class MoeKernelPlan {
 public:
  virtual ~MoeKernelPlan() = default;
  virtual void enqueue(const MoeArgs& args, cudaStream_t stream) const = 0;
  // Makes the plan's copies of the caller's weight data again, on `stream` (not being captured;
  // MoeGemm serialises it with runs): MoeGemm::reload_scales.
  virtual void reload(cudaStream_t stream) const = 0;
  virtual std::string describe() const = 0;  // configuration after the kernel's name
  virtual std::size_t device_bytes() const = 0;

  // The MoE layer's W4A16 hand-over (host/moe_layer.cpp): GEMM1's GLU epilogue writes its bf16
  // output straight into GEMM2's activation workspace, in the order GEMM2's pre-pass would write
  // it, and GEMM2 runs without its pre-pass. A plan that cannot take a part says so (false / null).
  // From now on this plan writes its output (MoeArgs::ldc elements per row) in that k order.
  virtual bool write_k_order_output() { return false; }
  // Where this plan's pre-pass writes its activations, when a run may skip it (bf16 activations, no
  // gather): enqueue_prepared then reads them there. {} where it cannot.
  virtual MoePreparedInput prepared_input() const { return {}; }
  // enqueue() without the pre-pass: the workspace holds this run's activations (args.a is not read).
  virtual void enqueue_prepared(const MoeArgs& args, cudaStream_t stream) const;
  // From now on the plan's GEMM lets the launch after it start at once (its CTAs' prologue beside this one's tail):
  // only for a caller that launches that next kernel itself, as a programmatic dependent that waits
  // (griddepcontrol.wait) before it reads anything this plan writes -- the MoE layer. A plan without it ignores it.
  virtual void let_dependents_start() {}
};

// What an MoE kernel's build gets: the validated weights (linear scale strides resolved) and
// options, the device, and the plan's device error word (zeroed; MoeGemm::check reads it).
struct MoeKernelContext {
  const MoeWeights& weights;
  const MoeOptions& options;
  const DeviceInfo& device;
  int rows;    // of A and C: capacity, or experts x capacity (masked)
  int* error;  // MoeErrorWord
  cudaStream_t after;  // plan-time reads of the weights wait for this stream's work
};

struct MoeKernelEntry {
  const char* name;  // MoeGemm::kernel_name()
  bool (*runs_on)(const DeviceInfo& device);
  std::unique_ptr<MoeKernelPlan> (*build)(const MoeKernelContext& context);
};

// Every MoE kernel, in order of preference.
std::span<const MoeKernelEntry> moe_kernels();

// The first MoE kernel that runs on `device` (Error naming options.device when none does).
const MoeKernelEntry& select_moe_kernel(const DeviceInfo& device);

}  // namespace fp4gemm::detail
