// The Python-facing MoE grouped GEMM (fp4gemm.moe): MoeGemm bound once to its weights, the cached
// moe_grouped_gemm call, and the host (NumPy) path that runs reference::moe_gemm with the device
// path's validation.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "fp4gemm/moe.hpp"
#include "plan_cache.hpp"
#include "tensor_view.hpp"

namespace fp4gemm::python {

// The weights of a plan as read from (w, w_scales, alpha): the library's description (defaults
// resolved by detail::validate_moe) and what the binding needs beside it.
struct MoeWeightsRead {
  MoeWeights weights;
  TensorView w, scales, alpha;  // alpha: when given as an array
  bool alpha_array = false;
  // GLU (MoeOptions::epilogue): the separate up weights and scales, the up rows' alpha.
  TensorView w_up, scales_up, alpha_up;
  bool has_up = false, alpha_up_array = false;
  bool cuda = false;
  int device = -1;
  Framework framework = Framework::other;
  std::uint64_t scales_version = 0;  // torch's _version of w_scales (0 otherwise), see plan_key
};

// alpha (or alpha_up) as passed: absent, a number, or an array (checked against the weights later).
struct MoeAlphaArg {
  bool given = false, is_array = false;
  float scalar = 1.0f;
  TensorView view;
};

// The weights' checks on arrays already read (everything fp4gemm.moe checks of w, w_scales, alpha and,
// for GLU plans with gate_up='separate', the up arrays: null when not passed).
MoeWeightsRead moe_weights_from_views(const TensorView& w, const TensorView& w_scales, const MoeAlphaArg& alpha,
                                      const MoeOptions& o, const TensorView* w_up = nullptr,
                                      const TensorView* w_up_scales = nullptr, const MoeAlphaArg& alpha_up = {});

// One run's arrays as read (absent ones have ndim 0 and ptr 0).
struct MoeRunViews {
  TensorView a, a_scales, offsets, counts, gather, out;
  bool has_a_scales = false, has_offsets = false, has_counts = false, has_gather = false;
};

// One run, checked against its plan: the library's arguments and the rows of `a`.
struct MoeRun {
  MoeArgs args;
  int a_rows = 0;
};

// One moe_grouped_gemm call on arrays read elsewhere (torch.ops.fp4gemm.moe_grouped_gemm's native
// kernel, torch_native.cpp): CUDA weights, the activation from a's dtype; format "" follows it.
struct MoeViewsCall {
  MoeRunViews views;
  TensorView w, w_scales;
  MoeAlphaArg alpha;
  std::string_view format, scale_layout, out_dtype;
};

// fp4gemm._fp4gemm.MoeGemm: a plan bound to its weights (device arrays), or — for host (NumPy)
// weights — the same validation around the CPU reference. The weight arrays (and torch storages)
// are kept alive; run() refuses torch weights whose address, shape, strides or dtype changed.
class MoeGemmObject {
 public:
  MoeGemmObject(nb::handle w, nb::handle w_scales, nb::handle format, nb::handle scale_layout, nb::handle out_dtype,
                nb::handle activation, nb::handle layout, int capacity, nb::handle alpha,
                const std::string& epilogue = "none", const std::string& gate_up = "stacked",
                nb::handle w_up = nb::none(), nb::handle w_up_scales = nb::none(), nb::handle alpha_up = nb::none(),
                float swiglu_alpha = kSwigluAlpha, float swiglu_limit = kSwigluLimit, bool rescale_each_run = false);
  void run(nb::handle a, nb::handle a_scales, nb::handle expert_offsets, nb::handle expert_counts,
           nb::handle gather_index, nb::handle out, nb::handle stream, int threads);
  void check(nb::handle stream) const;
  // The plan's copy of the weight scales made again from the arrays, on `stream`
  // (fp4gemm::MoeGemm::reload_scales); the host path reads the arrays at every run.
  void reload_weights(nb::handle stream);
  std::string describe() const;
  std::string kernel_name() const { return plan_ ? plan_->kernel_name() : "cpu_reference"; }
  const MoeOptions& options() const { return options_; }
  const MoeWeights& weights() const { return weights_.weights; }
  int rows() const;
  bool on_host() const { return !weights_.cuda; }
  std::size_t device_bytes() const { return plan_ ? plan_->device_bytes() : 0; }

