// GPU tier: the whole expert layer (fp4gemm::MoeLayer) against a host composition of the same
// quantised steps.
//
// The reference follows the layer's steps on the host: the stable routing sort (as align_routing
// does it), the host quantiser (formats::quantize, which the GPU quantiser matches bit for bit),
// GEMM1 with its GLU epilogue (reference::moe_gemm with glu_fp32: the kernel's FP32 epilogue),
// the host quantiser again, GEMM2 in float64 and the combine in float64.
//  - Hidden states and w13 hold GPU MODE values (e2m1 {0, +-0.5, +-1, +-1.5}, scales {1, 2}) and
//    the global scales / alphas are powers of two, so GEMM1's FP32 sums are exact: the
//    intermediate is the reference's bit for bit, and so is its quantisation.
//  - GEMM2's FP32 sum is not exact (the intermediate's block scales are arbitrary), nor is the
//    combine's: each output element must lie within the FP32 bound (SPEC §3) of GEMM2's products,
//    carried through y's bf16 rounding and the combine's FP32 fmas, of the float64 value.
// The output lives in a guarded arena, poisoned with NaN: every token row written, the row
// padding and the guard bands untouched. Routings: random top-k, one hot expert (every token),
// few experts, ids outside [0, E) (an expert-parallel rank's view: they contribute nothing),
// repeated runs (bitwise equal), and a CUDA graph replayed with a new routing every time.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "fp4gemm/moe_layer.hpp"
#include "fp4gemm/reference.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

bool layer_available() { return device_count() > 0 && device_info().has_fast_kernel; }

enum class Route { random, one_hot, few, invalid_ids };
const char* to_string(Route r) {
  switch (r) {
    case Route::random: return "random";
    case Route::one_hot: return "one-hot";
    case Route::few: return "few-experts";
    default: return "invalid-ids";
  }
}

struct LayerCase {
  Format format = Format::nvfp4;
  MoeActivation act = MoeActivation::fp4;
  MoeEpilogue activation = MoeEpilogue::silu;
  GateUpLayout gate_up = GateUpLayout::stacked;
  ScaleLayout scale_layout = ScaleLayout::blocked;
  int experts = 8, hidden = 256, inter = 128, topk = 2, max_tokens = 64;
  bool ids_int64 = false, weights_bf16 = false, padded = false, alphas = true;
  Values w13_values = Values::gpumode;  // full: realistic w13 (GEMM1 then inexact)
  // MXFP4 w13 scale codes drawn from 127..w13_code_max instead (0: w13_values' own): codes past 128
  // send the decode path's chunks to its full-range decode, 127 / 128 stay on the one-multiply decode
  int w13_code_max = 0;
  // MXFP4 scale codes of both weights 127 / 128, each one 129 or 130 with probability 1 / rare_high_codes instead
  // (0: off): a lone code past 128 among one-multiply codes, so the decode path's per-chunk range check must see each
  // code of each lane (a 32-bit max of a lane's two code registers once hid a low code behind a larger high one)
  int rare_high_codes = 0;
  float a1 = 0, a2 = 0;                 // NVFP4 W4A4 global scales (0: powers of two chosen here)
  int graph_cache = 8;                  // MoeLayerOptions::graph_cache
  bool fuse_quantize = false;           // MoeLayerOptions::fuse_quantize
  int decode_tokens = 8;                // MoeLayerOptions::decode_tokens
  bool batch_invariant = false;         // MoeLayerOptions::batch_invariant
  bool biases = false, bias_f32 = false;  // MoeLayerWeights::w13_bias / w2_bias (random), bf16 or float
  bool pieces = false;                  // MoeLayerOptions::weight_layout pieces (packed from the rows on the device)
  std::uint64_t seed = 1;
  std::string describe() const {
    std::ostringstream os;
    os << to_string(format) << (act == MoeActivation::fp4 ? " W4A4 " : " W4A16 ") << to_string(activation) << " "
       << to_string(gate_up) << " " << to_string(scale_layout) << " E " << experts << " H " << hidden << " I " << inter
       << " top-" << topk << " max_tokens " << max_tokens << (ids_int64 ? " int64-ids" : "")
       << (weights_bf16 ? " bf16-weights" : "") << (padded ? " padded" : "") << (alphas ? " alphas" : "")
       << (biases ? (bias_f32 ? " f32-biases" : " bf16-biases") : "") << (pieces ? " pieces" : "") << " w13 "
       << to_string(w13_values) << (w13_code_max ? " codes 127.." + std::to_string(w13_code_max) : "") << " seed "
       << seed;
    return os.str();
  }
};

float bf16_value(std::uint16_t b) { return static_cast<float>(reference::bf16_bits_to_double(b)); }

// Expert weights [E, rows, k] (GPU MODE values for w13, realistic random ones for w2), scales in the
// case's layout (per expert), and what the reference reads.
struct ExpertTensor {
  int rows = 0, k = 0, cols = 0;
  std::vector<std::uint8_t> w, scales, scales_linear;
  std::int64_t scale_stride = 0;
};

ExpertTensor make_tensor(const LayerCase& c, std::mt19937_64& rng, int rows, int k, Values values, int code_max = 0,
                         int rare_high = 0) {
  ExpertTensor t;
  t.rows = rows, t.k = k, t.cols = k / scale_block_size(c.format);
  t.w = random_packed(rng, values, c.experts * rows, k, k / 2);
  t.scales_linear = random_scales(rng, c.format, Values::gpumode, c.experts * rows, t.cols);
  if (values == Values::full) {  // realistic: scales within a few binades of 1/8
    std::uniform_int_distribution<int> code(c.format == Format::nvfp4 ? 0x20 : 120, c.format == Format::nvfp4 ? 0x38 : 127);
    for (auto& s : t.scales_linear) s = static_cast<std::uint8_t>(code(rng));
  }
  if (code_max > 0 && c.format == Format::mxfp4) {
    std::uniform_int_distribution<int> code(127, code_max);
    for (auto& s : t.scales_linear) s = static_cast<std::uint8_t>(code(rng));
  }
  if (rare_high > 0 && c.format == Format::mxfp4) {
    std::uniform_int_distribution<int> low(127, 128), high(129, 130), pick(0, rare_high - 1);
    for (auto& s : t.scales_linear) s = static_cast<std::uint8_t>(pick(rng) == 0 ? high(rng) : low(rng));
  }
  t.scale_stride = static_cast<std::int64_t>(formats::scale_bytes(c.scale_layout, rows, t.cols));
  if (c.scale_layout == ScaleLayout::linear) {
    t.scales = t.scales_linear;
  } else {
    t.scales.assign(t.scale_stride * c.experts, 0);
    for (int e = 0; e < c.experts; ++e)
      formats::linear_to_blocked(t.scales_linear.data() + static_cast<std::size_t>(e) * rows * t.cols, rows, t.cols,
                                 t.scales.data() + e * t.scale_stride);
  }
  return t;
}

struct Layer {
  LayerCase c;
  ExpertTensor w13, w2;
  std::vector<float> a13, a13_up, a2;  // per-expert weight scales
  float a1 = 1, a2s = 1;               // global activation scales
  std::vector<float> b13, b2;          // biases (LayerCase::biases): [E, 2I] in w13's row order, [E, H]
  std::unique_ptr<DeviceBuffer> d_w13, d_s13, d_w2, d_s2, d_alpha, d_b13, d_b2;
  std::unique_ptr<DeviceBuffer> d_p13, d_p2;  // LayerCase::pieces: what the layer reads (pack())
  // (pieces) w13 / w2 repacked from d_w13 / d_w2 into d_p13 / d_p2 (after the rows are rewritten in place)
  void pack(cudaStream_t s = nullptr) const {
    pack_pieces_gate_up(d_w13->get(), d_p13->get(), c.experts, c.inter, c.hidden, c.gate_up, c.format, s);
    pack_pieces(d_w2->get(), d_p2->get(), c.experts, c.hidden, c.inter, c.format, s);
  }
  std::unique_ptr<MoeLayer> layer;
  MoeLayerWeights weights;  // what `layer` was built from
  MoeLayerOptions options;
};

std::unique_ptr<Layer> make_layer(const LayerCase& c) {
  auto L = std::make_unique<Layer>();
  L->c = c;
  std::mt19937_64 rng(c.seed);
  L->w13 = make_tensor(c, rng, 2 * c.inter, c.hidden, c.w13_values, c.w13_code_max, c.rare_high_codes);
  L->w2 = make_tensor(c, rng, c.hidden, c.inter, Values::full, 0, c.rare_high_codes);
  std::uniform_int_distribution<int> p2(-2, 2);
  for (int e = 0; e < c.experts; ++e) {
    L->a13.push_back(c.alphas ? std::ldexp(1.0f, p2(rng)) : 1.0f);
    L->a13_up.push_back(c.alphas ? std::ldexp(1.0f, p2(rng)) : 1.0f);
    L->a2.push_back(c.alphas ? std::uniform_real_distribution<float>(0.5f, 2.0f)(rng) : 1.0f);
  }
  const bool nv4 = c.format == Format::nvfp4 && c.act == MoeActivation::fp4;
  L->a1 = nv4 ? (c.a1 > 0 ? c.a1 : 0.5f) : 1.0f;     // a power of two: GEMM1 stays exact
  L->a2s = nv4 ? (c.a2 > 0 ? c.a2 : 0.125f) : 1.0f;  // any value would do
  auto upload = [](const void* src, std::size_t bytes) {
    auto d = std::make_unique<DeviceBuffer>(bytes + 16);
    FP4GEMM_TEST_CUDA(cudaMemcpy(d->get(), src, bytes, cudaMemcpyHostToDevice));
    return d;
  };
  L->d_w13 = upload(L->w13.w.data(), L->w13.w.size());
  L->d_s13 = upload(L->w13.scales.data(), L->w13.scales.size());
  L->d_w2 = upload(L->w2.w.data(), L->w2.w.size());
  L->d_s2 = upload(L->w2.scales.data(), L->w2.scales.size());
  std::vector<float> alphas = L->a13;
  alphas.insert(alphas.end(), L->a13_up.begin(), L->a13_up.end());
  alphas.insert(alphas.end(), L->a2.begin(), L->a2.end());
  L->d_alpha = upload(alphas.data(), 4 * alphas.size());
  MoeLayerWeights w;
  w.experts = c.experts, w.hidden = c.hidden, w.inter = c.inter;
  w.w13 = L->d_w13->get(), w.w13_scales = L->d_s13->get(), w.w2 = L->d_w2->get(), w.w2_scales = L->d_s2->get();
  if (c.pieces) {
    L->d_p13 = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(pieces_bytes(2 * c.inter, c.hidden) * c.experts));
    L->d_p2 = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(pieces_bytes(c.hidden, c.inter) * c.experts));
    L->pack();
    w.w13 = L->d_p13->get(), w.w2 = L->d_p2->get();
  }
  if (c.alphas) {
    const auto* a = reinterpret_cast<const float*>(L->d_alpha->get());
    w.w13_alpha = a, w.w13_alpha_up = a + c.experts, w.w2_alpha = a + 2 * c.experts;
  }
  if (c.biases) {  // values of the storage type (bf16: rounded), |b| <= 2
    std::uniform_real_distribution<float> bd(-2.0f, 2.0f);
    auto draw = [&](std::size_t n, std::vector<float>& v) {
      v.resize(n);
      for (float& b : v) b = c.bias_f32 ? bd(rng) : bf16_value(reference::float_to_bf16_bits(bd(rng)));
    };
    draw(std::size_t{1} * c.experts * 2 * c.inter, L->b13);
    draw(std::size_t{1} * c.experts * c.hidden, L->b2);
    auto put = [&](const std::vector<float>& v) {
      if (c.bias_f32) return upload(v.data(), 4 * v.size());
      std::vector<std::uint16_t> bits(v.size());
      for (std::size_t i = 0; i < v.size(); ++i) bits[i] = reference::float_to_bf16_bits(v[i]);
      return upload(bits.data(), 2 * bits.size());
    };
    L->d_b13 = put(L->b13), L->d_b2 = put(L->b2);
    w.w13_bias = L->d_b13->get(), w.w2_bias = L->d_b2->get(), w.bias_f32 = c.bias_f32;
  }
  MoeLayerOptions o;
  o.format = c.format, o.activations = c.act, o.scale_layout = c.scale_layout, o.activation = c.activation;
  o.gate_up = c.gate_up, o.a1_scale = L->a1, o.a2_scale = L->a2s, o.max_tokens = c.max_tokens, o.topk = c.topk;
  o.graph_cache = c.graph_cache, o.fuse_quantize = c.fuse_quantize, o.decode_tokens = c.decode_tokens;
  o.batch_invariant = c.batch_invariant;
  if (c.pieces) o.weight_layout = WeightLayout::pieces;
  L->layer = std::make_unique<MoeLayer>(w, o);
  L->weights = w, L->options = o;
  return L;
}

