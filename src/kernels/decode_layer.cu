// The MoE layer's decode path (decode_layer.hpp): two kernels assembled from the parts in
// device/decode_stream.cuh -- a warp streams 16 weight rows of one expert over a K part -- with
// two epilogues: GLU into the intermediate rows, and the top-k combine into the output.
#include <cuda_bf16.h>

#include <algorithm>

#include "device/decode_stream.cuh"
#include "device/glu.hpp"
#include "device/ptx/ptx.cuh"
#include "formats/scale_layout.hpp"
#include "kernels/decode_layer.hpp"

namespace fp4gemm::detail {

namespace {

constexpr int kThreads = 32 * kDecodeWarps;

// ---- routing, read by every CTA (T * k <= 64 pairs) ------------------------------------------
// A "slot" is one expert's weights streamed once for all the tokens that chose it: the pairs of
// key (expert e, occurrence o) -- o counts e among the token's earlier picks, so a token that lists
// an expert twice is in two slots and a slot holds each token at most once (a slot's mma columns
// are the tokens themselves). Slots are numbered in the order of their first pair.
struct Routing {
  int slots;
  int id[kDecodeMaxPairs];                     // the pair's expert, -1 outside [0, E) or past T
  int expert[kDecodeMaxPairs];                 // per slot
  signed char pick[kDecodeMaxPairs][kDecodeMaxTokens];  // per slot and token: j, or -1
  int lead[kDecodeMaxPairs];
};

__device__ __forceinline__ int run_tokens(const DecodeLayerArgs& a) {
  return a.token_count != nullptr ? min(a.tokens, max(*a.token_count, 0)) : a.tokens;
}

// Fills r (all threads of the CTA call it; it ends with a barrier).
__device__ void read_routing(const DecodeLayerArgs& a, int T, Routing& r) {
  const int k = a.topk, P = T * k, p = threadIdx.x;
  if (p < kDecodeMaxPairs) {
    int e = -1;
    if (p < P) {
      const long long v = a.ids_int64 ? static_cast<const long long*>(a.ids)[p]
                                      : static_cast<long long>(static_cast<const int*>(a.ids)[p]);
      if (v >= 0 && v < a.experts) e = static_cast<int>(v);
    }
    r.id[p] = e;
  }
  __syncthreads();
  // token t's pick of key (e, o): its j, or -1
  auto match = [&](int t, int e, int o) {
    for (int q = 0; q < k; ++q)
      if (r.id[t * k + q] == e && o-- == 0) return q;
    return -1;
  };
  int e = -1, occ = 0, lead = 0;
  if (p < P && r.id[p] >= 0) {
    e = r.id[p];
    const int t = p / k, j = p % k;
    for (int q = 0; q < j; ++q) occ += r.id[t * k + q] == e;
    lead = 1;
    for (int u = 0; u < t && lead; ++u) lead = match(u, e, occ) < 0;
  }
  if (p < kDecodeMaxPairs) r.lead[p] = lead;
  __syncthreads();
  if (lead) {
    int s = 0;
    for (int u = 0; u < p; ++u) s += r.lead[u];
    r.expert[s] = e;
    for (int t = 0; t < kDecodeMaxTokens; ++t) r.pick[s][t] = static_cast<signed char>(t < T ? match(t, e, occ) : -1);
  }
  if (threadIdx.x == 0) {
    int n = 0;
    for (int u = 0; u < P; ++u) n += r.lead[u];
    r.slots = n;
  }
  __syncthreads();
}

// ---- kernel 1: gate/up of (slot, 8 intermediates) units, then the GLU ------------------------
// A unit's A rows: gate (g) and up (g + 8) of intermediate 8 ig + g, so a lane holds the gate and
// up of the same (intermediate, token) and the GLU needs no exchange.
__global__ void __launch_bounds__(kThreads, 4) decode_gate_up(const DecodeLayerArgs a) {
  __shared__ Routing r;
  const int T = run_tokens(a), k = a.topk;
  read_routing(a, T, r);
  const int H = a.hidden, I = a.inter, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int groups = I / 8;
  const decode::Operand op{H, H / 32, a.blocked_scales, a.zero_row};
  const std::int64_t w_stride = std::int64_t{2} * I * (H / 2);
  auto unit_of = [&](int u) {
    const int s = u / groups, i = (u % groups) * 8 + g, e = r.expert[s];
    const int gate = a.interleaved ? 2 * i : i, up = a.interleaved ? 2 * i + 1 : I + i;
    const std::uint8_t* w = a.w13 + e * w_stride;
    const int j = r.pick[s][g];
    return decode::Unit{w + std::int64_t{gate} * (H / 2), w + std::int64_t{up} * (H / 2),
                        a.s13 + e * a.s13_stride, j >= 0 ? a.x + g * a.ldx : a.zero_row, gate, up};
  };
  const GluParams act = glu_params(a.glu_kind, a.glu_alpha, a.glu_limit);
  auto finish = [&](int u, float(&v)[4]) {  // v: (gate, token 2c), (gate, 2c + 1), (up, 2c), (up, 2c + 1)
    const int s = u / groups, i = (u % groups) * 8 + g, e = r.expert[s];
    const float ag = a.alpha13 != nullptr ? a.alpha13[e] : a.alpha13_s;
    const float au = a.alpha13_up != nullptr ? a.alpha13_up[e] : a.alpha13 != nullptr ? ag : a.alpha13_up_s;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int t = 2 * c + h, j = r.pick[s][t];
      if (j >= 0) a.inter_rows[std::int64_t{t * k + j} * I + i] = __float2bfloat16_rn(glu_apply(ag * v[h], au * v[2 + h], act));
    }
  };
  const int W = gridDim.x * kDecodeWarps, w = blockIdx.x * kDecodeWarps + threadIdx.x / 32;
  decode::stream_units(r.slots * groups, (H + 63) / 64, op, unit_of, finish, a.records1, a.count1, w, W);
  ptx::launch_dependents();
}

// ---- kernel 2: down rows of (16 rows, slot) units, then the top-k combine ---------------------
// A unit's y (alpha times the FP32 sum, rounded to bf16: the layer's y) goes to y_rows per pair;
// the last unit of a 16-row block to finish combines those rows for every token: pairs in j order,
// one FP32 fma each, as the layer's combine.
__global__ void __launch_bounds__(kThreads, 4) decode_down_combine(const DecodeLayerArgs a) {
  __shared__ Routing r;
  const int T = run_tokens(a), k = a.topk;
  read_routing(a, T, r);
  const int H = a.hidden, I = a.inter, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int S = r.slots, blocks = H / 16;
  if (S == 0) {  // no pair routed anywhere: every present token's row is zero
    for (long long q = blockIdx.x * static_cast<long long>(kThreads) + threadIdx.x; q < static_cast<long long>(T) * H;
         q += static_cast<long long>(gridDim.x) * kThreads)
      a.out[(q / H) * a.ldo + q % H] = __float2bfloat16_rn(0.0f);
    return;
  }
  ptx::wait_prerequisites();  // kernel 1's intermediate rows
  const decode::Operand op{I, I / 32, a.blocked_scales, a.zero_row};
  const std::int64_t w_stride = std::int64_t{H} * (I / 2);
  auto unit_of = [&](int u) {
    const int s = u % S, rg = (u / S) * 16 + g, rh = rg + 8, e = r.expert[s];
    const std::uint8_t* w = a.w2 + e * w_stride;
    const int j = r.pick[s][g];
    return decode::Unit{w + std::int64_t{rg} * (I / 2), w + std::int64_t{rh} * (I / 2),
                        a.s2 + e * a.s2_stride, j >= 0 ? a.inter_rows + std::int64_t{g * k + j} * I : a.zero_row, rg, rh};
  };
  auto finish = [&](int u, float(&v)[4]) {
    const int s = u % S, b = u / S, rg = b * 16 + g, rh = rg + 8, e = r.expert[s];
    const float alpha = a.alpha2 != nullptr ? a.alpha2[e] : a.alpha2_s;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int t = 2 * c + h, j = r.pick[s][t];
      if (j >= 0) {
        __nv_bfloat16* y = a.y_rows + std::int64_t{t * k + j} * H;
        y[rg] = __float2bfloat16_rn(alpha * v[h]);
        y[rh] = __float2bfloat16_rn(alpha * v[2 + h]);
      }
    }
    if (!decode::last_arrival(a.count_rows + b, static_cast<unsigned>(S))) return;  // the block's last unit
    const int row = b * 16 + lane % 16;
    for (int t = lane / 16; t < T; t += 2) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        const int pair = t * k + j;
        if (r.id[pair] < 0) continue;
        const float yv = __bfloat162float(__ldcg(a.y_rows + std::int64_t{pair} * H + row));
        const float wt = a.weights_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(a.weights)[pair])
                                        : static_cast<const float*>(a.weights)[pair];
        acc = fmaf(wt, yv, acc);
      }
      a.out[t * a.ldo + row] = __float2bfloat16_rn(acc);
    }
  };
  const int W = gridDim.x * kDecodeWarps, w = blockIdx.x * kDecodeWarps + threadIdx.x / 32;
  decode::stream_units(blocks * S, (I + 63) / 64, op, unit_of, finish, a.records2, a.count2, w, W);
}

int resident(const void* kernel, int multiprocessors) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0) != cudaSuccess || per_sm < 1) per_sm = 1;
  return per_sm * multiprocessors;
}

}  // namespace

DecodeShape decode_shape(int multiprocessors) {
  DecodeShape s;
  s.ctas1 = resident(reinterpret_cast<const void*>(decode_gate_up), multiprocessors);
  s.ctas2 = resident(reinterpret_cast<const void*>(decode_down_combine), multiprocessors);
  return s;
}

void launch_decode_layer(const DecodeLayerArgs& a, cudaStream_t s) {
  decode_gate_up<<<a.shape.ctas1, kThreads, 0, s>>>(a);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(a.shape.ctas2);
  cfg.blockDim = dim3(kThreads);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, decode_down_combine, a);
}

}  // namespace fp4gemm::detail