 private:
  MoeOptions options_;
  MoeWeightsRead weights_;  // views point into refs_ (kept alive)
  MoePlanPtr plan_;         // null on the host
  nb::list refs_, storages_;
  std::vector<std::pair<nb::handle, const char*>> watched_;  // torch weights, borrowed from refs_
  TorchStates states_;
  CopiedArrays copied_;  // torch scales the plan copies (linear or GLU, not rescale_each_run)
  void reload_if_changed(cudaStream_t stream);
};

// Holds the MoE plan cache of moe_grouped_gemm; guarded by its own mutex (see Binding).
class MoeBinding {
 public:
  static MoeBinding& get();

  // fp4gemm.moe.grouped_gemm minus output allocation: the contiguous layout, capacity = the rows of
  // `out` routed by this call (gather_index's length, else the rows of a).
  void grouped_gemm(nb::handle a, nb::handle a_scales, nb::handle w, nb::handle w_scales, nb::handle expert_offsets,
                    nb::handle gather_index, nb::handle out, nb::handle alpha, nb::handle format,
                    nb::handle scale_layout, nb::handle out_dtype, nb::handle activation, nb::handle stream,
                    int threads);
  // The same on arrays read elsewhere (MoeViewsCall), on `stream`; blocked or linear scales (the
  // caller handles what a plan keyed on linear torch scales needs: their _version). Remembers the
  // call for replay_views. Needs the GIL.
  void grouped_gemm_views(const MoeViewsCall& call, cudaStream_t stream);
  // Runs `call` from the memo of the last grouped_gemm_views call when every array (address,
  // shape, strides, dtype, device, storage bounds) and option is that call's: its checks and plan
  // lookup would give the same answer. False (nothing enqueued) otherwise. Needs no GIL.
  bool replay_views(const MoeViewsCall& call, cudaStream_t stream);
  // Checks every MoE plan held (cached or pinned) for bad routing data (synchronises `stream`).
  void check(nb::handle stream);

  CacheStats stats() const;
  void clear_cache(bool pinned);
  // The same bounds as the grouped GEMM's plan cache (set together by the module's setters).
  void set_capacity(std::size_t capacity);
  void set_max_bytes(std::size_t max_bytes);
  void pin(const MoePlanPtr& plan);

 private:
  MoeBinding();
  // Checks the run, finds or builds the plan, enqueues; returns the plan (and the run's arguments).
  // `keep`: what a plan built here must hold (the linear scales it copies: see grouped_gemm).
  MoePlanPtr run_on_device(const MoeRunViews& views, const MoeWeightsRead& wr, const MoeOptions& options, cudaStream_t s,
                           MoeArgs* args = nullptr, nb::handle keep = nb::handle());
  // Under mutex_, whenever a plan may leave the cache: empties the memo, its plan moved to
  // `release` (destroyed by the caller after the lock).
  void forget_memo(std::vector<MoePlanPtr>& release);
  mutable std::mutex mutex_;
  MoePlanCache plans_;
  std::uint64_t hits_ = 0, misses_ = 0, memo_hits_ = 0;  // memo_hits_: replay_views' (counted in hits_ too)
  // replay_views' memo (under mutex_): the last grouped_gemm_views call with its plan and run.
  struct ViewsMemo {
    MoeRunViews views;
    TensorView w, w_scales;
    MoeAlphaArg alpha;
    std::string format, scale_layout, out_dtype;
    MoePlanPtr plan;  // null: empty
    MoeArgs args;
  } memo_;
};

}  // namespace fp4gemm::python