struct Inputs {
  int tokens = 0;
  std::int64_t ld_hidden = 0, ld_out = 0;
  std::vector<std::uint16_t> hidden;  // [T, ld_hidden] bf16 bits
  std::vector<long long> ids;         // [T, k]
  std::vector<float> weights;         // [T, k] (bf16-representable when weights_bf16)
};

Inputs make_inputs(const LayerCase& c, std::mt19937_64& rng, int tokens, Route route) {
  Inputs in;
  in.tokens = tokens;
  in.ld_hidden = c.hidden + (c.padded ? 24 : 0);
  in.ld_out = c.hidden + (c.padded ? 40 : 0);
  in.hidden.assign(static_cast<std::size_t>(tokens) * in.ld_hidden, 0x7FC0);  // padding: NaN
  static const float kGpuMode[7] = {0, 0.5f, -0.5f, 1, -1, 1.5f, -1.5f};
  std::uniform_int_distribution<int> pick(0, 6);
  std::uniform_int_distribution<int> binade(-1, 1);
  for (int t = 0; t < tokens; ++t) {
    const float row_scale = std::ldexp(1.0f, binade(rng));
    for (int h = 0; h < c.hidden; ++h)
      in.hidden[static_cast<std::size_t>(t) * in.ld_hidden + h] = reference::float_to_bf16_bits(kGpuMode[pick(rng)] * row_scale);
  }
  const int E = c.experts, k = c.topk;
  std::vector<int> pool(E);
  std::iota(pool.begin(), pool.end(), 0);
  const int hot = std::uniform_int_distribution<int>(0, E - 1)(rng);
  std::vector<int> few(pool);
  std::shuffle(few.begin(), few.end(), rng);
  few.resize(std::min(E, std::max(k, 3)));
  std::uniform_real_distribution<float> wd(0.05f, 1.0f);
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> from = route == Route::few ? few : pool;
    std::shuffle(from.begin(), from.end(), rng);
    if (route == Route::one_hot) {  // the hot expert first, then distinct others
      std::iter_swap(from.begin(), std::find(from.begin(), from.end(), hot));
      std::shuffle(from.begin() + 1, from.end(), rng);
      std::iter_swap(from.begin(), from.begin() + std::uniform_int_distribution<int>(0, k - 1)(rng));
    }
    for (int j = 0; j < k; ++j) {
      long long id = from[j % from.size()];
      if (route == Route::invalid_ids && std::uniform_int_distribution<int>(0, 2)(rng) == 0)
        id = std::uniform_int_distribution<int>(0, 1)(rng) ? -1 - static_cast<long long>(rng() % 3) : E + static_cast<long long>(rng() % 5);
      in.ids.push_back(id);
      float w = wd(rng);
      if (c.weights_bf16) w = bf16_value(reference::float_to_bf16_bits(w));
      in.weights.push_back(w);
    }
  }
  return in;
}

// The reference: per token row, the float64 value and its error bound.
struct Expected {
  std::vector<double> value, bound;  // [T, H]
};

Expected reference_layer(const Layer& L, const Inputs& in) {
  const LayerCase& c = L.c;
  const int E = c.experts, H = c.hidden, I = c.inter, T = in.tokens, k = c.topk, vec = scale_block_size(c.format);
  const std::int64_t n = std::int64_t{T} * k;
  // 1. The stable sort by expert (ids outside [0, E) own no row of any expert).
  std::vector<int> offsets(E + 1, 0), gather, row_of(n, -1);
  for (int e = 0; e < E; ++e) {
    offsets[e] = static_cast<int>(gather.size());
    for (std::int64_t i = 0; i < n; ++i)
      if (in.ids[i] == e) row_of[i] = static_cast<int>(gather.size()), gather.push_back(static_cast<int>(i / k));
  }
  offsets[E] = static_cast<int>(gather.size());
  const int rows = offsets[E];
  // 2. The tokens as GEMM1 reads them.
  reference::MoeHostProblem p1;
  std::vector<float> xf(static_cast<std::size_t>(T) * H);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) xf[static_cast<std::size_t>(t) * H + h] = bf16_value(in.hidden[t * in.ld_hidden + h]);
  std::vector<std::uint8_t> xp, xs;
  std::vector<std::uint16_t> xb(static_cast<std::size_t>(T) * H);
  if (c.act == MoeActivation::fp4) {
    xp.resize(static_cast<std::size_t>(T) * H / 2), xs.resize(static_cast<std::size_t>(T) * (H / vec));
    formats::quantize(c.format, xf.data(), T, H, H, xp.data(), xs.data(), L.a1);
    p1.a = xp.data(), p1.lda = H / 2, p1.a_scales = xs.data();
  } else {
    for (std::size_t i = 0; i < xb.size(); ++i) xb[i] = in.hidden[(i / H) * in.ld_hidden + i % H];
    p1.a = reinterpret_cast<const std::uint8_t*>(xb.data()), p1.lda = 2 * H, p1.bf16_activations = true;
  }
  std::vector<float> alpha1(E), alpha1_up(E), alpha2(E);
  for (int e = 0; e < E; ++e) {
    alpha1[e] = L.a13[e] * L.a1, alpha1_up[e] = L.a13_up[e] * L.a1, alpha2[e] = L.a2[e] * L.a2s;
  }
  const reference::DualActivation act{c.activation == MoeEpilogue::silu ? reference::Activation::silu
                                                                       : reference::Activation::swigluoai};
  std::vector<std::uint16_t> inter(static_cast<std::size_t>(std::max(rows, 1)) * I, 0);
  p1.experts = E, p1.n = I, p1.k = H, p1.format = c.format, p1.a_rows = T;
  p1.w = L.w13.w.data(), p1.ldw = H / 2, p1.w_expert_stride = std::int64_t{2} * I * (H / 2);
  p1.w_scales = L.w13.scales_linear.data(), p1.w_layout = ScaleLayout::linear;
  p1.w_scale_expert_stride = std::int64_t{2} * I * (H / vec);
  p1.alpha = alpha1.data(), p1.alpha_up = alpha1_up.data();
  p1.offsets = offsets.data(), p1.gather = gather.data(), p1.c = inter.data(), p1.ldc = I, p1.out_type = OutType::bf16;
  p1.glu = &act, p1.gate_up = c.gate_up == GateUpLayout::stacked ? 0 : 1, p1.glu_fp32 = true;
  p1.bias = c.biases ? L.b13.data() : nullptr;
  if (rows > 0) reference::moe_gemm(p1);
  // 3. The intermediate as GEMM2 reads it (dequantised), then GEMM2 and the combine in float64.
  std::vector<double> idq(static_cast<std::size_t>(rows) * I);
  {
    std::vector<float> f(static_cast<std::size_t>(rows) * I);
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = bf16_value(inter[i]);
    if (c.act == MoeActivation::fp4 && rows > 0) {
      std::vector<std::uint8_t> ip(f.size() / 2), is(f.size() / vec);
      formats::quantize(c.format, f.data(), rows, I, I, ip.data(), is.data(), L.a2s);
      std::vector<float> dq(f.size());
      formats::dequantize(c.format, ScaleLayout::linear, ip.data(), rows, I, I / 2, is.data(), dq.data());
      for (std::size_t i = 0; i < f.size(); ++i) idq[i] = dq[i];  // without the global scale (in alpha2)
    } else {
      for (std::size_t i = 0; i < f.size(); ++i) idq[i] = f[i];
    }
  }
  std::vector<std::vector<double>> w2dq(E);
  for (int e = 0; e < E; ++e) {
    std::vector<float> dq(static_cast<std::size_t>(H) * I);
    formats::dequantize(c.format, ScaleLayout::linear, L.w2.w.data() + static_cast<std::size_t>(e) * H * (I / 2), H, I,
                        I / 2, L.w2.scales_linear.data() + static_cast<std::size_t>(e) * H * (I / vec), dq.data());
    w2dq[e].assign(dq.begin(), dq.end());
  }
  Expected x;
  x.value.assign(static_cast<std::size_t>(T) * H, 0.0);
  x.bound.assign(static_cast<std::size_t>(T) * H, 0.0);
  const double u = std::ldexp(1.0, -24), bf_rel = std::ldexp(1.0, -8);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const std::int64_t i = std::int64_t{t} * k + j;
      const long long e = in.ids[i];
      if (e < 0 || e >= E) continue;
      const double w = in.weights[i];
      const double* a = idq.data() + static_cast<std::size_t>(row_of[i]) * I;
      for (int h = 0; h < H; ++h) {
        const double* b = w2dq[e].data() + static_cast<std::size_t>(h) * I;
        double s = 0, mag = 0;
        for (int q = 0; q < I; ++q) s += a[q] * b[q], mag += std::fabs(a[q] * b[q]);
        const double y = alpha2[e] * s;
        // y: FP32 sum (any order) times alpha, rounded to FP32, then to bf16.
        const double y_bound = alpha2[e] * I * u * mag * 1.01 + std::fabs(y) * 2 * u;
        double y_err = y_bound + (std::fabs(y) + y_bound) * bf_rel;
        // the down bias, added to the bf16 y in FP32 (one more rounding)
        const double yb = c.biases ? y + L.b2[static_cast<std::size_t>(e) * H + h] : y;
        if (c.biases) y_err += (std::fabs(yb) + y_err) * u;
        x.value[static_cast<std::size_t>(t) * H + h] += w * yb;
        // The combine's fma: each step's rounding <= u |partial sum| <= u sum |w y|.
        x.bound[static_cast<std::size_t>(t) * H + h] += std::fabs(w) * (y_err + k * u * 1.01 * (std::fabs(yb) + y_err));
      }
    }
  for (std::size_t i = 0; i < x.value.size(); ++i)  // the final bf16 rounding
    x.bound[i] += (std::fabs(x.value[i]) + x.bound[i]) * bf_rel + 1e-30;
  return x;
}

// Device buffers of one run: hidden, ids, weights and the guarded output arena.
struct RunBuffers {
  static constexpr std::size_t kGuard = 4096;
  std::unique_ptr<DeviceBuffer> hidden, ids, weights, arena;
  std::size_t out_bytes = 0;
  std::vector<std::uint8_t> image;  // the arena before the run (output cells NaN)

  RunBuffers(const LayerCase& c, int max_tokens, std::int64_t ld_hidden, std::int64_t ld_out, std::mt19937_64& rng) {
    hidden = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(max_tokens) * ld_hidden * 2 + 16);
    ids = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(max_tokens) * c.topk * 8 + 16);
    weights = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(max_tokens) * c.topk * 4 + 16);
    out_bytes = static_cast<std::size_t>(max_tokens) * ld_out * 2;
    arena = std::make_unique<DeviceBuffer>(out_bytes + 2 * kGuard);
    image.resize(out_bytes + 2 * kGuard);
    fill_random(rng, image.data(), image.size());
  }
  void upload(const LayerCase& c, const Inputs& in, cudaStream_t s) {
    std::vector<std::uint8_t> img = image;
    for (int t = 0; t < in.tokens; ++t)
      for (int h = 0; h < c.hidden; ++h) std::memset(img.data() + kGuard + (t * in.ld_out + h) * 2, 0xFF, 2);
    FP4GEMM_TEST_CUDA(cudaMemcpyAsync(arena->get(), img.data(), img.size(), cudaMemcpyHostToDevice, s));
    FP4GEMM_TEST_CUDA(cudaMemcpyAsync(hidden->get(), in.hidden.data(), in.hidden.size() * 2, cudaMemcpyHostToDevice, s));
    staged_ids.clear(), staged_w.clear();
    if (c.ids_int64) {
      staged_ids.resize(in.ids.size() * 8);
      std::memcpy(staged_ids.data(), in.ids.data(), staged_ids.size());
    } else {
      staged_ids.resize(in.ids.size() * 4);
      for (std::size_t i = 0; i < in.ids.size(); ++i) {
        const int v = static_cast<int>(in.ids[i]);
        std::memcpy(staged_ids.data() + 4 * i, &v, 4);
      }
    }
    if (c.weights_bf16) {
      staged_w.resize(in.weights.size() * 2);
      for (std::size_t i = 0; i < in.weights.size(); ++i) {
        const std::uint16_t b = reference::float_to_bf16_bits(in.weights[i]);
        std::memcpy(staged_w.data() + 2 * i, &b, 2);
      }
    } else {
      staged_w.resize(in.weights.size() * 4);
      std::memcpy(staged_w.data(), in.weights.data(), staged_w.size());
    }
    FP4GEMM_TEST_CUDA(cudaMemcpyAsync(ids->get(), staged_ids.data(), staged_ids.size(), cudaMemcpyHostToDevice, s));
    FP4GEMM_TEST_CUDA(cudaMemcpyAsync(weights->get(), staged_w.data(), staged_w.size(), cudaMemcpyHostToDevice, s));
  }
  MoeLayerArgs args(const LayerCase& c, const Inputs& in) const {
    MoeLayerArgs a;
    a.hidden = hidden->get(), a.ld_hidden = in.ld_hidden;
    a.topk_ids = ids->get(), a.ids_int64 = c.ids_int64;
    a.topk_weights = weights->get(), a.weights_bf16 = c.weights_bf16;
    a.tokens = in.tokens, a.out = arena->get() + kGuard, a.ld_out = in.ld_out;
    return a;
  }
  std::vector<std::uint8_t> download(cudaStream_t s) const {
    std::vector<std::uint8_t> got(image.size());
    FP4GEMM_TEST_CUDA(cudaStreamSynchronize(s));
    FP4GEMM_TEST_CUDA(cudaMemcpy(got.data(), arena->get(), got.size(), cudaMemcpyDeviceToHost));
    return got;
  }
  std::vector<std::uint8_t> staged_ids, staged_w;
};

