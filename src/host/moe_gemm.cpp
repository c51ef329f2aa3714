// fp4gemm::MoeGemm: the device-driven MoE grouped GEMM's public plan. It validates the weight set
// and every run's arguments, owns the device error word, serialises runs and replays them from
// cached CUDA graphs; the kernel behind it comes from the registry (host/kernel_registry.hpp,
// today sm90_fused_swapab_moe: host/plans/moe_plan.cpp).
#include <cuda_runtime_api.h>

#include <memory>
#include <sstream>
#include <string>

#include "device/moe_error.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "host/core/device_memory.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/moe_validate.hpp"
#include "host/core/validate.hpp"
#include "host/device_guard.hpp"
#include "host/graph_cache.hpp"
#include "host/kernel_registry.hpp"
#include "host/moe_gemm_owner.hpp"
#include "host/pimpl.hpp"
#include "host/run_serializer.hpp"

namespace fp4gemm {

const char* to_string(MoeActivation a) { return a == MoeActivation::fp4 ? "fp4" : "bf16"; }
const char* to_string(MoeLayout l) { return l == MoeLayout::contiguous ? "contiguous" : "masked"; }
const char* to_string(GateUpLayout g) {
  return g == GateUpLayout::stacked ? "stacked" : g == GateUpLayout::interleaved ? "interleaved" : "separate";
}

using detail::sm90::MoeErrorWord;

struct MoeGemm::Impl {
  MoeWeights weights;  // validated, linear scale strides resolved
  MoeOptions options;
  DeviceInfo device;
  int rows = 0;          // of A and C
  detail::DeviceAllocations memory;  // the error word
  int* error = nullptr;  // MoeErrorWord, in device memory
  const detail::MoeKernelEntry* entry = nullptr;
  std::unique_ptr<detail::MoeKernelPlan> kernel;
  detail::RunSerializer runs;  // runs share the kernel's workspace: never overlapping
  // Eager runs as graph replays (MoeOptions::graph_cache), guarded by `runs`' lock.
  struct RunKey {
    const void *a, *a_scales;
    const int *offsets, *counts, *gather;
    void *c, *c_scales;
    std::int64_t lda, ldc;
    int num_tokens;
    bool operator==(const RunKey&) const = default;
  };
  mutable detail::GraphCache<RunKey> graphs;

