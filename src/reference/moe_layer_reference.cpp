// reference::moe_layer: the expert layer on the host, composed of the library's own exact steps
// (formats::quantize, reference::moe_gemm) in the device's order and roundings.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/reference.hpp"

namespace fp4gemm::reference {

void moe_layer(const MoeLayerHostProblem& p, int threads) {
  const int E = p.experts, H = p.hidden, I = p.inter, T = p.tokens, k = p.topk, vec = scale_block_size(p.format);
  if (T == 0) return;
  const std::int64_t n = std::int64_t{T} * k;
  // 1. The stable sort by expert (ids outside [0, E) own no row).
  std::vector<int> offsets(E + 1, 0), gather, row_of(n, -1);
  std::vector<std::vector<std::int64_t>> by_expert(E);
  for (std::int64_t i = 0; i < n; ++i)
    if (p.topk_ids[i] >= 0 && p.topk_ids[i] < E) by_expert[p.topk_ids[i]].push_back(i);
  for (int e = 0; e < E; ++e) {
    offsets[e] = static_cast<int>(gather.size());
    for (std::int64_t i : by_expert[e]) row_of[i] = static_cast<int>(gather.size()), gather.push_back(static_cast<int>(i / k));
  }
  offsets[E] = static_cast<int>(gather.size());
  const int rows = offsets[E];
  std::vector<float> alpha1(E, 1.0f), alpha1_up(E, 1.0f), alpha2(E, 1.0f);
  const float a1 = p.bf16_activations ? 1.0f : p.a1_scale, a2 = p.bf16_activations ? 1.0f : p.a2_scale;
  for (int e = 0; e < E; ++e) {
    const float g = p.w13_alpha ? p.w13_alpha[e] : 1.0f;
    alpha1[e] = g * a1;
    alpha1_up[e] = (p.w13_alpha_up ? p.w13_alpha_up[e] : g) * a1;
    alpha2[e] = (p.w2_alpha ? p.w2_alpha[e] : 1.0f) * a2;
  }
  // 2. The tokens as GEMM1 reads them.
  MoeHostProblem g1;
  std::vector<std::uint8_t> xp, xs;
  std::vector<std::uint16_t> xb;
  if (!p.bf16_activations && p.x_packed != nullptr) {
    g1.a = p.x_packed, g1.lda = H / 2, g1.a_scales = p.x_scales;
  } else if (!p.bf16_activations) {
    std::vector<float> xf(static_cast<std::size_t>(T) * H);
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h)
        xf[static_cast<std::size_t>(t) * H + h] = static_cast<float>(bf16_bits_to_double(p.x[t * p.ld_x + h]));
    xp.resize(static_cast<std::size_t>(T) * H / 2), xs.resize(static_cast<std::size_t>(T) * (H / vec));
    formats::quantize(p.format, xf.data(), T, H, H, xp.data(), xs.data(), a1);
    g1.a = xp.data(), g1.lda = H / 2, g1.a_scales = xs.data();
  } else {
    xb.resize(static_cast<std::size_t>(T) * H);
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) xb[static_cast<std::size_t>(t) * H + h] = p.x[t * p.ld_x + h];
    g1.a = reinterpret_cast<const std::uint8_t*>(xb.data()), g1.lda = 2 * std::int64_t{H}, g1.bf16_activations = true;
  }
  // 3. GEMM1 + GLU -> bf16 intermediate.
  std::vector<std::uint16_t> inter(static_cast<std::size_t>(std::max(rows, 1)) * I, 0);
  g1.experts = E, g1.n = I, g1.k = H, g1.format = p.format, g1.a_rows = T;
  g1.w = p.w13, g1.ldw = H / 2, g1.w_expert_stride = std::int64_t{2} * I * (H / 2);
  g1.w_scales = p.w13_scales, g1.w_layout = ScaleLayout::linear, g1.w_scale_expert_stride = std::int64_t{2} * I * (H / vec);
  g1.alpha = alpha1.data(), g1.alpha_up = alpha1_up.data();
  g1.offsets = offsets.data(), g1.gather = gather.data(), g1.c = inter.data(), g1.ldc = I, g1.out_type = OutType::bf16;
  g1.glu = &p.act, g1.gate_up = p.gate_up, g1.glu_fp32 = true, g1.bias = p.w13_bias;
  if (rows > 0) moe_gemm(g1, threads);
  // 4. The intermediate as GEMM2 reads it; 5. GEMM2 -> bf16.
  MoeHostProblem g2;
  std::vector<std::uint8_t> ip, is;
  if (!p.bf16_activations && rows > 0) {
    std::vector<float> f(static_cast<std::size_t>(rows) * I);
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(bf16_bits_to_double(inter[i]));
    ip.resize(f.size() / 2), is.resize(f.size() / vec);
    formats::quantize(p.format, f.data(), rows, I, I, ip.data(), is.data(), a2);
    g2.a = ip.data(), g2.lda = I / 2, g2.a_scales = is.data();
  } else {
    g2.a = reinterpret_cast<const std::uint8_t*>(inter.data()), g2.lda = 2 * std::int64_t{I};
    g2.bf16_activations = p.bf16_activations;
  }
  std::vector<std::uint16_t> y(static_cast<std::size_t>(std::max(rows, 1)) * H, 0);
  g2.experts = E, g2.n = H, g2.k = I, g2.format = p.format, g2.a_rows = rows;
  g2.w = p.w2, g2.ldw = I / 2, g2.w_expert_stride = std::int64_t{H} * (I / 2);
  g2.w_scales = p.w2_scales, g2.w_layout = ScaleLayout::linear, g2.w_scale_expert_stride = std::int64_t{H} * (I / vec);
  g2.alpha = alpha2.data(), g2.offsets = offsets.data(), g2.c = y.data(), g2.ldc = H, g2.out_type = OutType::bf16;
  if (rows > 0) moe_gemm(g2, threads);
  // 6. The combine, over rows in (token, slot) order.
  std::vector<std::uint16_t> y_pairs(static_cast<std::size_t>(n) * H, 0);
  for (std::int64_t i = 0; i < n; ++i)
    if (row_of[i] >= 0)
      std::copy_n(y.begin() + static_cast<std::ptrdiff_t>(row_of[i]) * H, H, y_pairs.begin() + i * H);
  moe_combine(y_pairs.data(), H, p.topk_weights, p.topk_ids, T, k, E, H, p.out, p.ld_out, p.w2_bias);
}

void moe_combine(const std::uint16_t* y, std::int64_t ld_y, const float* weights, const std::int64_t* ids, int tokens,
                 int k, int experts, int hidden, std::uint16_t* out, std::int64_t ld_out, const float* bias) {
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < hidden; ++h) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        const std::int64_t i = std::int64_t{t} * k + j;
        if (ids[i] < 0 || ids[i] >= experts) continue;
        float v = static_cast<float>(bf16_bits_to_double(y[i * ld_y + h]));
        if (bias != nullptr) v += bias[ids[i] * hidden + h];  // (FP32)
        acc = std::fma(weights[i], v, acc);
      }
      out[t * ld_out + h] = float_to_bf16_bits(acc);
    }
}

}  // namespace fp4gemm::reference