// Every output cell within its bound, every other byte of the arena unchanged.
::testing::AssertionResult check_output(const LayerCase& c, const Inputs& in, const RunBuffers& b,
                                        const std::vector<std::uint8_t>& got, const Expected& x) {
  int bad = 0;
  std::ostringstream os;
  std::vector<char> cell(got.size(), 0);
  for (int t = 0; t < in.tokens; ++t)
    for (int h = 0; h < c.hidden; ++h) {
      const std::size_t at = RunBuffers::kGuard + (static_cast<std::size_t>(t) * in.ld_out + h) * 2;
      cell[at] = cell[at + 1] = 1;
      std::uint16_t bits;
      std::memcpy(&bits, got.data() + at, 2);
      const double v = reference::bf16_bits_to_double(bits);
      const std::size_t i = static_cast<std::size_t>(t) * c.hidden + h;
      if (!(std::fabs(v - x.value[i]) <= x.bound[i]) && bad++ < 5)
        os << "\n  out[" << t << ", " << h << "] = " << v << ", expected " << x.value[i] << " +- " << x.bound[i];
    }
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!cell[i] && got[i] != b.image[i] && bad++ < 5) os << "\n  byte " << i << " outside the output cells changed";
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " bad bytes / elements (" << c.describe() << ", T " << in.tokens << ")"
                                       << os.str();
}

std::vector<LayerCase> layer_cases() {
  std::vector<LayerCase> cases;
  std::uint64_t seed = 9100;
  for (auto [f, a] : {std::pair{Format::nvfp4, MoeActivation::fp4}, std::pair{Format::mxfp4, MoeActivation::fp4},
                      std::pair{Format::mxfp4, MoeActivation::bf16}})
    for (int v = 0; v < 4; ++v) {
      LayerCase c;
      c.format = f, c.act = a, c.seed = seed++;
      c.activation = v % 2 ? MoeEpilogue::swigluoai : MoeEpilogue::silu;
      c.gate_up = v % 2 ? GateUpLayout::interleaved : GateUpLayout::stacked;
      c.scale_layout = v == 2 ? ScaleLayout::linear : ScaleLayout::blocked;
      c.experts = v == 0 ? 1 : v == 1 ? 8 : v == 2 ? 64 : 16;
      c.topk = v == 0 ? 1 : v == 1 ? 2 : v == 2 ? 8 : 4;
      c.hidden = v == 3 ? 512 : 256, c.inter = v == 2 ? 96 : 128;
      c.max_tokens = v == 2 ? 160 : 48;
      c.ids_int64 = v == 1, c.weights_bf16 = v == 3, c.padded = v >= 2, c.alphas = v != 1;
      cases.push_back(c);
    }
  // top-k 3, 5, 6 and 7 (the cases above have 1, 2, 4 and 8: every k of 1..8), W4A4 of both formats.
  for (const int k : {3, 5, 6, 7}) {
    LayerCase c;
    c.format = k % 2 ? Format::nvfp4 : Format::mxfp4, c.act = MoeActivation::fp4, c.seed = seed++;
    c.activation = k == 5 ? MoeEpilogue::swigluoai : MoeEpilogue::silu;
    c.gate_up = k == 5 ? GateUpLayout::interleaved : GateUpLayout::stacked;
    c.experts = 4 * k, c.topk = k, c.hidden = 256, c.inter = 64 * (k % 3 + 1), c.max_tokens = 40;
    c.padded = k == 6;
    cases.push_back(c);
  }
  // T up to 16384 (the plans and workspace sized for 16384 x top-2 rows; the sizes run are 1, 3,
  // 16384, 8193 and 17), W4A16 so that the W4A4-only tests below need not run it.
  LayerCase big;
  big.format = Format::mxfp4, big.act = MoeActivation::bf16, big.seed = seed++;
  big.experts = 32, big.topk = 2, big.hidden = 128, big.inter = 64, big.max_tokens = 16384;
  cases.push_back(big);
  return cases;
}

// Expert biases (gpt-oss's gate_up_proj_bias and down_proj_bias): W4A16 MXFP4 swigluoai interleaved
// with bf16 biases, W4A4 NVFP4 silu stacked with float ones, each on the decode path (T 1, 3) and the
// general path (T 17, max), against the reference with the same biases; then the biases updated in
// place (both arrays rewritten) and the next run checked against the new values.
TEST(MoeLayerBiases, BothPathsMatchTheReferenceAndSeeInPlaceUpdates) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  for (int v = 0; v < 2; ++v) {
    LayerCase c;
    c.biases = true, c.bias_f32 = v == 1, c.seed = 9700 + v;
    c.format = v == 0 ? Format::mxfp4 : Format::nvfp4, c.act = v == 0 ? MoeActivation::bf16 : MoeActivation::fp4;
    c.activation = v == 0 ? MoeEpilogue::swigluoai : MoeEpilogue::silu;
    c.gate_up = v == 0 ? GateUpLayout::interleaved : GateUpLayout::stacked;
    c.experts = 8, c.hidden = 256, c.inter = 128, c.topk = 4, c.max_tokens = 40, c.decode_tokens = 8;
    c.scale_layout = v == 0 ? ScaleLayout::linear : ScaleLayout::blocked;
    auto L = make_layer(c);
    EXPECT_NE(L->layer->describe().find("decode path for T <= 8"), std::string::npos);
    std::mt19937_64 rng(c.seed * 3 + 1);
    RunBuffers b(c, c.max_tokens, c.hidden, c.hidden, rng);
    cudaStream_t s = nullptr;
    FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
    for (int round = 0; round < 2; ++round) {
      if (round == 1) {  // new bias values in the same device arrays
        std::uniform_real_distribution<float> bd(-3.0f, 3.0f);
        for (std::vector<float>* vec : {&L->b13, &L->b2}) {
          for (float& x : *vec) x = c.bias_f32 ? bd(rng) : bf16_value(reference::float_to_bf16_bits(bd(rng)));
        }
        for (auto [vec, buf] : {std::pair{&L->b13, L->d_b13.get()}, std::pair{&L->b2, L->d_b2.get()}}) {
          if (c.bias_f32) {
            FP4GEMM_TEST_CUDA(cudaMemcpy(buf->get(), vec->data(), 4 * vec->size(), cudaMemcpyHostToDevice));
          } else {
            std::vector<std::uint16_t> bits(vec->size());
            for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = reference::float_to_bf16_bits((*vec)[i]);
            FP4GEMM_TEST_CUDA(cudaMemcpy(buf->get(), bits.data(), 2 * bits.size(), cudaMemcpyHostToDevice));
          }
        }
      }
      for (const int T : {1, 3, 17, c.max_tokens}) {
        const Inputs in = make_inputs(c, rng, T, T == 17 ? Route::invalid_ids : Route::random);
        const Expected x = reference_layer(*L, in);
        b.upload(c, in, s);
        L->layer->run(b.args(c, in), s);
        EXPECT_TRUE(check_output(c, in, b, b.download(s), x)) << c.describe() << ", T " << T << ", round " << round;
      }
    }
    EXPECT_NO_THROW(L->layer->check(s));
    FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
  }
}

class MoeLayerCases : public ::testing::TestWithParam<LayerCase> {};

TEST_P(MoeLayerCases, MatchesTheQuantisedComposition) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  const LayerCase& c = GetParam();
  const auto L = make_layer(c);
  std::mt19937_64 rng(c.seed * 7 + 1);
  RunBuffers b(c, c.max_tokens, c.hidden + (c.padded ? 24 : 0), c.hidden + (c.padded ? 40 : 0), rng);
  cudaStream_t s = nullptr;
  FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
  const int sizes[] = {1, 3, c.max_tokens, c.max_tokens / 2 + 1, 17};
  const Route routes[] = {Route::random, Route::one_hot, Route::few, Route::invalid_ids, Route::random};
  for (int r = 0; r < 5; ++r) {
    const Inputs in = make_inputs(c, rng, std::min(sizes[r], c.max_tokens), routes[r]);
    const Expected x = reference_layer(*L, in);
    b.upload(c, in, s);
    L->layer->run(b.args(c, in), s);
    const std::vector<std::uint8_t> first = b.download(s);
    EXPECT_TRUE(check_output(c, in, b, first, x)) << "routing " << to_string(routes[r]);
    // Deterministic: a second run over a re-poisoned arena gives the same bytes.
    b.upload(c, in, s);
    L->layer->run(b.args(c, in), s);
    EXPECT_TRUE(b.download(s) == first) << "two runs differ (" << c.describe() << ", routing " << to_string(routes[r]) << ")";
  }
  EXPECT_NO_THROW(L->layer->check(s));
  FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
}

INSTANTIATE_TEST_SUITE_P(All, MoeLayerCases, ::testing::ValuesIn(layer_cases()),
                         [](const ::testing::TestParamInfo<LayerCase>& i) { return "case" + std::to_string(i.index); });

// The decode tests' runs of T tokens in three routings, each against the reference composition and run twice for the
// same bytes: mode 0 random (every pair on expert `one_expert` where >= 0); mode 1 ids outside [0, E) mixed in, and a
// device token count `fewer` below T (where T > fewer; the ids and hidden rows past it not uploaded: not read, their out
// rows not written); mode 2 repeats (token t lists its first expert again at j = 1, and 2).
void run_routing_modes(const Layer& L, const LayerCase& c, RunBuffers& b, DeviceBuffer& count, cudaStream_t s,
                       std::mt19937_64& rng, int T, int one_expert, int fewer, const std::string& what) {
  for (int mode = 0; mode < 3; ++mode) {
    Inputs in = make_inputs(c, rng, T, mode == 1 ? Route::invalid_ids : Route::random);
    if (mode == 2) {
      for (int t = 0; t < T; ++t)
        for (int j = 1; j <= std::min(c.topk - 1, 1 + t % 2); ++j) in.ids[t * c.topk + j] = in.ids[t * c.topk];
    }
    if (one_expert >= 0 && mode == 0)
      for (auto& id : in.ids) id = one_expert;
    const int present = mode == 1 && T > fewer ? T - fewer : T;
    Inputs used = in;
    used.tokens = present;
    used.hidden.resize(static_cast<std::size_t>(present) * in.ld_hidden);
    used.ids.resize(static_cast<std::size_t>(present) * c.topk), used.weights.resize(used.ids.size());
    const Expected x = reference_layer(L, used);
    b.upload(c, used, s);
    MoeLayerArgs a = b.args(c, used);
    a.tokens = T;
    if (present < T) {
      FP4GEMM_TEST_CUDA(cudaMemcpyAsync(count.get(), &present, 4, cudaMemcpyHostToDevice, s));
      a.token_count = reinterpret_cast<const int*>(count.get());
    }
    L.layer->run(a, s);
    const std::vector<std::uint8_t> first = b.download(s);
    EXPECT_TRUE(check_output(c, used, b, first, x)) << what << ", T " << T << ", mode " << mode;
    b.upload(c, used, s);
    L.layer->run(a, s);
    EXPECT_TRUE(b.download(s) == first) << "two runs differ: " << what << ", T " << T << ", mode " << mode;
  }
}

