// The MoE expert layer as the CLI times it (`fp4gemm layer`, `fp4gemm bench --suite layer`): one
// model's weights (random nibbles, scales in the normal range) and a fp4gemm::MoeLayer planned for
// up to `max_tokens` tokens, then any number of token counts, each with its own uniform top-k
// routing (distinct experts per token) and random bf16 tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda_util.hpp"
#include "fp4gemm/moe_layer.hpp"

namespace fp4gemm::cli {

struct LayerModel {
  std::string name;
  int experts = 0, hidden = 0, inter = 0, topk = 8;
  bool swigluoai = false;  // gpt-oss (interleaved gate / up); else silu with w13 stacked gate then up
};

// The layer suite's models (issue 21): DeepSeek-V3, Qwen3-30B-A3B, gpt-oss-120b, Mixtral-8x7B.
const std::vector<LayerModel>& layer_models();

// Checks the shape and the activation string (fp4gemm::Error naming --experts, --hidden, --inter,
// --topk or --act).
void validate_layer_model(const LayerModel& m, const std::string& act);

// The layer's settings beside its shape and activations.
struct LayerProblemOptions {
  bool fuse_quantise = false;    // MoeLayerOptions::fuse_quantize (W4A4)
  bool batch_invariant = false;  // MoeLayerOptions::batch_invariant
  int decode_tokens = -1;        // MoeLayerOptions::decode_tokens (-1: by the layer)
  bool pieces = false;           // MoeLayerOptions::weight_layout pieces: the weights packed on the GPU (pack_pieces)
  // MXFP4 weight scale codes 117..127 (2^-10..1, a trained checkpoint's range) instead of GPU
  // MODE's scales 1 and 2 (codes 127 / 128). NVFP4 weights keep GPU MODE's scales.
  bool checkpoint_scales = false;
  // The weight scales' layout: blocked (the library's own) or linear (row-major [N, K / vec] per
  // expert, as checkpoints store them and tk_layer.py passes them).
  ScaleLayout scales = ScaleLayout::blocked;
};

class LayerProblem {
 public:
  // act: nvfp4 / mxfp4 (W4A4) or bf16 (W4A16 on mxfp4 weights). Generates the weights on `stream`.
  LayerProblem(const LayerModel& model, const std::string& act, int max_tokens, std::uint64_t seed,
               cudaStream_t stream, const LayerProblemOptions& options = {});
  // New tokens and routing for `tokens` (1..max_tokens), uploaded on `stream` (synchronised).
  void set_tokens(int tokens, std::uint64_t seed, cudaStream_t stream);
  void run(cudaStream_t stream) const { layer_->run(args_, stream); }
  void check(cudaStream_t stream) const { layer_->check(stream); }

  int tokens() const { return args_.tokens; }
  int active_experts() const { return active_; }
  bool w4a16() const { return w16_; }
  // 2 T k (2 I H + H I)
  double flops() const;
  // The bytes at least moved: the active experts' weights and scales, the tokens in and out (bf16).
  double bytes() const;
  std::string describe() const { return layer_->describe(); }
  const void* output() const { return out_.get(); }  // bf16 [tokens, hidden] of the last run

 private:
  LayerModel m_;
  bool w16_ = false;
  int max_tokens_ = 0, active_ = 0;
  std::size_t w13_bytes_ = 0, w2_bytes_ = 0, s13_bytes_ = 0, s2_bytes_ = 0;
  DeviceBuffer w13_, s13_, w2_, s2_, hidden_, out_, ids_, weights_;
  DeviceBuffer p13_, p2_;  // LayerProblemOptions::pieces: what the layer reads
  std::unique_ptr<MoeLayer> layer_;
  MoeLayerArgs args_;
};

}  // namespace fp4gemm::cli
