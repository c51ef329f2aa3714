// fp4gemm.moe.MoeLayer (the whole expert layer) for Python.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>
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
                 nb::handle w13_alpha_up, nb::handle w2_alpha, const MoeLayerOptions& options);
  // hidden bf16 [T, H]; topk_ids int32/int64 [T, topk]; topk_weights f32/bf16 [T, topk]; out bf16 [T, H].
  void run(nb::handle hidden, nb::handle topk_ids, nb::handle topk_weights, nb::handle out, nb::handle stream,
           int threads, nb::handle hidden_packed, nb::handle hidden_scales);
  void check(nb::handle stream) const;
  std::string describe() const;
  const MoeLayerOptions& options() const { return options_; }
  const MoeLayerWeights& weights() const { return weights_; }
  bool on_host() const { return !cuda_; }
  std::size_t device_bytes() const { return layer_ ? layer_->device_bytes() : 0; }

 private:
  void run_host(const MoeLayerArgs& a, const TensorView& ids, const TensorView& wt, const std::uint16_t* x,
                const std::uint8_t* x_packed, const std::uint8_t* x_scales, int threads);
  MoeLayerOptions options_;
  MoeLayerWeights weights_;
  bool cuda_ = false;
  int device_ = -1;
  Framework framework_ = Framework::other;
  std::shared_ptr<const MoeLayer> layer_;  // null on the host
  std::vector<std::uint8_t> host_w13_scales_, host_w2_scales_;  // host: linear copies
  nb::list refs_;  // the weight arrays, kept alive
};

// fp4gemm.quantize on CUDA arrays: fp4gemm::quantize_activations into caller-allocated outputs.
void quantize_on_device(nb::handle x, nb::handle packed, nb::handle scales, nb::handle format, nb::handle layout,
                        float global_scale, std::uintptr_t stream);

// The layer's combine on host arrays (reference::moe_combine): out[t] = sum_j w[t, j] * y[t * k + j]
// in FP32 fmas, j in order, ids outside [0, experts) skipped.
void combine_on_host(nb::handle y, nb::handle topk_weights, nb::handle topk_ids, int experts, nb::handle out);

}  // namespace fp4gemm::python