// The decode path (T <= MoeLayerOptions::decode_tokens; W4A16, and W4A4 NVFP4 / MXFP4 whose tokens
// and intermediate are quantised and dequantised by the layer's rule first): every T of 1..8 against the
// reference composition, with routings the general tests do not draw -- a token listing the same
// expert twice or three times (two or three slots of that expert), ids outside [0, E), all tokens
// on one expert -- a run whose device token count is below T (the ids and hidden rows past it
// left as garbage: not read; their out rows not written), K not a multiple of the 64-wide chunk
// (H = 288 / 352, I = 160 / 96) and K split into parts; then the same runs on the general path
// (decode_tokens = 0), checked the same way. Deterministic across repeated runs. Between them the
// two layers take both scale layouts with and without a K tail in each kernel.
TEST(MoeLayerDecode, EveryTokenCountAndRoutingMatchesTheComposition) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  for (const int decode : {8, 0})
    for (int v = 0; v < 8; ++v) {  // v % 2: the two shapes below; v / 2: W4A16, W4A4 NVFP4, W4A4 MXFP4;
      // v 6, 7: top-8 over 12 experts (up to 64 pairs: the routing's second 32 pairs), W4A16 and W4A4 NVFP4
      LayerCase c;
      c.format = v / 2 == 1 || v == 7 ? Format::nvfp4 : Format::mxfp4;
      c.act = v / 2 == 0 || v == 6 ? MoeActivation::bf16 : MoeActivation::fp4;
      c.seed = 9300 + v;
      const bool second = v % 2 == 1;
      c.activation = second ? MoeEpilogue::swigluoai : MoeEpilogue::silu;
      c.gate_up = second ? GateUpLayout::interleaved : GateUpLayout::stacked;
      c.scale_layout = second ? ScaleLayout::linear : ScaleLayout::blocked;
      c.experts = second ? 16 : 6, c.topk = second ? 4 : 3, c.hidden = second ? 352 : 288, c.inter = second ? 96 : 160;
      if (v >= 6) c.experts = 12, c.topk = 8;
      // MXFP4 gate/up scales: codes 127..130 in the first shape (both of the decode's MXFP4 paths in
      // kernel 1), GPU MODE's 127 / 128 in the second (the one-multiply path, 2^127 included)
      if (c.format == Format::mxfp4 && !second) c.w13_code_max = 130;
      c.max_tokens = 12, c.ids_int64 = second, c.weights_bf16 = !second, c.padded = second, c.alphas = !second;
      c.decode_tokens = decode, c.graph_cache = 0;
      const auto L = make_layer(c);
      const std::string d = L->layer->describe();
      EXPECT_EQ(d.find("decode path for T <= 8") != std::string::npos, decode == 8) << d;
      std::mt19937_64 rng(c.seed * 5 + 3);
      RunBuffers b(c, c.max_tokens, c.hidden + (c.padded ? 24 : 0), c.hidden + (c.padded ? 40 : 0), rng);
      DeviceBuffer count(4);
      cudaStream_t s = nullptr;
      FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
      for (int T = 1; T <= 8; ++T)
        run_routing_modes(*L, c, b, count, s, rng, T, T == 8 ? 0 : -1, 2, "decode_tokens " + std::to_string(decode));
      EXPECT_NO_THROW(L->layer->check(s));
      FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
    }
}

// The wide decode path (decode_tokens = 64 at top-8, 128 at top-4: runs of 9..64 / 128 tokens -- up to the kernels' 512
// pairs -- through a routing pre-pass and the decode kernels with slots of up to 8 pairs of one expert; W4A16 MXFP4, and
// W4A4 NVFP4 / MXFP4 after the layer's quantisers): T from 9 to 64 / 128 against the reference composition, in
// rows and pieces, both scale layouts, both gate / up layouts, K tails, MXFP4 codes past 128; routings with repeats
// (a token listing an expert twice), ids outside [0, E), every token on one expert (8 slots of one expert at T 64,
// top-1), a device token count below T; two runs the same bytes; and the plan says it has the path.
TEST(MoeLayerDecode, WidePathMatchesTheComposition) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  for (int v = 0; v < 7; ++v) {  // v 0-3: W4A16 (rows, pieces); v 4, 5: W4A4 NVFP4 (rows, pieces); v 6: W4A4 MXFP4 pieces
    LayerCase c;
    c.format = v == 4 || v == 5 ? Format::nvfp4 : Format::mxfp4;
    c.act = v >= 4 ? MoeActivation::fp4 : MoeActivation::bf16;
    c.seed = 9900 + v;
    const bool second = v % 2 == 1;
    c.pieces = v == 2 || v == 3 || v == 5 || v == 6;
    c.activation = second ? MoeEpilogue::swigluoai : MoeEpilogue::silu;
    c.gate_up = second ? GateUpLayout::interleaved : GateUpLayout::stacked;
    c.scale_layout = second ? ScaleLayout::linear : ScaleLayout::blocked;
    c.experts = second ? 40 : 12, c.topk = second ? 8 : 4, c.hidden = second ? 352 : 288, c.inter = second ? 96 : 160;
    if (!second && c.format == Format::mxfp4) c.w13_code_max = 130;
    // top-4: up to 128 tokens (the kernels' 512 pairs), top-8: 64
    const int wide = c.topk == 4 ? 128 : 64;
    c.max_tokens = wide, c.ids_int64 = second, c.weights_bf16 = !second, c.padded = second, c.alphas = !second;
    c.biases = v == 3;
    c.decode_tokens = wide, c.graph_cache = 0;
    const auto L = make_layer(c);
    const std::string d = L->layer->describe();
    EXPECT_NE(d.find("decode path for T <= 8 "), std::string::npos) << d;
    EXPECT_NE(d.find("wide decode path for T <= " + std::to_string(wide) + " "), std::string::npos) << d;
    std::mt19937_64 rng(c.seed * 5 + 3);
    RunBuffers b(c, c.max_tokens, c.hidden + (c.padded ? 24 : 0), c.hidden + (c.padded ? 40 : 0), rng);
    DeviceBuffer count(4);
    cudaStream_t s = nullptr;
    FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
    for (const int T : {9, 13, 24, 37, 64, 100, 128}) {  // (T 64 / 128: every pair on expert 3, 32 or 64 slots of one expert)
      if (T > wide) continue;
      run_routing_modes(*L, c, b, count, s, rng, T, T == wide ? 3 : -1, 3, c.describe());
    }
    EXPECT_NO_THROW(L->layer->check(s));
    FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
  }
}

// The wide path's staging sized by the device (DecodeWideShape::staged1 / 2: the opt-in shared memory less the kernels'
// static part and rings, ~140 KB on the H200): gpt-oss-120b's hidden size (5.7 KB staged rows, not a multiple of 128)
// with many small experts, so that a CTA's share of kernel 1's units spans three slots -- 24 staged rows, past the
// 128 KB that capped such layers at 33 tokens before. T 64 (512 pairs over 200 experts, and in run_routing_modes'
// other modes repeats, ids outside [0, E) and a device token count below T) against the reference composition, W4A16
// MXFP4 and W4A4 NVFP4 on pieces.
TEST(MoeLayerDecode, WidePathAtTheLargestStaging) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  for (int v = 0; v < 2; ++v) {
    LayerCase c;
    c.format = v == 0 ? Format::mxfp4 : Format::nvfp4;
    c.act = v == 0 ? MoeActivation::bf16 : MoeActivation::fp4;
    c.seed = 9950 + v;
    c.pieces = true, c.scale_layout = ScaleLayout::blocked, c.activation = MoeEpilogue::swigluoai;
    c.experts = 200, c.topk = 8, c.hidden = 2880, c.inter = 64, c.max_tokens = 64;
    c.decode_tokens = 64, c.graph_cache = 0;
    const auto L = make_layer(c);
    const std::string d = L->layer->describe();
    EXPECT_NE(d.find("wide decode path for T <= 64"), std::string::npos) << d;
    std::mt19937_64 rng(c.seed * 5 + 3);
    RunBuffers b(c, c.max_tokens, c.hidden, c.hidden, rng);
    DeviceBuffer count(4);
    cudaStream_t s = nullptr;
    FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
    run_routing_modes(*L, c, b, count, s, rng, 64, -1, 5, c.describe());
    EXPECT_NO_THROW(L->layer->check(s));
    FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
  }
}

// The wide path's combine in both of its forms, every output against the reference composition in run_routing_modes'
// routings (random; repeats, ids outside [0, E) and a device token count below T, which picks the form on the device):
// 8 rows per lane where a run has at least kCombineRows8Items warps' work (H 2880: 12 spans of 256 rows, so T >= 86;
// a lane's 8 bias values read one by one), element-wise otherwise; no biases, bf16 and float ones, float
// and bf16 routing weights.
TEST(MoeLayerDecode, WideCombineBothForms) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  for (int v = 0; v < 3; ++v) {
    LayerCase c;
    c.format = Format::mxfp4, c.act = MoeActivation::bf16;
    c.seed = 9990 + v;
    c.pieces = true, c.scale_layout = ScaleLayout::blocked, c.activation = MoeEpilogue::swigluoai;
    c.gate_up = GateUpLayout::interleaved;
    c.experts = 32, c.topk = 4, c.hidden = 2880, c.inter = 64, c.max_tokens = 128;
    c.biases = v != 0, c.bias_f32 = v == 2, c.weights_bf16 = v == 2;
    c.decode_tokens = 128, c.graph_cache = 0;
    const auto L = make_layer(c);
    const std::string d = L->layer->describe();
    EXPECT_NE(d.find("wide decode path for T <= 128 "), std::string::npos) << d;
    std::mt19937_64 rng(c.seed * 5 + 3);
    RunBuffers b(c, c.max_tokens, c.hidden, c.hidden, rng);
    DeviceBuffer count(4);
    cudaStream_t s = nullptr;
    FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
    for (const int T : {40, 100, 128}) run_routing_modes(*L, c, b, count, s, rng, T, -1, 30, c.describe());
    EXPECT_NO_THROW(L->layer->check(s));
    FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
  }
}

// Weights in pieces (MoeLayerOptions::weight_layout; W4A16 MXFP4 and W4A4 NVFP4): both paths (T 1-8 on the decode
// kernels, T 9-40 on the general path's GEMMs), both gate / up layouts, both scale layouts, H and I not multiples of
// 128 (the pieces' zero k-block, the decode path's padded intermediate -- quantised in place for W4A4), MXFP4 codes
// past 128 (the full-range decode; v 6: lone ones among codes <= 128, which the per-chunk check must see): every output of
// both layers against the reference, two runs the same bytes, and on the general path the pieces layer's bytes the
// rows layer's. Then the rows rewritten in place with new weights and repacked: the pieces layer sees them.
TEST(MoeLayerPieces, BothPathsMatchTheRowsLayerAndSeeRepackedUpdates) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  for (int v = 0; v < 7; ++v) {  // v 0-2, 6: MXFP4 W4A16; v 3, 4: NVFP4 W4A4 (v 3 blocked, v 4 linear); v 5: MXFP4 W4A4
    LayerCase c;
    const bool nv = v == 3 || v == 4;
    c.format = nv ? Format::nvfp4 : Format::mxfp4, c.act = v >= 3 ? MoeActivation::fp4 : MoeActivation::bf16;
    c.seed = 9600 + v;
    const bool second = v == 1 || v == 4;
    c.activation = second ? MoeEpilogue::swigluoai : MoeEpilogue::silu;
    c.gate_up = second ? GateUpLayout::interleaved : GateUpLayout::stacked;
    c.scale_layout = v == 2 || v == 4 ? ScaleLayout::linear : ScaleLayout::blocked;
    c.experts = second ? 16 : 8, c.topk = second ? 4 : 2;
    c.hidden = v % 3 == 0 ? 288 : v % 3 == 1 ? 352 : 256, c.inter = v % 3 == 0 ? 160 : v % 3 == 1 ? 96 : 128;
    if (v == 0 || v == 5) c.w13_code_max = 130;
    if (v == 5) c.hidden = 352, c.inter = 96;  // (MXFP4 W4A4: a 32-element block of the intermediate past 64)
    if (v == 6) c.rare_high_codes = 64, c.hidden = 512, c.inter = 256;  // (~2 codes past 128 per warp chunk of 128)
    c.max_tokens = 40, c.padded = second, c.biases = second, c.alphas = !second, c.graph_cache = 0;
    LayerCase cp = c;
    cp.pieces = true;
    const auto R = make_layer(c);
    const auto P = make_layer(cp);
    const std::string d = P->layer->describe();
    EXPECT_NE(d.find("weights in pieces"), std::string::npos) << d;
    EXPECT_NE(d.find("decode path for T <= 8"), std::string::npos) << d;
    std::mt19937_64 rng(c.seed * 7 + 5);
    const std::int64_t ldh = c.hidden + (c.padded ? 24 : 0), ldo = c.hidden + (c.padded ? 40 : 0);
    RunBuffers b(c, c.max_tokens, ldh, ldo, rng);
    cudaStream_t s = nullptr;
    FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
    for (int round = 0; round < 2; ++round) {
      if (round == 1) {  // new weights written over the rows, repacked into the same pieces buffers
        std::mt19937_64 wr(c.seed + 1000);
        for (ExpertTensor* t : {&R->w13, &R->w2})  // (as make_tensor draws them: GEMM1 stays exact)
          t->w = random_packed(wr, t == &R->w13 ? c.w13_values : Values::full, c.experts * t->rows, t->k, t->k / 2);
        P->w13.w = R->w13.w, P->w2.w = R->w2.w;
        for (Layer* L : {R.get(), P.get()}) {
          FP4GEMM_TEST_CUDA(cudaMemcpy(L->d_w13->get(), L->w13.w.data(), L->w13.w.size(), cudaMemcpyHostToDevice));
          FP4GEMM_TEST_CUDA(cudaMemcpy(L->d_w2->get(), L->w2.w.data(), L->w2.w.size(), cudaMemcpyHostToDevice));
        }
        P->pack(s);
      }
      for (const int T : {1, 2, 3, 5, 8, 9, 17, 40}) {
        const Inputs in = make_inputs(c, rng, T, T % 2 ? Route::random : Route::few);
        const Expected x = reference_layer(*P, in);
        b.upload(c, in, s);
        P->layer->run(b.args(c, in), s);
        const std::vector<std::uint8_t> got = b.download(s);
        EXPECT_TRUE(check_output(c, in, b, got, x)) << "pieces, round " << round << ", T " << T;
        b.upload(c, in, s);
        P->layer->run(b.args(c, in), s);
        EXPECT_TRUE(b.download(s) == got) << "two runs differ: round " << round << ", T " << T;
        b.upload(c, in, s);
        R->layer->run(b.args(c, in), s);
        const std::vector<std::uint8_t> rows = b.download(s);
        EXPECT_TRUE(check_output(c, in, b, rows, x)) << "rows, round " << round << ", T " << T;
        // The general path's kernels give a thread the same products either way: the same bytes. The decode kernels'
        // lanes take other k elements of a chunk in pieces (16c..16c+15 of two k-blocks instead of 32c..32c+31), so
        // their FP32 sums group differently: equal only where every sum is exact (GPU MODE values), else both within
        // the bound above.
        if (T > 8) EXPECT_TRUE(rows == got) << "the rows layer's bytes differ: round " << round << ", T " << T;
      }
    }
    EXPECT_NO_THROW(P->layer->check(s));
    FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
  }
}

