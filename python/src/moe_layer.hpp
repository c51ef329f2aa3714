// fp4gemm.moe.MoeLayer (the whole expert layer) for Python.
#pragma once

#include <nanobind/nanobind.h>

#include <cuda_runtime_api.h>

#include <memory>
#include <string_view>
#include <string>
#include <unordered_map>
#include <vector>

#include "fp4gemm/moe_layer.hpp"
#include "tensor_view.hpp"

namespace fp4gemm::python {

namespace nb = nanobind;

// Reads and checks w13 [E, 2I, H/2], w2 [E, H, I/2], their scales and per-expert alphas (CUDA:
// plans an fp4gemm::MoeLayer on their device; host: keeps linear scale copies for the reference).
class MoeLayerObject {
 public:
  MoeLayerObject(nb::handle w13, nb::handle w13_scales, nb::handle w2, nb::handle w2_scales, nb::handle w13_alpha,
                 nb::handle w13_alpha_up, nb::handle w2_alpha, const MoeLayerOptions& options,
                 nb::handle w13_bias = nb::none(), nb::handle w2_bias = nb::none());
  // hidden bf16 [T, H]; topk_ids int32/int64 [T, topk]; topk_weights f32/bf16 [T, topk]; out bf16 [T, H].
  void run(nb::handle hidden, nb::handle topk_ids, nb::handle topk_weights, nb::handle out, nb::handle stream,
           int threads, nb::handle hidden_packed, nb::handle hidden_scales, nb::handle token_count,
           nb::handle expert_rows = nb::none(), nb::handle row_of = nb::none());
  // The CUDA run on arrays read elsewhere (the torch.ops kernel, torch_native.cpp): the same checks
  // as run(); hidden_states bf16 only.
  void run_on_stream(const TensorView& hidden, const TensorView& topk_ids, const TensorView& topk_weights,
                     const TensorView& out, cudaStream_t stream) const;
  void check(nb::handle stream) const;
  // The layer's copies of the weights' scales (and folded alphas) made again from the arrays, on
  // `stream` (fp4gemm::MoeLayer::reload_weights); the host path reads the arrays at every run.
  void reload_weights(nb::handle stream);
  std::string describe() const;
  int device() const { return device_; }
  const MoeLayerOptions& options() const { return options_; }
  const MoeLayerWeights& weights() const { return weights_; }
  bool on_host() const { return !cuda_; }
  std::size_t device_bytes() const { return layer_ ? layer_->device_bytes() : 0; }

 private:
  MoeLayerArgs checked_args(const TensorView& x, const TensorView* scales, const TensorView& ids,
                            const TensorView& wt, const TensorView* y) const;
  void run_host(const MoeLayerArgs& a, const TensorView& ids, const TensorView& wt, const std::uint16_t* x,
                const std::uint8_t* x_packed, const std::uint8_t* x_scales, int threads);
  // Before a run (needs the GIL): refuses torch weights whose data_ptr(), shape, strides or dtype
  // changed since the layer was built; reloads the layer's copies on `stream` when a torch
  // scale or alpha array was changed in place since they were made (its _version moved).
  void check_weights(cudaStream_t stream) const;
  void reload_on(cudaStream_t stream) const;
  MoeLayerOptions options_;
  MoeLayerWeights weights_;
  bool cuda_ = false;
  int device_ = -1;
  Framework framework_ = Framework::other;
  std::shared_ptr<const MoeLayer> layer_;  // null on the host
  std::vector<std::uint8_t> host_w13_scales_, host_w2_scales_;  // host: linear copies, made at every run
  nb::list refs_, storages_;  // the weight arrays and their torch storages, kept alive
  std::vector<std::pair<nb::handle, const char*>> watched_;  // torch weights (borrowed from refs_)
  TorchStates states_;
  // Per watched tensor, what a run compares first (two attribute reads instead of the state's
  // four): its _version (any in-place op, set_() and resize_() included) and data_ptr() (.data =).
  // When either moved, the whole state is checked and the copies remade as needed.
  struct Seen {
    std::uint64_t version;
    std::uintptr_t ptr;
  };
  mutable std::vector<Seen> seen_;
  mutable CopiedArrays copied_;  // torch scales and alphas the layer copies from (borrowed from refs_)
};

// fp4gemm.quantize on CUDA arrays: fp4gemm::quantize_activations into caller-allocated outputs.
// fp4gemm::pack_pieces / pack_pieces_gate_up (gate_up None: plain) of CUDA w [E, rows, k / 2] into out
// [E, rows / 16, ceil(k / 128), 1024] (use fp4gemm.pack_pieces).
void pack_pieces_on_device(nb::handle w, nb::handle out, nb::handle gate_up, const std::string& format,
                           std::uintptr_t stream);
void quantize_on_device(nb::handle x, nb::handle packed, nb::handle scales, nb::handle format, nb::handle layout,
                        float global_scale, std::uintptr_t stream);

// The layer's combine: out[t] = sum_j w[t, j] * y[t * k + j] in FP32 fmas, j in order, ids outside
// [0, experts) skipped, rounded once to bf16 -- on host arrays reference::moe_combine, on CUDA
// arrays fp4gemm::moe_combine (one kernel on `stream`, the same bits).
void combine(nb::handle y, nb::handle topk_weights, nb::handle topk_ids, int experts, nb::handle out, nb::handle stream);

}  // namespace fp4gemm::python

