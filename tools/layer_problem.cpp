#include "layer_problem.hpp"

#include <numeric>
#include <random>
#include <set>

#include "cli.hpp"
#include "data.hpp"
#include "fp4gemm/formats.hpp"

namespace fp4gemm::cli {

const std::vector<LayerModel>& layer_models() {
  static const std::vector<LayerModel> models = {
      {"deepseek-v3", 256, 7168, 2048, 8, false},
      {"qwen3-30b-a3b", 128, 2048, 768, 8, false},
      {"gpt-oss-120b", 128, 2880, 2880, 4, true},
      {"mixtral-8x7b", 8, 4096, 14336, 2, false},
  };
  return models;
}

void validate_layer_model(const LayerModel& m, const std::string& act) {
  if (act != "nvfp4" && act != "mxfp4" && act != "bf16")
    throw Error("--act", -1, "unknown activations '" + act + "' (expected nvfp4, mxfp4 or bf16)");
  if (m.experts < 1 || m.experts > 512) throw Error("--experts", -1, "must be in 1..512");
  if (m.topk < 1 || m.topk > m.experts) throw Error("--topk", -1, "must be in 1..--experts");
  if (m.hidden < 32 || m.hidden % 32) throw Error("--hidden", -1, "must be a positive multiple of 32");
  if (m.inter < 32 || m.inter % 32) throw Error("--inter", -1, "must be a positive multiple of 32");
}

LayerProblem::LayerProblem(const LayerModel& model, const std::string& act, int max_tokens, std::uint64_t seed,
                           cudaStream_t s, const LayerProblemOptions& options)
    : m_(model), w16_(act == "bf16"), max_tokens_(max_tokens) {
  validate_layer_model(model, act);
  if (max_tokens < 1) throw Error("--tokens", -1, "must be >= 1");
  const Format format = w16_ ? Format::mxfp4 : parse_format(act);
  const int E = m_.experts, H = m_.hidden, I = m_.inter, vec = scale_block_size(format);
  w13_bytes_ = std::size_t{1} * E * 2 * I * H / 2, w2_bytes_ = std::size_t{1} * E * H * I / 2;
  s13_bytes_ = E * formats::scale_bytes(options.scales, 2 * I, H / vec);
  s2_bytes_ = E * formats::scale_bytes(options.scales, H, I / vec);
  const std::size_t token_bytes = std::size_t{2} * max_tokens * H;
  require_free_memory(w13_bytes_ + w2_bytes_ + s13_bytes_ + s2_bytes_ + 2 * token_bytes, "the layer's weights");
  progress("[layer] " + m_.name + ": generating weights (" + std::to_string((w13_bytes_ + w2_bytes_) >> 20) +
           " MiB)...");
  w13_ = DeviceBuffer(w13_bytes_, "w13"), s13_ = DeviceBuffer(s13_bytes_, "w13 scales");
  w2_ = DeviceBuffer(w2_bytes_, "w2"), s2_ = DeviceBuffer(s2_bytes_, "w2 scales");
  fill_bytes_random(w13_.get(), w13_.padded_bytes(), seed, s);
  fill_bytes_random(w2_.get(), w2_.padded_bytes(), seed + 1, s);
  // GPU MODE's scales 1 and 2 keep the layer's values finite and the tensor-core power realistic;
  // checkpoint_scales draws MXFP4 codes from a trained checkpoint's range instead (see the header).
  if (options.checkpoint_scales && format == Format::mxfp4) {
    fill_scales_random(s13_.get(), s13_.padded_bytes(), format, seed + 2, s, kCheckpointMxScaleMax);
    fill_scales_random(s2_.get(), s2_.padded_bytes(), format, seed + 3, s, kCheckpointMxScaleMax);
  } else {
    fill_scales_gpu_mode(s13_.get(), s13_.padded_bytes(), format, seed + 2, s);
    fill_scales_gpu_mode(s2_.get(), s2_.padded_bytes(), format, seed + 3, s);
  }
  hidden_ = DeviceBuffer(token_bytes, "hidden"), out_ = DeviceBuffer(token_bytes, "out");
  const std::size_t slots = static_cast<std::size_t>(max_tokens) * m_.topk;
  ids_ = DeviceBuffer(4 * slots, "topk_ids"), weights_ = DeviceBuffer(4 * slots, "topk_weights");

  MoeLayerWeights lw;
  lw.experts = E, lw.hidden = H, lw.inter = I;
  lw.w13 = w13_.get(), lw.w13_scales = s13_.get(), lw.w2 = w2_.get(), lw.w2_scales = s2_.get();
  MoeLayerOptions lo;
  lo.format = format, lo.activations = w16_ ? MoeActivation::bf16 : MoeActivation::fp4;
  lo.activation = m_.swigluoai ? MoeEpilogue::swigluoai : MoeEpilogue::silu;
  lo.gate_up = m_.swigluoai ? GateUpLayout::interleaved : GateUpLayout::stacked;
  if (options.pieces) {  // the same bytes repacked (fp4gemm::pack_pieces), on `s` after the weights' writes
    const std::size_t b13 = static_cast<std::size_t>(pieces_bytes(2 * I, H)) * E;
    const std::size_t b2 = static_cast<std::size_t>(pieces_bytes(H, I)) * E;
    require_free_memory(b13 + b2, "the weights in pieces");
    p13_ = DeviceBuffer(b13, "w13 pieces"), p2_ = DeviceBuffer(b2, "w2 pieces");
    pack_pieces_gate_up(w13_.get(), p13_.get(), E, I, H, lo.gate_up, format, s);
    pack_pieces(w2_.get(), p2_.get(), E, H, I, format, s);
    lw.w13 = p13_.get(), lw.w2 = p2_.get();
    lo.weight_layout = WeightLayout::pieces;
  }
  lo.max_tokens = max_tokens, lo.topk = m_.topk;
  if (format == Format::nvfp4 && !w16_) lo.a1_scale = lo.a2_scale = 1.0f / 64;
  lo.scale_layout = options.scales;
  lo.fuse_quantize = options.fuse_quantise;
  lo.batch_invariant = options.batch_invariant;
  lo.decode_tokens = options.decode_tokens;
  // Built on `s`: its plan-time device work (scale scans and conversions) reads the weights and scales
  // just written on `s` (a non-blocking stream: the legacy default stream would not wait for them).
  layer_ = std::make_unique<MoeLayer>(lw, lo, s);
  args_.hidden = hidden_.get(), args_.topk_ids = ids_.get(), args_.topk_weights = weights_.get();
  args_.out = out_.get();
}

void LayerProblem::set_tokens(int tokens, std::uint64_t seed, cudaStream_t s) {
  if (tokens < 1 || tokens > max_tokens_)
    throw Error("--tokens", -1, "must be in 1.." + std::to_string(max_tokens_) + " (got " + std::to_string(tokens) + ")");
  const int E = m_.experts, k = m_.topk;
  fill_bf16_random(hidden_.get(), std::size_t{1} * tokens * m_.hidden, seed + 4, s);
  std::mt19937_64 rng(seed);
  std::vector<int> ids(static_cast<std::size_t>(tokens) * k), pool(E);
  std::vector<float> weights(ids.size());
  std::iota(pool.begin(), pool.end(), 0);
  std::set<int> active;
  std::uniform_real_distribution<float> wd(0.0f, 1.0f);
  for (int t = 0; t < tokens; ++t) {
    for (int j = 0; j < k; ++j) std::swap(pool[j], pool[j + rng() % (E - j)]);  // k distinct experts
    for (int j = 0; j < k; ++j) ids[t * k + j] = pool[j], weights[t * k + j] = wd(rng), active.insert(pool[j]);
  }
  CLI_CUDA_CHECK(cudaMemcpyAsync(ids_.get(), ids.data(), 4 * ids.size(), cudaMemcpyHostToDevice, s), "layer");
  CLI_CUDA_CHECK(cudaMemcpyAsync(weights_.get(), weights.data(), 4 * weights.size(), cudaMemcpyHostToDevice, s),
                 "layer");
  CLI_CUDA_CHECK(cudaStreamSynchronize(s), "layer");  // (the host vectors go out of scope)
  args_.tokens = tokens;
  active_ = static_cast<int>(active.size());
}

double LayerProblem::flops() const {
  return 2.0 * args_.tokens * m_.topk * (2.0 * m_.inter * m_.hidden + static_cast<double>(m_.hidden) * m_.inter);
}

double LayerProblem::bytes() const {
  const double weights = static_cast<double>(w13_bytes_ + w2_bytes_ + s13_bytes_ + s2_bytes_);
  return static_cast<double>(active_) / m_.experts * weights + 4.0 * args_.tokens * m_.hidden;
}

}  // namespace fp4gemm::cli