// The decode kernels' streaming loop well past its first chunk. In the tests above every warp's share is one or two
// chunks; here, at E 16, top-2, H 2080 and I 800 (both 32 past a multiple of 128: every unit's last chunk has its
// second k-block past K) and T 8, a warp walks ~10 chunks in kernel 1 and ~5 in kernel 2, so the ring is refilled and
// wraps, the cursors step and change unit on both sides, and the NVFP4 pieces' shared code words are refilled under
// the warp's other lanes. Rows and pieces, blocked and linear scales, MXFP4 W4A16 (half of them with w13 codes past
// 128: the full-range decode), NVFP4 W4A4 and MXFP4 W4A4: every output against the reference, two runs the same bytes.
TEST(MoeLayerDecode, LongSharesMatchTheReference) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  for (int v = 0; v < 12; ++v) {  // v % 2: rows / pieces; v / 2 % 2: blocked / linear; v / 4: W4A16, NVFP4 W4A4, MXFP4 W4A4
    LayerCase c;
    const int f = v / 4;
    c.format = f == 1 ? Format::nvfp4 : Format::mxfp4;
    c.act = f == 0 ? MoeActivation::bf16 : MoeActivation::fp4;
    c.pieces = v % 2 == 1;
    c.scale_layout = v / 2 % 2 == 1 ? ScaleLayout::linear : ScaleLayout::blocked;
    const bool oai = v % 3 == 1;
    c.activation = oai ? MoeEpilogue::swigluoai : MoeEpilogue::silu;
    c.gate_up = oai ? GateUpLayout::interleaved : GateUpLayout::stacked;
    c.experts = 16, c.topk = 2, c.hidden = 2080, c.inter = 800, c.max_tokens = 8, c.graph_cache = 0;
    if (f == 0 && v % 4 >= 2) c.w13_code_max = 130;
    c.seed = 9700 + v;
    const auto L = make_layer(c);
    const std::string d = L->layer->describe();
    EXPECT_NE(d.find("decode path for T <= 8"), std::string::npos) << d;
    std::mt19937_64 rng(c.seed * 3 + 1);
    RunBuffers b(c, c.max_tokens, c.hidden, c.hidden, rng);
    cudaStream_t s = nullptr;
    FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
    for (const int T : {3, 8}) {
      const Inputs in = make_inputs(c, rng, T, Route::random);
      const Expected x = reference_layer(*L, in);
      b.upload(c, in, s);
      L->layer->run(b.args(c, in), s);
      const std::vector<std::uint8_t> got = b.download(s);
      EXPECT_TRUE(check_output(c, in, b, got, x)) << c.describe() << ", T " << T;
      b.upload(c, in, s);
      L->layer->run(b.args(c, in), s);
      EXPECT_TRUE(b.download(s) == got) << "two runs differ: " << c.describe() << ", T " << T;
    }
    EXPECT_NO_THROW(L->layer->check(s));
    FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
  }
}

// W4A16's decode path as one fused kernel (the default where it launches) and as the two kernels
// (FP4GEMM_DECODE_FUSED=0 at plan time): the same grid, so the same bytes, every T of 1..8 and routings that repeat an
// expert or leave slots empty; both against the reference; the fused layer also replayed from its CUDA graphs (a
// cooperative launch captured) with a new routing each run, and its grid barrier's counter carried across many runs.
TEST(MoeLayerDecode, FusedKernelMatchesTheTwoKernels) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  for (int v = 0; v < 4; ++v) {  // v % 2: rows / pieces; v / 2: blocked / linear
    LayerCase c;
    c.format = Format::mxfp4, c.act = MoeActivation::bf16;
    c.pieces = v % 2 == 1;
    c.scale_layout = v / 2 == 1 ? ScaleLayout::linear : ScaleLayout::blocked;
    c.activation = v == 1 ? MoeEpilogue::swigluoai : MoeEpilogue::silu;
    c.gate_up = v == 1 ? GateUpLayout::interleaved : GateUpLayout::stacked;
    c.experts = 16, c.topk = 4, c.hidden = 1056, c.inter = 416, c.max_tokens = 8, c.seed = 9800 + v;
    LayerCase cg = c;
    c.graph_cache = 0;
    ::unsetenv("FP4GEMM_DECODE_FUSED");
    const auto F = make_layer(c);
    const auto G = make_layer(cg);  // (fused, graphs cached)
    ::setenv("FP4GEMM_DECODE_FUSED", "0", 1);
    const auto K = make_layer(c);
    ::unsetenv("FP4GEMM_DECODE_FUSED");
    EXPECT_NE(F->layer->describe().find("1 fused kernel"), std::string::npos) << F->layer->describe();
    EXPECT_NE(K->layer->describe().find("2 kernels"), std::string::npos) << K->layer->describe();
    std::mt19937_64 rng(c.seed * 11 + 7);
    RunBuffers b(c, c.max_tokens, c.hidden, c.hidden, rng);
    cudaStream_t s = nullptr;
    FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
    for (int round = 0; round < 3; ++round)
      for (int T = 1; T <= 8; ++T) {
        const Inputs in = make_inputs(c, rng, T, round == 1 ? Route::few : round == 2 ? Route::invalid_ids : Route::random);
        const Expected x = reference_layer(*F, in);
        b.upload(c, in, s);
        K->layer->run(b.args(c, in), s);
        const std::vector<std::uint8_t> two = b.download(s);
        EXPECT_TRUE(check_output(c, in, b, two, x)) << "two kernels: " << c.describe() << ", T " << T;
        b.upload(c, in, s);
        F->layer->run(b.args(c, in), s);
        EXPECT_TRUE(b.download(s) == two) << "fused differs from the two kernels: " << c.describe() << ", T " << T;
        for (int rep = 0; rep < 2; ++rep) {  // (graph capture, then replay)
          b.upload(c, in, s);
          G->layer->run(b.args(c, in), s);
          EXPECT_TRUE(b.download(s) == two) << "fused from a graph differs: " << c.describe() << ", T " << T << ", run " << rep;
        }
      }
    EXPECT_NO_THROW(F->layer->check(s));
    EXPECT_NO_THROW(G->layer->check(s));
    FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
  }
}

// W4A16 and W4A4 layers have a decode path; a batch-invariant layer has none (its rows would change
// when T crosses the path's bound); decode_tokens outside -1..kDecodeTokensMax is refused by name, and the largest is
// clamped to the wide kernels' 512 pairs.
TEST(MoeLayerDecode, OnlyWhereItApplies) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  LayerCase c;
  c.format = Format::mxfp4, c.act = MoeActivation::bf16, c.max_tokens = 4;
  c.decode_tokens = 8;
  EXPECT_NE(make_layer(c)->layer->describe().find("decode path for T <= 4"), std::string::npos);
  c.act = MoeActivation::fp4;
  EXPECT_NE(make_layer(c)->layer->describe().find("decode path for T <= 4"), std::string::npos);
  c.act = MoeActivation::bf16, c.batch_invariant = true;
  EXPECT_NE(make_layer(c)->layer->describe().find("no decode path"), std::string::npos);
  // past 8 tokens: the wide kernels, W4A16 MXFP4 and W4A4 (NVFP4, MXFP4) where decode_tokens asks
  c.batch_invariant = false, c.max_tokens = 40, c.decode_tokens = 20;
  for (const MoeActivation act : {MoeActivation::bf16, MoeActivation::fp4})
    for (const Format f : {Format::mxfp4, Format::nvfp4}) {
      if (act == MoeActivation::bf16 && f == Format::nvfp4) continue;  // (no NVFP4 W4A16 layer)
      c.act = act, c.format = f;
      const std::string d = make_layer(c)->layer->describe();
      EXPECT_NE(d.find("decode path for T <= 8 "), std::string::npos) << d;
      EXPECT_NE(d.find("wide decode path for T <= 20 "), std::string::npos) << d;
    }
  c.format = Format::mxfp4;
  // the largest bound asked: clamped to the kernels' 512 pairs (top-2: 256 tokens)
  c.act = MoeActivation::bf16, c.max_tokens = 300, c.decode_tokens = kDecodeTokensMax;
  {
    const std::string d = make_layer(c)->layer->describe();
    EXPECT_NE(d.find("wide decode path for T <= " + std::to_string(kDecodeTokensMax / c.topk) + " "), std::string::npos) << d;
  }
  c.decode_tokens = kDecodeTokensMax + 1;
  try {
    make_layer(c);
    ADD_FAILURE() << "decode_tokens " << c.decode_tokens << " accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "options.decode_tokens") << e.what();
  }
}

// The W4A16 hand-over (host/moe_layer.cpp): GEMM1 writes the intermediate in GEMM2's k order and
// GEMM2 runs without its pre-pass where I is whole 64-wide k-blocks; not with I % 64 != 0, nor W4A4
// (whose GEMM2 reads FP4). The outputs themselves: MoeLayerCases (W4A16 cases 8, 9, 11 and the T
// 16384 case take the hand-over, case 10 with I 96 does not), against the reference composition.
TEST(MoeLayerHandover, WhereItApplies) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  const std::string kHandover = "GEMM1 writes the intermediate in GEMM2's k order";
  LayerCase c;
  c.format = Format::mxfp4, c.act = MoeActivation::bf16, c.inter = 128;
  EXPECT_NE(make_layer(c)->layer->describe().find(kHandover), std::string::npos) << make_layer(c)->layer->describe();
  c.inter = 96;
  EXPECT_EQ(make_layer(c)->layer->describe().find(kHandover), std::string::npos);
  c.inter = 128, c.act = MoeActivation::fp4;
  EXPECT_EQ(make_layer(c)->layer->describe().find(kHandover), std::string::npos);
}