namespace fp4gemm::python {

// fp4gemm.moe.fused_experts' plan cache, in C++ so that a call with weights seen before costs one
// lookup (the Python key of 7 weights' addresses cost ~5 us of host time per call). An entry is
// keyed by the weight objects' identities and the options; it holds weak references to them (an id
// reused after a weight died misses) and their addresses (a tensor re-pointed with set_() misses).
// Misses, growth past the layer's max_tokens and non-torch arrays go to `plan` (Python: the plan
// keyed by addresses, fp4gemm.moe._plan_layer, looked up at each miss), which returns the
// fp4gemm.moe.MoeLayer to use. The cache holds nothing that leads back to the fp4gemm.moe module
// (only the layers' _fp4gemm.MoeLayer objects), so the module's teardown frees it.
class FusedExpertsCache {
 public:
  static constexpr int kWeights = 9;  // w13, w13_scale, w2, w2_scale, w13_alpha, w13_alpha_up, w2_alpha,
                                      // w13_bias, w2_bias (None allowed from index 4)
  // torch.ops.fp4gemm.fused_experts' swigluoai constants (its schema has none: call()'s defaults):
  // the library's, as the layer keeps them (float)
  static constexpr double kOpSwigluAlpha = fp4gemm::kSwigluAlpha, kOpSwigluLimit = fp4gemm::kSwigluLimit;
  FusedExpertsCache() = default;
  FusedExpertsCache(const FusedExpertsCache&) = delete;
  FusedExpertsCache& operator=(const FusedExpertsCache&) = delete;
  ~FusedExpertsCache();
  // fp4gemm.moe.fused_experts(...) -> out (allocated as torch.empty_like(hidden) when None).
  nb::object call(nb::handle hidden, nb::handle w13, nb::handle w13_scale, nb::handle w2, nb::handle w2_scale,
                  nb::handle topk_weights, nb::handle topk_ids, nb::handle w13_alpha, nb::handle w13_alpha_up,
                  nb::handle w2_alpha, nb::handle activation, nb::handle act_format, nb::handle gate_up,
                  nb::handle scale_layout, double a1_scale, double a2_scale,
                  double swiglu_alpha, double swiglu_limit, nb::handle out, nb::handle stream,
                  nb::handle w13_bias, nb::handle w2_bias, nb::handle weight_layout);
  // Every plan: the identity front, the address-keyed plans behind it, and the superseded plans
  // (kept alive: a CUDA graph may still replay them).
  void clear() {
    entries_.clear();
    plans_.clear();
    retired_.clear();
  }
  std::size_t size() const { return entries_.size(); }
  // (introspection for the tests) the address-keyed plans, and how many superseded ones are kept
  nb::list plans() const {
    nb::list l;
    for (const auto& [key, layer] : plans_) l.append(layer);
    return l;
  }
  std::size_t retired() const { return retired_.size(); }

  // What torch.ops.fp4gemm.fused_experts' native kernel (torch_native.cpp) read: the weights as
  // tensors (ndim 0 and address 0 for None), the options, T and top-k.
  struct NativeKey {
    const TensorView* weights = nullptr;  // [kWeights]
    const std::uintptr_t* impls = nullptr;  // [kWeights]: their TensorImpl addresses (0 for None)
    std::string_view activation, act_format, gate_up, scale_layout, weight_layout;
    double a1 = 1, a2 = 1;
    std::int64_t tokens = 0, topk = 0;
  };
  // The layer of the entry these arguments would hit in call() -- the same weight tensors (by
  // TensorImpl, as call() compares the Python objects: each torch tensor object owns one) with the
  // same address, shape, strides and dtype as when the entry was made -- if it covers key.tokens,
  // else null. `keep` holds the layer. Needs the GIL.
  const MoeLayerObject* find_native(const NativeKey& key, nb::object& keep) const;

 private:
  // The plan for these weights and options, keyed on the weights' addresses (not identities: new
  // views of the same memory share it); its workspace covers T (doubling when a call needs more).
  nb::object plan_layer(const nb::handle (&objs)[kWeights], nb::handle hidden, nb::handle topk_ids,
                        const std::string& activation, const std::string& act_format, const std::string& gate,
                        const std::string& scale_layout, double a1_scale, double a2_scale, double swiglu_alpha,
                        double swiglu_limit, const std::string& weight_layout);
  std::unordered_map<std::string, nb::object> plans_;
  std::vector<nb::object> retired_;
  static constexpr std::size_t kMaxEntries = 256;  // past this, the oldest entry goes
  struct Entry {
    PyObject* ids[kWeights] = {};
    nb::object refs[kWeights];
    TensorView views[kWeights];  // as read when the entry was made (None: ndim 0, ptr 0)
    std::uintptr_t impls[kWeights] = {};  // torch's TensorImpl of each (Tensor._cdata), for find_native
    std::string activation, act_format, gate_up, scale_layout, weight_layout;
    double a1 = 0, a2 = 0, alpha = 0, limit = 0;
    int topk = 0;
    nb::object layer;  // the fp4gemm.moe.MoeLayer's _fp4gemm.MoeLayer
    MoeLayerObject* raw = nullptr;
  };
  nb::object empty_like_, contiguous_;  // torch.empty_like, torch.contiguous_format
  std::vector<Entry> entries_;
};

}  // namespace fp4gemm::python
