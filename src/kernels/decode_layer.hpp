// The MoE layer's decode path (W4A16 MXFP4, W4A4 NVFP4 / MXFP4; up to kDecodeMaxTokens tokens): two kernels instead of
// six -- gate/up + GLU for every (active expert, 8 intermediates), then down + the top-k combine
// for every (16 output rows, active expert) -- each a CTA-level stream-K over those units: one CTA
// of kDecodeWarps warps per SM takes a balanced share of whole units and its warps split the
// share's chunks evenly. The routing is read on the device by every CTA (T * k <= 64 pairs); a
// unit split between warps is summed in warp order by its last piece (in shared memory), so the
// result is deterministic run to run. Internal (MoeLayer).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fp4gemm/formats.hpp"

namespace fp4gemm::detail {

inline constexpr int kDecodeMaxTokens = 8;  // token columns of one mma (n8)
inline constexpr int kDecodeMaxPairs = 64;  // T * k
// The wide decode path (past the 8 tokens the narrow kernel 1 stages; W4A16 MXFP4, W4A4): a routing pre-pass numbers the
// slots -- an expert's pairs in pair order, 8 per slot, whose mma columns are those pairs -- and each CTA of kernel 1
// stages the token rows of its own slots; up to kDecodeWideMaxPairs pairs.
inline constexpr int kDecodeWideMaxPairs = 512;
// Experts the wide path's pre-pass holds (a 512-bit pair mask and two counts each in shared memory); the layer accepts
// no more (moe_layer.cpp checks it against kMaxMoeExperts at compile time).
inline constexpr int kDecodeWideMaxExperts = 512;

// The plan-time shape of the decode path: each kernel's grid (as many CTAs as stay resident) and
// dynamic shared memory (the warps' load rings; kernel 1 also the staged tokens).
struct DecodeShape {
  int ctas1 = 0, ctas2 = 0;
  int smem1 = 0, smem2 = 0;
  int ctas_fused = 0;  // the fused kernel's grid (kernel 1's dynamic shared memory): 0 where it cannot run
};
// The wide path's kernels (decode_wide_shape; 0: none); smem1 / smem2 set by the plan (its staged rows + the rings).
// staged1 / staged2: the bytes each kernel can stage in front of its rings (kernel 1 the token rows of its CTA's slots,
// kernel 2 their intermediate rows; whole KB): the device's per-block opt-in shared memory less the kernel's static
// shared memory and the rings.
struct DecodeWideShape {
  int ctas1 = 0, ctas2 = 0, smem1 = 0, smem2 = 0;
  int staged1 = 0, staged2 = 0;
};
// Kernel 1 stages up to kDecodeMaxStagedBytes of tokens (decode tokens x hidden, padded to a chunk, each row 64 bytes
// longer: decode::kStagedRowPad; the pad's 8 x 64 bytes are added so that it lowers no H's token bound).
inline constexpr int kDecodeMaxStagedBytes = 96 * 1024 + kDecodeMaxTokens * 64;
inline constexpr int kDecodeWarps = 16;  // per CTA (one CTA per SM)

struct DecodeLayerArgs {
  // weights (dense per expert) and the activation
  Format format;         // the weights' (and, W4A4, the activations')
  bool fp4_activations;  // W4A4: the tokens and the intermediate quantised (a1_scale, a2_scale)
  float a1_scale, a2_scale;
  const std::uint8_t *w13, *s13, *w2, *s2;
  long long s13_stride, s2_stride;  // bytes per expert of each scale matrix
  int experts, hidden, inter;
  bool blocked_scales, interleaved;
  int glu_kind;
  float glu_alpha, glu_limit;
  const float *alpha13, *alpha13_up, *alpha2;  // per-expert (null: alpha scalars below)
  float alpha13_s, alpha13_up_s, alpha2_s;
  const void *bias13, *bias2;  // MoeLayerWeights::w13_bias / w2_bias, or null
  bool bias_f32;
  // the run
  const __nv_bfloat16* x;
  long long ldx;
  const void* ids;
  bool ids_int64;
  const void* weights;
  bool weights_bf16;
  int tokens, topk;
  const int* token_count;
  __nv_bfloat16* out;
  long long ldo;
  // plan workspace
  __nv_bfloat16* inter_rows;  // [T * k, I] (weight_pieces: [T * k, inter_ld]), pair-major
  __nv_bfloat16* y_rows;      // [T * k, H], pair-major
  __nv_bfloat16* x_deq;       // W4A4: [T, H], the quantised tokens dequantised
  const __nv_bfloat16* zero_row;  // max(H, I) + 128 zeros: the activations of absent tokens
  unsigned* count_rows;       // [H / 16]: units of each 16-row block stored so far, zero between runs
  DecodeShape shape;
  // WeightLayout::pieces (MXFP4 x bf16, NVFP4 x NVFP4): w13 as [E][I / 8][ceil(H / 128)][1 KB] (8 gate rows and their 8 up rows per
  // block), w2 as [E][H / 16][ceil(I / 128)][1 KB]; the intermediate rows then stored in the pieces' k order
  // (decode::pieces_position), inter_ld = I rounded up to 128 (zeros past I). (Last: the rows kernels' parameter
  // offsets stay as they were.)
  bool weight_pieces;
  long long inter_ld;
  // W4A16 (fused): one cooperative kernel, gate/up then down + combine, the CTAs meeting at a grid barrier (a 64-bit
  // arrival counter in the plan's workspace, zero at plan time, G added per run, never reset)
  bool fused;
  unsigned long long* grid_bar;
  // The wide path (W4A16 MXFP4, W4A4): runs of decode tokens < T <= wide_tokens (0: none). wide_ring_offset: kernel 1's rings
  // after its staged rows (a multiple of 1 KB, the plan's most rows: decode_wide_staged_row_bytes each); route: the
  // slots (decode_layer.cu's WideRouting); wide: this launch takes it.
  int wide_tokens;
  DecodeWideShape wide_shape;
  int wide_ring_offset;
  void* route;
  bool wide;
  int wide_ring_offset2;  // kernel 2's rings after its staged intermediate rows (the CTA's slots', 8 per slot)
};
DecodeWideShape decode_wide_shape(Format format, bool blocked_scales, bool pieces, int multiprocessors);
// Bytes of the wide path's routing table (the plan's workspace), of one staged token row, of kernel 1's rings.
std::size_t decode_wide_route_bytes();
int decode_wide_staged_row_bytes(int hidden);
int decode_wide_ring_bytes();
// Whether the wide path has kernels for this format (W4A16 MXFP4; W4A4 NVFP4 and MXFP4).
bool decode_wide_supported(Format format, bool fp4_activations);

int decode_staged_bytes(int tokens, int hidden);
DecodeShape decode_shape(Format format, bool blocked_scales, bool pieces, int multiprocessors, int tokens, int hidden);
void launch_decode_layer(const DecodeLayerArgs& a, cudaStream_t s);
// Whether the fused kernel (W4A16) launches on this device and stream: one launch without tokens (plan time; false where
// the cooperative launch is refused, the error cleared).
bool decode_fused_runs(const DecodeLayerArgs& a, cudaStream_t s);
// A trace build's (cmake -DFP4GEMM_TRACE=ON) phase times of the last decode launch: per kernel and
// phase, p10 / median / p90 / latest over all warps of %globaltimer, in µs from the first warp's
// entry into kernel 1 ("" in other builds).
std::string decode_trace_report();

}  // namespace fp4gemm::detail