// The default bound (kDecodeTokensAuto): 8 tokens W4A16 and W4A4, where a few tokens rarely share experts; max(3, E / (2 top-k))
// where they do; at most 6 / 4 (W4A16 / W4A4) past H 3072; never past max_tokens.
TEST(MoeLayerDecode, DefaultBoundByTheLayer) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  EXPECT_EQ(MoeLayerOptions{}.decode_tokens, kDecodeTokensAuto);
  // bound: the narrow kernels' (T <= 8); wide: the wide kernels' (W4A16 MXFP4 and W4A4 where the narrow bound is 8 at
  // H <= 3072: 64, past 64 up to 4 pairs per expert (4 E / k) and at most 512 / k, but 32 for W4A4 NVFP4 with experts over 4 MiB, and none with experts over 4 MiB and linear weight
  // scales; 0: none)
  struct Want {
    Format format; MoeActivation act; int experts, topk, max_tokens, hidden, inter, bound, wide = 0;
    ScaleLayout scales = ScaleLayout::blocked;
  };
  for (const Want w : {Want{Format::mxfp4, MoeActivation::bf16, 32, 2, 64, 256, 128, 8, 64},  // E / 2k = 8, small experts
                       Want{Format::mxfp4, MoeActivation::bf16, 16, 1, 64, 2048, 1408, 8, 64},  // 4.125 MiB experts
                       Want{Format::mxfp4, MoeActivation::bf16, 16, 1, 64, 2048, 1344, 8, 64},  // 3.94 MiB experts
                       // linear weight scales: experts over 4 MiB have no wide path
                       Want{Format::mxfp4, MoeActivation::bf16, 16, 1, 64, 2048, 1408, 8, 0, ScaleLayout::linear},
                       Want{Format::nvfp4, MoeActivation::fp4, 16, 1, 64, 2048, 1408, 8, 0, ScaleLayout::linear},
                       Want{Format::mxfp4, MoeActivation::bf16, 16, 1, 64, 2048, 1344, 8, 64, ScaleLayout::linear},
                       Want{Format::mxfp4, MoeActivation::bf16, 32, 2, 40, 256, 128, 8, 40},  // max_tokens
                       Want{Format::mxfp4, MoeActivation::bf16, 64, 4, 200, 256, 128, 8, 64},
                       // past 64 tokens: up to 4 pairs per expert (4 E / k), at most the kernels' 512 pairs / k
                       Want{Format::mxfp4, MoeActivation::bf16, 128, 4, 200, 256, 128, 8, 128},
                       Want{Format::mxfp4, MoeActivation::bf16, 128, 4, 100, 256, 128, 8, 100},  // max_tokens
                       Want{Format::mxfp4, MoeActivation::bf16, 256, 2, 300, 256, 128, 8, 256},  // 512 pairs
                       Want{Format::mxfp4, MoeActivation::bf16, 32, 1, 200, 2048, 1408, 8, 128},  // 4.125 MiB experts
                       Want{Format::mxfp4, MoeActivation::fp4, 32, 1, 200, 2048, 1408, 8, 128},
                       Want{Format::nvfp4, MoeActivation::fp4, 32, 1, 200, 2048, 1408, 8, 32},
                       Want{Format::mxfp4, MoeActivation::fp4, 32, 2, 64, 256, 128, 8, 64},
                       Want{Format::nvfp4, MoeActivation::fp4, 32, 2, 64, 256, 128, 8, 64},
                       Want{Format::nvfp4, MoeActivation::fp4, 16, 1, 64, 2048, 1408, 8, 32},  // 4.125 MiB experts
                       Want{Format::mxfp4, MoeActivation::fp4, 16, 1, 64, 2048, 1408, 8, 64},
                       Want{Format::nvfp4, MoeActivation::fp4, 16, 1, 64, 2048, 1344, 8, 64},  // 3.94 MiB experts
                       Want{Format::mxfp4, MoeActivation::bf16, 16, 2, 64, 256, 128, 4},  // E / 2k = 4
                       Want{Format::mxfp4, MoeActivation::bf16, 8, 2, 64, 256, 128, 3},   // Mixtral-like: 3
                       Want{Format::nvfp4, MoeActivation::fp4, 8, 4, 64, 256, 128, 3},
                       Want{Format::mxfp4, MoeActivation::bf16, 32, 2, 5, 256, 128, 5},  // max_tokens (no wide: 5 < 9)
                       // wide hidden sizes (the measured crossover: Mixtral H 4096, DeepSeek-V3 H 7168)
                       Want{Format::mxfp4, MoeActivation::bf16, 8, 1, 64, 4096, 256, 4},  // E / 2k = 4
                       Want{Format::mxfp4, MoeActivation::bf16, 16, 1, 64, 4096, 256, 6},
                       Want{Format::nvfp4, MoeActivation::fp4, 16, 1, 64, 4096, 256, 4},
                       Want{Format::nvfp4, MoeActivation::fp4, 8, 2, 64, 4096, 256, 3},   // E / 2k = 2: 3
                       Want{Format::mxfp4, MoeActivation::bf16, 16, 1, 64, 7168, 256, 6},
                       Want{Format::mxfp4, MoeActivation::fp4, 16, 1, 64, 7168, 256, 4},
                       Want{Format::mxfp4, MoeActivation::bf16, 8, 1, 3, 7168, 256, 3}}) {  // max_tokens
    LayerCase c;
    c.format = w.format, c.act = w.act, c.experts = w.experts, c.topk = w.topk, c.max_tokens = w.max_tokens;
    c.hidden = w.hidden, c.inter = w.inter, c.scale_layout = w.scales;
    c.decode_tokens = kDecodeTokensAuto;
    const std::string d = make_layer(c)->layer->describe();
    EXPECT_NE(d.find(w.bound > 0 ? "decode path for T <= " + std::to_string(w.bound) + " " : std::string("no decode path")),
              std::string::npos)
        << c.describe() << ": " << d;
    if (w.wide > 0)
      EXPECT_NE(d.find("wide decode path for T <= " + std::to_string(w.wide) + " "), std::string::npos) << c.describe() << ": " << d;
    else
      EXPECT_EQ(d.find("wide decode path"), std::string::npos) << c.describe() << ": " << d;
  }
}

// W4A4: the intermediate quantised in GEMM1's GLU epilogue (MoeLayerOptions::fuse_quantize)
// against the separate quantiser reading GEMM1's bf16 rows (the default, which MoeLayerCases
// checks against the reference composition): the same output bytes, for every W4A4 case, its w13
// also with realistic (inexact) values, and routings with empty experts, one hot expert and ids
// outside [0, E).
TEST(MoeLayerFusedQuantise, SameBytesAsTheSeparateQuantiser) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  int compared = 0;
  for (LayerCase c : layer_cases()) {
    if (c.act != MoeActivation::fp4) continue;
    for (const Values v : {Values::gpumode, Values::full}) {
      c.w13_values = v;
      c.fuse_quantize = true;
      LayerCase sep = c;
      sep.fuse_quantize = false;
      SCOPED_TRACE(c.describe());
      const auto fused = make_layer(c), separate = make_layer(sep);  // (the same seed: the same weights)
      ASSERT_NE(fused->layer->describe().find("quantised in GEMM1"), std::string::npos);
      ASSERT_NE(separate->layer->describe().find("quantised separately"), std::string::npos);
      std::mt19937_64 rng(c.seed * 31 + 7);
      RunBuffers b(c, c.max_tokens, c.hidden + (c.padded ? 24 : 0), c.hidden + (c.padded ? 40 : 0), rng);
      cudaStream_t s = nullptr;
      FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
      const Route routes[] = {Route::random, Route::one_hot, Route::few, Route::invalid_ids};
      for (int r = 0; r < 4; ++r) {
        const Inputs in = make_inputs(c, rng, std::min(r == 0 ? c.max_tokens : 5 + 7 * r, c.max_tokens), routes[r]);
        b.upload(c, in, s);
        fused->layer->run(b.args(c, in), s);
        const std::vector<std::uint8_t> got = b.download(s);
        b.upload(c, in, s);
        separate->layer->run(b.args(c, in), s);
        EXPECT_TRUE(b.download(s) == got) << "routing " << to_string(routes[r]) << ": fused and separate quantisation differ";
        ++compared;
      }
      EXPECT_NO_THROW(fused->layer->check(s));
      FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
    }
  }
  EXPECT_GE(compared, 8);
}

// Pre-quantised tokens (MoeLayerArgs::hidden_packed / hidden_scales, what an expert-parallel
// dispatch delivers): the host quantiser's bytes in, so the output must be the bf16-input run's
// byte for byte (the GPU quantiser matches the host rule bit for bit) and within the reference's
// bound.
TEST(MoeLayerPrequantised, SameBytesAsTheBf16Input) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  for (const LayerCase& c : layer_cases()) {
    if (c.act != MoeActivation::fp4) continue;
    SCOPED_TRACE(c.describe());
    const auto L = make_layer(c);
    std::mt19937_64 rng(c.seed * 13 + 5);
    const std::int64_t ldh = c.hidden + (c.padded ? 24 : 0), ldo = c.hidden + (c.padded ? 40 : 0);
    RunBuffers b(c, c.max_tokens, ldh, ldo, rng);
    const int vec = scale_block_size(c.format);
    DeviceBuffer d_xp(static_cast<std::size_t>(c.max_tokens) * c.hidden / 2 + 16),
        d_xs(static_cast<std::size_t>(c.max_tokens) * (c.hidden / vec) + 16);
    cudaStream_t s = nullptr;
    FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
    for (const int tokens : {c.max_tokens, 5}) {
      const Inputs in = make_inputs(c, rng, tokens, Route::random);
      const Expected x = reference_layer(*L, in);
      b.upload(c, in, s);
      L->layer->run(b.args(c, in), s);
      const std::vector<std::uint8_t> from_bf16 = b.download(s);
      // The host quantiser on the same tokens, dense rows.
      std::vector<float> xf(static_cast<std::size_t>(tokens) * c.hidden);
      for (int t = 0; t < tokens; ++t)
        for (int h = 0; h < c.hidden; ++h)
          xf[static_cast<std::size_t>(t) * c.hidden + h] = bf16_value(in.hidden[t * in.ld_hidden + h]);
      std::vector<std::uint8_t> xp(xf.size() / 2), xs(xf.size() / vec);
      formats::quantize(c.format, xf.data(), tokens, c.hidden, c.hidden, xp.data(), xs.data(), L->a1);
      FP4GEMM_TEST_CUDA(cudaMemcpy(d_xp.get(), xp.data(), xp.size(), cudaMemcpyHostToDevice));
      FP4GEMM_TEST_CUDA(cudaMemcpy(d_xs.get(), xs.data(), xs.size(), cudaMemcpyHostToDevice));
      b.upload(c, in, s);  // re-poisons the output
      MoeLayerArgs a = b.args(c, in);
      a.hidden = nullptr, a.ld_hidden = 0, a.hidden_packed = d_xp.get(), a.hidden_scales = d_xs.get();
      L->layer->run(a, s);
      const std::vector<std::uint8_t> got = b.download(s);
      EXPECT_TRUE(check_output(c, in, b, got, x)) << "pre-quantised tokens, T " << tokens;
      EXPECT_TRUE(got == from_bf16) << "pre-quantised and bf16 tokens give different bytes, T " << tokens;
    }
    EXPECT_NO_THROW(L->layer->check(s));
    FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
  }
}