  ~Impl() {
    kernel.reset();
  }
};

MoeGemm::MoeGemm(const MoeWeights& weights, const MoeOptions& options, cudaStream_t stream)
    : impl_(std::make_unique<Impl>()) {
  Impl& p = *impl_;
  const MoeWeights resolved = detail::validate_moe(weights, options);
  if (device_count() == 0) throw Error("device", -1, "no CUDA device is available (no GPU or no driver)");
  p.device = device_info(options.device);
  p.entry = &detail::select_moe_kernel(p.device);
  detail::DeviceGuard guard(p.device.index);
  p.weights = resolved;
  p.options = options;
  p.options.device = p.device.index;
  const MoeWeights& w = p.weights;
  const MoeOptions& o = p.options;
  p.rows = static_cast<int>(detail::moe_rows(w.experts, o));

  // The weights and their scales must lie inside device allocations of this device.
  const int wrows = detail::moe_weight_rows(w, o);  // rows of W per expert (and of w_up)
  const int cols = w.k / scale_block_size(o.format);
  const std::int64_t dense_scales = static_cast<std::int64_t>(formats::scale_bytes(o.scale_layout, wrows, cols));
  const std::int64_t w_extent = o.weight_layout == WeightLayout::pieces  // (validated: contiguous pieces)
                                     ? w.experts * w.expert_stride
                                     : (w.experts - 1) * w.expert_stride + (wrows - 1) * w.ldw + w.k / 2;
  const std::int64_t s_extent = (w.experts - 1) * w.scale_expert_stride + dense_scales;
  const std::string s_what = std::string(to_string(o.scale_layout)) + " scales of every expert";
  detail::check_device_buffer("weights.w", -1, w.w, w_extent, p.device.index);
  detail::check_device_buffer("weights.scales", -1, w.scales, s_extent, p.device.index, s_what);
  if (o.epilogue != MoeEpilogue::none && o.gate_up == GateUpLayout::separate) {
    detail::check_device_buffer("weights.w_up", -1, w.w_up, w_extent, p.device.index);
    detail::check_device_buffer("weights.scales_up", -1, w.scales_up, s_extent, p.device.index, s_what);
  }
  if (w.alpha_device != nullptr)
    detail::check_device_buffer("weights.alpha_device", -1, w.alpha_device, 4 * std::int64_t{w.experts}, p.device.index);
  if (w.alpha_up_device != nullptr)
    detail::check_device_buffer("weights.alpha_up_device", -1, w.alpha_up_device, 4 * std::int64_t{w.experts},
                                p.device.index);

  p.error = p.memory.allocate<int>(sizeof(MoeErrorWord), "plan workspace");
  FP4GEMM_CUDA_CHECK(cudaMemset(p.error, 0, sizeof(MoeErrorWord)), "plan");
  p.kernel = p.entry->build(detail::MoeKernelContext{w, o, p.device, p.rows, p.error, stream});
  p.runs.create();
}

MoeGemm::~MoeGemm() = default;
MoeGemm::MoeGemm(MoeGemm&&) noexcept = default;
MoeGemm& MoeGemm::operator=(MoeGemm&&) noexcept = default;

namespace {

const MoeGemm::Impl& checked(const std::unique_ptr<MoeGemm::Impl>& impl) { return detail::checked_impl(impl, "MoeGemm"); }

}  // namespace

void MoeGemm::run(const MoeArgs& args, cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  detail::check_moe_args(p.weights, p.options, args);
  detail::DeviceGuard guard(p.device.index);
  p.runs.run(p.device.index, stream, [&](cudaStream_t s) {
    const MoeGemm::Impl::RunKey key{args.a, args.a_scales, args.expert_offsets, args.expert_counts, args.gather_index,
                                    args.c, args.c_scales, args.lda, args.ldc, args.num_tokens};
    p.graphs.run(key, p.options.graph_cache, s, [&](cudaStream_t q) { p.kernel->enqueue(args, q); });
  });
}

void MoeGemm::reload_scales(cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  detail::DeviceGuard guard(p.device.index);
  p.runs.reload(p.device.index, stream, [&](cudaStream_t s) { p.kernel->reload(s); });
}

std::size_t MoeGemm::graph_replays() const { return checked(impl_).graphs.replays(); }

void detail::MoeGemmOwner::enqueue(const MoeGemm& gemm, const MoeArgs& args, cudaStream_t stream) {
  const MoeGemm::Impl& p = checked(gemm.impl_);
  detail::check_moe_args(p.weights, p.options, args);
  p.kernel->enqueue(args, stream);
}

void detail::MoeGemmOwner::reload(const MoeGemm& gemm, cudaStream_t stream) { checked(gemm.impl_).kernel->reload(stream); }

bool detail::MoeGemmOwner::write_k_order_output(MoeGemm& gemm) { return checked(gemm.impl_).kernel->write_k_order_output(); }
void detail::MoeGemmOwner::let_dependents_start(MoeGemm& gemm) { checked(gemm.impl_).kernel->let_dependents_start(); }

detail::MoePreparedInput detail::MoeGemmOwner::prepared_input(const MoeGemm& gemm) {
  return checked(gemm.impl_).kernel->prepared_input();
}

void detail::MoeGemmOwner::enqueue_prepared(const MoeGemm& gemm, const MoeArgs& args, cudaStream_t stream) {
  const MoeGemm::Impl& p = checked(gemm.impl_);
  detail::check_moe_args(p.weights, p.options, args);
  p.kernel->enqueue_prepared(args, stream);
}

void MoeGemm::check(cudaStream_t stream) const {
  using namespace detail::sm90;
  const Impl& p = checked(impl_);
  detail::DeviceGuard guard(p.device.index);
  MoeErrorWord word{};
  // Read and clear in stream order, after every run enqueued before (on any stream).
  p.runs.after_runs(stream, [&](cudaStream_t s) {
    FP4GEMM_CUDA_CHECK(cudaMemcpyAsync(&word, p.error, sizeof word, cudaMemcpyDeviceToHost, s), "check");
    FP4GEMM_CUDA_CHECK(cudaMemsetAsync(p.error, 0, sizeof word, s), "check");
  });
  FP4GEMM_CUDA_CHECK(cudaStreamSynchronize(stream), "check");
  if (word.bits == 0) return;
  const int E = p.weights.experts;
  std::string also;
  for (int bit : {kMoeBadOffsets, kMoeOverCapacity, kMoeBadCount, kMoeBadGather, kMoeBadScaleCode})
    if ((word.bits & bit) && bit != word.kind)
      also += bit == kMoeBadGather      ? "; also a gather index out of range"
              : bit == kMoeBadCount     ? "; also a count out of range"
              : bit == kMoeBadScaleCode ? "; also an MXFP4 weight scale code > 128 (written after planning)"
                                        : "; also bad offsets";
  const std::string i = std::to_string(word.index), v = std::to_string(word.value);
  switch (word.kind) {
    case kMoeBadOffsets:
      throw Error("expert_offsets", word.index,
                  "a run saw expert_offsets[" + i + "] = " + v +
                      (word.index == 0 ? " < 0" : ", less than expert_offsets[" + std::to_string(word.index - 1) + "]") +
                      ": offsets must be non-decreasing from >= 0; that run computed nothing" + also);
    case kMoeOverCapacity:
      throw Error("expert_offsets", E,
                  "a run saw expert_offsets[" + std::to_string(E) + "] = " + v + ", more rows than the plan's capacity " +
                      std::to_string(p.options.capacity) + "; that run computed nothing" + also);
    case kMoeBadCount:
      throw Error("expert_counts", word.index,
                  "a run saw expert_counts[" + i + "] = " + v + ", outside [0, " + std::to_string(p.options.capacity) +
                      "]; that run computed nothing" + also);
    case kMoeBadScaleCode:
      throw Error("weights.scales", word.index,
                  "a run read an MXFP4 scale code > 128 in expert " + i +
                      "'s blocked scales, but every code was <= 128 when the plan was built, and the plan decodes "
                      "them with one multiply that holds only codes <= 128: that run's output is undefined. Build a "
                      "new plan after rewriting the scales, or set MoeOptions::rescale_each_run (any code, two "
                      "multiplies)" + also);
    default:
      throw Error("gather_index", -1,
                  "a run saw gather_index[" + i + "] = " + v +
                      ", outside [0, num_tokens); that row's output is undefined (nothing was read out of bounds)" + also);
  }
}

std::string MoeGemm::describe() const {
  const Impl& p = checked(impl_);
  std::ostringstream os;
  os << p.entry->name << " on " << p.device.name << ": " << p.weights.experts << " experts, N " << p.weights.n << ", K "
     << p.weights.k << ", " << to_string(p.options.format) << " weights x "
     << (p.options.activation == MoeActivation::fp4 ? to_string(p.options.format) : "bf16") << " activations -> "
     << to_string(p.options.out_type)
     << (p.options.epilogue != MoeEpilogue::none
             ? std::string(", ") + to_string(p.options.epilogue) + " GLU (" + to_string(p.options.gate_up) + " gate/up)"
             : std::string())
     << ", " << to_string(p.options.layout) << " rows " << p.rows;
  if (std::string k = p.kernel->describe(); !k.empty()) os << ", " << k;
  return os.str();
}

const char* MoeGemm::kernel_name() const { return checked(impl_).entry->name; }
const MoeOptions& MoeGemm::options() const { return checked(impl_).options; }
int MoeGemm::experts() const { return checked(impl_).weights.experts; }
int MoeGemm::n() const { return checked(impl_).weights.n; }
int MoeGemm::k() const { return checked(impl_).weights.k; }
int MoeGemm::rows() const { return checked(impl_).rows; }
std::size_t MoeGemm::device_bytes() const {
  const Impl& p = checked(impl_);
  return sizeof(MoeErrorWord) + p.kernel->device_bytes();
}

}  // namespace fp4gemm