// MoeLayerArgs::expert_rows / row_of: the run stops before its combine. Summing each token's pairs'
// rows (found through row_of) with the combine's rule on the host gives the combined run's bytes;
// every valid pair has its own row, and every other row of the poisoned array is left as it was.
TEST(MoeLayerExpertRows, TheCombinedRunsBytes) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  int ran = 0;
  for (const LayerCase& c : layer_cases()) {
    if (c.biases) continue;  // (refused: the combine adds w2_bias; below)
    SCOPED_TRACE(c.describe());
    const auto L = make_layer(c);
    MoeLayerOptions uo = L->options;
    uo.combine = false;
    const auto uncombined_plan = std::make_unique<MoeLayer>(L->weights, uo);
    std::mt19937_64 rng(c.seed * 17 + 3);
    const std::int64_t ldh = c.hidden + (c.padded ? 24 : 0), ldo = c.hidden + (c.padded ? 40 : 0);
    RunBuffers b(c, c.max_tokens, ldh, ldo, rng);
    const std::size_t pairs_cap = static_cast<std::size_t>(c.max_tokens) * c.topk;
    DeviceBuffer d_rows(pairs_cap * c.hidden * 2), d_row_of(pairs_cap * 4);
    cudaStream_t s = nullptr;
    FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
    for (const int tokens : {c.max_tokens, 3}) {
      for (const Route route : {Route::random, Route::invalid_ids}) {
        const Inputs in = make_inputs(c, rng, tokens, route);
        b.upload(c, in, s);
        L->layer->run(b.args(c, in), s);
        const std::vector<std::uint8_t> combined = b.download(s);
        const std::size_t pairs = static_cast<std::size_t>(tokens) * c.topk;
        FP4GEMM_TEST_CUDA(cudaMemsetAsync(d_rows.get(), 0xFF, pairs * c.hidden * 2, s));
        FP4GEMM_TEST_CUDA(cudaMemsetAsync(d_row_of.get(), 0xFF, pairs * 4, s));
        MoeLayerArgs a = b.args(c, in);
        a.out = nullptr, a.ld_out = 0, a.topk_weights = nullptr;  // (not read)
        a.expert_rows = d_rows.get(), a.row_of = reinterpret_cast<int*>(d_row_of.get());
        L->layer->run(a, s);
        FP4GEMM_TEST_CUDA(cudaStreamSynchronize(s));
        std::vector<std::uint16_t> rows(pairs * c.hidden);
        if (uncombined_plan) {  // a plan without a combine (no output workspace): the same rows
          std::vector<std::uint16_t> first(pairs * c.hidden);
          FP4GEMM_TEST_CUDA(cudaMemcpy(first.data(), d_rows.get(), first.size() * 2, cudaMemcpyDeviceToHost));
          FP4GEMM_TEST_CUDA(cudaMemsetAsync(d_rows.get(), 0xFF, pairs * c.hidden * 2, s));
          uncombined_plan->run(a, s);
          FP4GEMM_TEST_CUDA(cudaStreamSynchronize(s));
          FP4GEMM_TEST_CUDA(cudaMemcpy(rows.data(), d_rows.get(), rows.size() * 2, cudaMemcpyDeviceToHost));
          ASSERT_TRUE(rows == first) << "options.combine = false gave other expert rows, T " << tokens;
        }
        std::vector<int> row_of(pairs);
        FP4GEMM_TEST_CUDA(cudaMemcpy(rows.data(), d_rows.get(), rows.size() * 2, cudaMemcpyDeviceToHost));
        FP4GEMM_TEST_CUDA(cudaMemcpy(row_of.data(), d_row_of.get(), row_of.size() * 4, cudaMemcpyDeviceToHost));
        std::vector<char> used(pairs, 0);
        for (std::size_t i = 0; i < pairs; ++i) {
          if (in.ids[i] < 0 || in.ids[i] >= c.experts) continue;
          ASSERT_TRUE(row_of[i] >= 0 && static_cast<std::size_t>(row_of[i]) < pairs) << "pair " << i << " row " << row_of[i];
          ASSERT_FALSE(used[row_of[i]]) << "two pairs share row " << row_of[i];
          used[row_of[i]] = 1;
        }
        for (std::size_t r = 0; r < pairs; ++r)
          if (!used[r])
            for (int h = 0; h < c.hidden; ++h)
              ASSERT_EQ(rows[r * c.hidden + h], 0xFFFF) << "row " << r << " belongs to no pair but was written";
        for (int t = 0; t < tokens; ++t)
          for (int h = 0; h < c.hidden; ++h) {
            float acc = 0.0f;
            for (int j = 0; j < c.topk; ++j) {
              const std::size_t i = static_cast<std::size_t>(t) * c.topk + j;
              if (in.ids[i] < 0 || in.ids[i] >= c.experts) continue;
              acc = std::fmaf(in.weights[i], bf16_value(rows[static_cast<std::size_t>(row_of[i]) * c.hidden + h]), acc);
            }
            const std::uint16_t want = reference::float_to_bf16_bits(acc);
            std::uint16_t got;
            std::memcpy(&got, combined.data() + RunBuffers::kGuard + (static_cast<std::size_t>(t) * in.ld_out + h) * 2, 2);
            const bool both_nan = (want & 0x7FFF) > 0x7F80 && (got & 0x7FFF) > 0x7F80;
            ASSERT_TRUE(got == want || both_nan) << "T " << tokens << " out[" << t << ", " << h << "] " << got << " vs the "
                                                 << "expert rows summed " << want;
          }
        ++ran;
      }
    }
    EXPECT_NO_THROW(L->layer->check(s));
    FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
  }
  EXPECT_GT(ran, 0);
  // Bad arguments, named.
  LayerCase c;
  const auto L = make_layer(c);
  std::mt19937_64 rng(77);
  RunBuffers b(c, c.max_tokens, c.hidden, c.hidden, rng);
  const Inputs in = make_inputs(c, rng, 4, Route::random);
  DeviceBuffer d_rows(static_cast<std::size_t>(c.max_tokens) * c.topk * c.hidden * 2), d_row_of(4 * c.max_tokens * c.topk);
  auto named = [&](auto&& edit, const char* name) {
    MoeLayerArgs a = b.args(c, in);
    a.out = nullptr, a.expert_rows = d_rows.get(), a.row_of = reinterpret_cast<int*>(d_row_of.get());
    edit(a);
    try {
      L->layer->run(a);
      ADD_FAILURE() << "accepted; expected an error naming " << name;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), name) << e.what();
    }
  };
  named([&](MoeLayerArgs& a) { a.row_of = nullptr; }, "row_of");
  named([&](MoeLayerArgs& a) { a.expert_rows = nullptr; }, "expert_rows");
  named([&](MoeLayerArgs& a) { a.out = b.arena->get() + RunBuffers::kGuard; }, "out");
  named([&](MoeLayerArgs& a) { a.expert_rows = d_rows.get() + 2; }, "expert_rows");
  DeviceBuffer tiny(16);
  named([&](MoeLayerArgs& a) { a.row_of = reinterpret_cast<int*>(tiny.get()); }, "row_of");  // (too small for T * topk)
  MoeLayerOptions uo = L->options;
  uo.combine = false;
  const MoeLayer uncombined_plan(L->weights, uo);
  EXPECT_NE(uncombined_plan.describe().find("stops before its combine"), std::string::npos);
  EXPECT_LT(uncombined_plan.device_bytes(), L->layer->device_bytes());  // (no output workspace)
  try {
    uncombined_plan.run(b.args(c, in));
    ADD_FAILURE() << "a combined run of a layer planned without its combine accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "expert_rows") << e.what();
  }
}

// One graph of L's run at T tokens, captured once, replayed `replays` times with a new routing (cycling through the
// routes) and new tokens in the same buffers, each replay checked against the reference.
void check_graph_replays(const Layer& L, int T, int replays) {
  const LayerCase& c = L.c;
  std::mt19937_64 rng(c.seed);
  RunBuffers b(c, c.max_tokens, c.hidden, c.hidden, rng);
  cudaStream_t s = nullptr;
  FP4GEMM_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Inputs in = make_inputs(c, rng, T, Route::random);
  b.upload(c, in, s);
  FP4GEMM_TEST_CUDA(cudaStreamSynchronize(s));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  FP4GEMM_TEST_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  L.layer->run(b.args(c, in), s);
  FP4GEMM_TEST_CUDA(cudaStreamEndCapture(s, &graph));
  FP4GEMM_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < replays; ++replay) {
    in = make_inputs(c, rng, T, static_cast<Route>(replay % 4));
    const Expected x = reference_layer(L, in);
    b.upload(c, in, s);
    FP4GEMM_TEST_CUDA(cudaGraphLaunch(exec, s));
    ASSERT_TRUE(check_output(c, in, b, b.download(s), x)) << c.describe() << ", T " << T << ", replay " << replay;
  }
  FP4GEMM_TEST_CUDA(cudaGraphExecDestroy(exec));
  FP4GEMM_TEST_CUDA(cudaGraphDestroy(graph));
  EXPECT_NO_THROW(L.layer->check(s));
  FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
}

// One graph, captured once, replayed with a new routing, new tokens and new weights every time.
TEST(MoeLayerGraph, ReplaysWithANewRoutingEachTime) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  LayerCase c;
  c.experts = 32, c.topk = 4, c.max_tokens = 40, c.seed = 9200;
  check_graph_replays(*make_layer(c), 24, 40);
}

// The general path at a routing of >= align_routing_grid_min_ids() ids, captured once and replayed with a new
// routing and new tokens every time, each replay against the reference: the routing's grid form (count, then the
// scan and the placement as programmatic dependents), then the activations' pre-pass (a programmatic dependent of the
// routing, or of W4A4's token quantiser) and GEMM1, which reads the routing's offsets in its prologue before it waits
// for the pre-pass -- W4A16 MXFP4 and W4A4 NVFP4, top-8 over 32 experts (one-hot and few-expert routings load a
// handful of experts with hundreds of rows).
TEST(MoeLayerGraph, GeneralPathWithTheGridRoutingReplays) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  const int T = static_cast<int>((detail::align_routing_grid_min_ids() + 7) / 8) + 3;  // top-8: just past the bound
  for (int v = 0; v < 2; ++v) {
    LayerCase c;
    c.format = v == 0 ? Format::mxfp4 : Format::nvfp4;
    c.act = v == 0 ? MoeActivation::bf16 : MoeActivation::fp4;
    c.experts = 32, c.topk = 8, c.max_tokens = T, c.decode_tokens = 0, c.graph_cache = 0;
    c.seed = 9270 + v;
    const auto L = make_layer(c);
    check_graph_replays(*L, T, 6);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The decode path captured in a graph (W4A16 MXFP4: two kernels, the second a programmatic dependent of the
// first; W4A4 NVFP4 and MXFP4: four launches in one programmatic-dependent chain -- token quantiser, kernel 1,
// intermediate quantiser, kernel 2): every replay, with new tokens and a new routing in the same buffers (random,
// one hot expert, a few experts, invalid ids), matches the reference, at T 1 and T 8; top-4 over 32 experts, and
// top-8 over 12 (v 3, 4: up to 64 pairs, the routing read's second half).
TEST(MoeLayerGraph, DecodePathReplaysWithANewRoutingEachTime) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  for (int v = 0; v < 5; ++v)
    for (const int T : {1, 8}) {
      LayerCase c;
      c.format = v == 1 || v == 4 ? Format::nvfp4 : Format::mxfp4;
      c.act = v == 0 || v == 3 ? MoeActivation::bf16 : MoeActivation::fp4;
      c.experts = v >= 3 ? 12 : 32, c.topk = v >= 3 ? 8 : 4, c.max_tokens = 8;
      c.seed = 9250 + 2 * v + (T == 8 ? 1 : 0);
      const auto L = make_layer(c);
      ASSERT_NE(L->layer->describe().find("decode path for T <= 8"), std::string::npos) << L->layer->describe();
      check_graph_replays(*L, T, 16);
      if (::testing::Test::HasFatalFailure()) return;
    }
}

// Eager runs as cached graphs (MoeLayerOptions::graph_cache): the same bytes as direct launches
// and as the reference, with new data in the same buffers each run, keys evicted and rebuilt; the
// replay count says which path ran. Host time per call is printed, not asserted.
TEST(MoeLayerGraphCache, SameBytesAsDirectLaunches) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  LayerCase c;
  c.experts = 16, c.topk = 4, c.max_tokens = 32, c.seed = 9300;
  LayerCase direct_case = c, small_cache = c;
  direct_case.graph_cache = 0, small_cache.graph_cache = 2;
  const auto cached = make_layer(c), direct = make_layer(direct_case), small = make_layer(small_cache);
  std::mt19937_64 rng(c.seed);
  RunBuffers b(c, c.max_tokens, c.hidden, c.hidden, rng);
  cudaStream_t s = nullptr;
  FP4GEMM_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto run_and_check = [&](const Layer& L, const Inputs& in) {
    b.upload(c, in, s);
    L.layer->run(b.args(c, in), s);
    std::vector<std::uint8_t> got = b.download(s);
    EXPECT_TRUE(check_output(c, in, b, got, reference_layer(L, in)));
    return got;
  };
  // One key (T 24, the same buffers), new data and routing every run: run 1 direct, run 2 builds
  // the graph, runs 2..10 are replays.
  for (int r = 0; r < 10; ++r) {
    const Inputs in = make_inputs(c, rng, 24, static_cast<Route>(r % 4));
    const std::vector<std::uint8_t> want = run_and_check(*direct, in);
    EXPECT_TRUE(run_and_check(*cached, in) == want) << "run " << r << ": graph replay differs from direct launches";
  }
  EXPECT_EQ(cached->layer->graph_replays(), 9u);
  EXPECT_EQ(direct->layer->graph_replays(), 0u);
  // Two keys cached: three token counts in turn evict each other (LRU), two alternating hit.
  for (int r = 0; r < 9; ++r) {
    const Inputs in = make_inputs(c, rng, 5 + 4 * (r % 3), Route::random);
    EXPECT_TRUE(run_and_check(*small, in) == run_and_check(*direct, in)) << "cycling keys, run " << r;
  }
  EXPECT_EQ(small->layer->graph_replays(), 0u);
  for (int r = 0; r < 8; ++r) {
    const Inputs in = make_inputs(c, rng, 5 + 4 * (r % 2), Route::random);
    EXPECT_TRUE(run_and_check(*small, in) == run_and_check(*direct, in)) << "alternating keys, run " << r;
  }
  EXPECT_EQ(small->layer->graph_replays(), 6u);
  // Host time per call, enqueue only (the stream drains between the two measurements).
  const Inputs in = make_inputs(c, rng, 8, Route::random);
  b.upload(c, in, s);
  for (const Layer* L : {direct.get(), cached.get()}) {
    const MoeLayerArgs a = b.args(c, in);
    for (int w = 0; w < 3; ++w) L->layer->run(a, s);
    FP4GEMM_TEST_CUDA(cudaStreamSynchronize(s));
    constexpr int kCalls = 50;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) L->layer->run(a, s);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kCalls;
    FP4GEMM_TEST_CUDA(cudaStreamSynchronize(s));
    std::cout << "[host overhead] MoeLayer::run (C++), " << (L == direct.get() ? "direct launches" : "cached graph")
              << ": " << us << " us per call\n";
  }
  for (const auto* L : {cached.get(), direct.get(), small.get()}) EXPECT_NO_THROW(L->layer->check(s));
  FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
}

// The unquantised layer in float64: weights dequantised (with their alphas), hidden states as
// given, no activation quantisation. Also returns the amax of the tokens and of the intermediate
// (ModelOpt's calibration: input_scale = amax / (6 * 448)).
std::vector<double> unquantised_layer(const Layer& L, const Inputs& in, double& amax_x, double& amax_mid) {
  const LayerCase& c = L.c;
  const int E = c.experts, H = c.hidden, I = c.inter, vec = scale_block_size(c.format);
  const reference::DualActivation act{c.activation == MoeEpilogue::silu ? reference::Activation::silu
                                                                       : reference::Activation::swigluoai};
  std::vector<std::vector<float>> w13dq(E), w2dq(E);
  for (int e = 0; e < E; ++e) {
    w13dq[e].resize(std::size_t{2} * I * H), w2dq[e].resize(static_cast<std::size_t>(H) * I);
    formats::dequantize(c.format, ScaleLayout::linear, L.w13.w.data() + std::size_t{2} * e * I * (H / 2), 2 * I, H, H / 2,
                        L.w13.scales_linear.data() + std::size_t{2} * e * I * (H / vec), w13dq[e].data());
    formats::dequantize(c.format, ScaleLayout::linear, L.w2.w.data() + static_cast<std::size_t>(e) * H * (I / 2), H, I,
                        I / 2, L.w2.scales_linear.data() + static_cast<std::size_t>(e) * H * (I / vec), w2dq[e].data());
  }
  const bool inter = c.gate_up == GateUpLayout::interleaved;
  std::vector<double> out(static_cast<std::size_t>(in.tokens) * H, 0.0), mid(I), x(H);
  amax_x = amax_mid = 0;
  for (int t = 0; t < in.tokens; ++t) {
    for (int h = 0; h < H; ++h)
      x[h] = bf16_value(in.hidden[static_cast<std::size_t>(t) * in.ld_hidden + h]), amax_x = std::max(amax_x, std::fabs(x[h]));
    for (int j = 0; j < c.topk; ++j) {
      const long long e = in.ids[static_cast<std::size_t>(t) * c.topk + j];
      if (e < 0 || e >= E) continue;
      for (int i = 0; i < I; ++i) {
        const float* gw = w13dq[e].data() + static_cast<std::size_t>(inter ? 2 * i : i) * H;
        const float* uw = w13dq[e].data() + static_cast<std::size_t>(inter ? 2 * i + 1 : I + i) * H;
        double g = 0, u = 0;
        for (int h = 0; h < H; ++h) g += x[h] * gw[h], u += x[h] * uw[h];
        mid[i] = reference::activate(act, L.a13[e] * g, L.a13_up[e] * u);
        amax_mid = std::max(amax_mid, std::fabs(mid[i]));
      }
      for (int h = 0; h < H; ++h) {
        double y = 0;
        for (int i = 0; i < I; ++i) y += mid[i] * w2dq[e][static_cast<std::size_t>(h) * I + i];
        out[static_cast<std::size_t>(t) * H + h] += in.weights[static_cast<std::size_t>(t) * c.topk + j] * L.a2[e] * y;
      }
    }
  }
  return out;
}

double relative_l2(const LayerCase& c, const Inputs& in, const std::vector<std::uint8_t>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (int t = 0; t < in.tokens; ++t)
    for (int h = 0; h < c.hidden; ++h) {
      std::uint16_t bits;
      std::memcpy(&bits, got.data() + RunBuffers::kGuard + (static_cast<std::size_t>(t) * in.ld_out + h) * 2, 2);
      const double v = reference::bf16_bits_to_double(bits), e = want[static_cast<std::size_t>(t) * c.hidden + h];
      num += (v - e) * (v - e), den += e * e;
    }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

// Realistic data (normal hidden states, all 16 nibbles in w13, scales over several binades, the
// NVFP4 global scales calibrated as ModelOpt does): GEMM1 is no longer exact, so the intermediate
// may differ from the composition by a bf16 ulp and a quantisation step may round the other way.
// The layer must stay within a relative L2 error of 2^-6 of the composition, and (a loose sanity
// bound on the quantisation error itself) 0.25 of the unquantised float64 layer; both are printed.
TEST(MoeLayerRealistic, CloseToTheCompositionAndTheUnquantisedLayer) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  for (auto [f, a] : {std::pair{Format::nvfp4, MoeActivation::fp4}, std::pair{Format::mxfp4, MoeActivation::fp4},
                      std::pair{Format::mxfp4, MoeActivation::bf16}}) {
    LayerCase c;
    c.format = f, c.act = a, c.experts = 16, c.topk = 4, c.hidden = 512, c.inter = 256, c.max_tokens = 64, c.seed = 9300;
    c.w13_values = Values::full;
    std::mt19937_64 rng(c.seed + 5);
    Inputs in = make_inputs(c, rng, 64, Route::random);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& h : in.hidden) h = reference::float_to_bf16_bits(nd(rng));
    double amax_x = 0, amax_mid = 0;
    const std::vector<double> unquantised = unquantised_layer(*make_layer(c), in, amax_x, amax_mid);
    if (f == Format::nvfp4) c.a1 = static_cast<float>(amax_x / (6 * 448)), c.a2 = static_cast<float>(amax_mid / (6 * 448));
    const auto L = make_layer(c);  // the same weights (the same seed), calibrated global scales
    RunBuffers b(c, c.max_tokens, c.hidden, c.hidden, rng);
    cudaStream_t s = nullptr;
    FP4GEMM_TEST_CUDA(cudaStreamCreate(&s));
    b.upload(c, in, s);
    L->layer->run(b.args(c, in), s);
    const std::vector<std::uint8_t> got = b.download(s);
    const Expected x = reference_layer(*L, in);
    const double rel = relative_l2(c, in, got, x.value), rel_u = relative_l2(c, in, got, unquantised);
    std::cout << "[ layer    ] " << c.describe() << ": relative L2 error vs the quantised composition " << rel
              << ", vs the unquantised float64 layer " << rel_u << "\n";
    EXPECT_LT(rel, 1.0 / 64) << c.describe();
    EXPECT_LT(rel_u, 0.25) << c.describe();
    FP4GEMM_TEST_CUDA(cudaStreamDestroy(s));
  }
}

// README.md's "Use it in an MoE model" snippet, as written there (keep the two in sync), on
// zero-filled device buffers: it must compile, plan, run and check; the output must be written
// (finite: zero weights give zeros).
TEST(MoeLayerReadme, ExampleRuns) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  const int E = 128, H = 2048, I = 768, T = 5;
  DeviceBuffer b_w13(std::size_t{E} * 2 * I * H / 2), b_w13s(std::size_t{E} * 2 * I * H / 16),
      b_w2(std::size_t{E} * H * I / 2), b_w2s(std::size_t{E} * H * I / 16), b_a(8 * E), b_x(2 * T * H),
      b_ids(4 * T * 8), b_wt(4 * T * 8), b_out(2 * T * H);
  FP4GEMM_TEST_CUDA(cudaMemset(b_w13s.get(), 0, std::size_t{E} * 2 * I * H / 16));
  FP4GEMM_TEST_CUDA(cudaMemset(b_w2s.get(), 0, std::size_t{E} * H * I / 16));
  FP4GEMM_TEST_CUDA(cudaMemset(b_w13.get(), 0, std::size_t{E} * 2 * I * H / 2));
  FP4GEMM_TEST_CUDA(cudaMemset(b_w2.get(), 0, std::size_t{E} * H * I / 2));
  FP4GEMM_TEST_CUDA(cudaMemset(b_x.get(), 0, 2 * T * H));
  FP4GEMM_TEST_CUDA(cudaMemset(b_out.get(), 0xFF, 2 * T * H));
  std::vector<int> ids(T * 8);
  for (int i = 0; i < T * 8; ++i) ids[i] = (i * 37) % E;
  FP4GEMM_TEST_CUDA(cudaMemcpy(b_ids.get(), ids.data(), 4 * ids.size(), cudaMemcpyHostToDevice));
  const std::vector<float> ones(2 * E, 1.0f), wts(T * 8, 0.125f);
  FP4GEMM_TEST_CUDA(cudaMemcpy(b_a.get(), ones.data(), 8 * E, cudaMemcpyHostToDevice));
  FP4GEMM_TEST_CUDA(cudaMemcpy(b_wt.get(), wts.data(), 4 * wts.size(), cudaMemcpyHostToDevice));
  const void *d_w13 = b_w13.get(), *d_w13_scales = b_w13s.get(), *d_w2 = b_w2.get(), *d_w2_scales = b_w2s.get();
  const auto* d_w13_scale2 = reinterpret_cast<const float*>(b_a.get());
  const auto* d_w2_scale2 = d_w13_scale2 + E;
  const float w13_input_scale = 0.01f, w2_input_scale = 0.02f;
  const void *d_x = b_x.get(), *d_ids = b_ids.get(), *d_weights = b_wt.get();
  void* d_out = b_out.get();
  cudaStream_t stream = nullptr;
  // ---- the snippet ----
  fp4gemm::MoeLayerWeights w{.experts = 128, .hidden = 2048, .inter = 768, .w13 = d_w13,
                             .w13_scales = d_w13_scales, .w2 = d_w2, .w2_scales = d_w2_scales,
                             .w13_alpha = d_w13_scale2, .w2_alpha = d_w2_scale2};
  fp4gemm::MoeLayerOptions o;              // nvfp4 W4A4, silu, stacked w13, blocked scales
  o.a1_scale = w13_input_scale, o.a2_scale = w2_input_scale;
  o.max_tokens = 4096, o.topk = 8;         // sizes the workspace (layer.device_bytes())
  const fp4gemm::MoeLayer layer(w, o);
  layer.run({.hidden = d_x /* bf16 [T, H] */, .topk_ids = d_ids /* int32 [T, 8] */,
             .topk_weights = d_weights /* f32 [T, 8] */, .tokens = T, .out = d_out /* bf16 [T, H] */},
            stream);
  layer.check(stream);                     // when convenient: synchronises, throws on bad routing data
  // ---- end ----
  std::vector<std::uint16_t> out(T * H);
  FP4GEMM_TEST_CUDA(cudaMemcpy(out.data(), d_out, 2 * out.size(), cudaMemcpyDeviceToHost));
  for (std::uint16_t v : out) ASSERT_EQ(v & 0x7FFF, 0) << "output not written (or not zero)";
  EXPECT_GT(layer.device_bytes(), std::size_t{0});
  std::cout << "[ layer    ] " << layer.describe() << "\n";
}

TEST(MoeLayerArgs, BadArgumentsNamed) {
  if (!layer_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE layer needs H100/H200";
  LayerCase c;
  const auto L = make_layer(c);
  MoeLayerArgs a;
  a.tokens = c.max_tokens + 1;
  try {
    L->layer->run(a);
    ADD_FAILURE() << "tokens past max_tokens accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "tokens");
  }
  // Per-expert alphas that are not device memory: named at plan time.
  MoeLayerWeights w;
  w.experts = c.experts, w.hidden = c.hidden, w.inter = c.inter;
  w.w13 = L->d_w13->get(), w.w13_scales = L->d_s13->get(), w.w2 = L->d_w2->get(), w.w2_scales = L->d_s2->get();
  static float host_alpha[64];
  w.w2_alpha = host_alpha;
  MoeLayerOptions o;
  o.max_tokens = 8, o.topk = 2;
  try {
    MoeLayer bad(w, o);
    ADD_FAILURE() << "host alphas accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "weights.w2_alpha");
  }
  // Weights too small for the shape: the GEMM's check, named as the layer's field.
  DeviceBuffer tiny(64);
  w.w2_alpha = nullptr, w.w2 = tiny.get();
  try {
    MoeLayer bad(w, o);
    ADD_FAILURE() << "a 64-byte w2 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "weights.w2");
  }
}

}  // namespace
}  // namespace fp4gemm::test
