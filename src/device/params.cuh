// The fused kernel's parameters: the work list it reads (device/schedule.hpp), the producers'
// per-piece record, and FusedParams (written by a plan: host-built for the pointer-array plan,
// device-built for the MoE plan).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "device/group_params.hpp"
#include "device/kernel_config.cuh"
#include "device/schedule.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail::sm90 {

// The producer warps' view of one work piece. The plan writes one for each CTA's first piece:
// one 64-byte load instead of the chain piece -> tile -> group -> scale pointers / weight map,
// whose dependent misses set the time of the ring's first fill (small shapes 1.5-3 % faster on
// H200). Later pieces are read through the chain (records for every piece cost dense1 2.6 %).
struct ProducerPiece {
  const CUtensorMap* wmap;   // the tile's weight map (box of its `loaded` halves)
  const std::uint8_t* sblk;  // the group's blocked weight scales, or null
  const std::uint8_t* slin;  // the group's linear weight scales when the producer gathers them, or null
  int row0, act_row0;        // the tile's first weight row and first activation-workspace row
  int kb_begin, kb_end;      // the piece's k-blocks
  int rows, cols;            // the group's N and weight-scale columns (K / 16 or K / 32)
  int loaded;                // halves loaded: the class's, or 1 where the second half lies past N
  int pad_[3];
};
static_assert(sizeof(ProducerPiece) == 64, "one 64-byte record per piece");

// One piece's record, built alike by the plan (each CTA's first piece) and by the producers (the
// later ones). `group_maps` are the group's two weight maps (box 128 / 256 rows); halves of a tile
// wholly past N are not loaded (their accumulators are never stored; a user's blocked scales have
// only ceil(N/128) atom rows), and the map's box is the `loaded` halves.
__host__ __device__ __forceinline__ ProducerPiece make_producer_piece(const WorkPiece& piece, const TileDesc& tile,
                                                                      int n, int cols, int halves,
                                                                      const CUtensorMap* group_maps,
                                                                      const std::uint8_t* sblk,
                                                                      const std::uint8_t* slin) {
  const int loaded = tile.row0 + 128 < n ? halves : 1;
  return ProducerPiece{group_maps + (loaded - 1), sblk, slin, tile.row0, tile.act_row0, piece.kb_begin, piece.kb_end,
                       n, cols, loaded, {0, 0, 0}};
}

// The MoE plan's device schedule (device/moe_schedule.cuh): what every CTA needs to cut the run's
// routing into its tiles. experts == 0: the plan built the work list on the host.
struct MoeScheduleParams {
  const int* offsets;  // contiguous: [E + 1]
  const int* counts;   // masked: [E]
  int experts, capacity, masked;
  int n, cols, kblocks, narrow_rows, num_ctas, max_tiles;
  // != 0: the 16- and 32-token classes run stream-K where moe_sk_tiles says (moe_tiles.hpp: all
  // their tiles at most 3/4 of a tile per CTA, or a partial last round after full ones);
  // FusedParams::partials then has one slot of kMoeSlotFloats per CTA.
  int stream_k;
  float wide_fixed, wide_per_token, narrow_fixed, narrow_per_token;
  TileDesc* tiles;  // = FusedParams::tiles / pieces / first_pieces, writable
  WorkPiece* pieces;
  ProducerPiece* first_pieces;
  const CUtensorMap* weight_maps;  // kMoeMapsPerExpert (kernel_config.cuh) per expert
  const std::uint8_t* scales;      // blocked, expert e at scales + e * scale_stride
  std::int64_t scale_stride;
  void* c;  // the run's output (every expert writes its rows of one C)
  std::int64_t ldc;
  int* error;  // MoeErrorWord
  // GLU epilogue (MoeEpilogue: 0 none, 1 silu, 2 swigluoai). The weights' 2I rows are read through
  // 4-D maps (k bytes, 8 rows, gate|up, 8-row blocks) so that every 16 rows of a tile are 8 gate
  // rows and their 8 up rows: a thread's accumulators of rows r and r + 8 are the gate and up of
  // output column (row0 + 16 b) / 2 + r % 8 (the plan's scale copy has the same row order).
  int glu;
  int glu_swap;    // the map's first half holds the up rows (separate weights, w_up below w)
  int glu_width;   // I, the output columns
  float swiglu_alpha, swiglu_limit;
  const float* alpha_up_device;  // per expert, or null (then alpha_up)
  float alpha_up;
  // MoeWeights::bias: [E, 2 glu_width] in the caller's row order (glu_bias_interleaved: gate 2i,
  // up 2i + 1; else gate i, up glu_width + i), bf16 or (glu_bias_f32) float; null: none.
  const void* glu_bias;
  int glu_bias_f32, glu_bias_interleaved;
  // MoeOptions::quantize_output: 0 none, else the Format + 1 (1 nvfp4, 2 mxfp4); `c` / `ldc` are
  // then the packed FP4 rows (ldc in bytes) and q_scales the linear scales [rows, glu_width / vec].
  int q_format;
  float q_gs;
  std::uint8_t* q_scales;
  // The least k-blocks per CTA that splitting the 16- / 32-token class's partial last round must
  // save (moe_sk_tiles; moe_split_min_gain unless options.tuning.moe_split_gain16 / 32 say otherwise).
  // (two fields, not an array: a run-time index into the kernel's parameters made ptxas copy them
  // to the stack, 40 -> 168 bytes of frame and spills in the mainloops)
  int split_gain16, split_gain32;
  int weight_pieces;  // the weights in k-block pieces (WeightLayout::pieces): the *_pieces kernels, 3-D weight maps
};

// FusedParams::small_mx_scales, also the kernel's template parameter kSmallMx: two multiplies,
// every code; one multiply, the plan's own scale copy (scanned once, fixed after planning); one
// multiply, the user's blocked scales (scanned at plan time, read at every run: the consumers check
// each code they read and report a code > 128 in the error word, kMoeBadScaleCode).
constexpr int kMxTwo = 0, kMxOne = 1, kMxOneChecked = 2;

struct FusedParams {
  const GroupParams* groups;
  const TileDesc* tiles;
  const WorkPiece* pieces;
  const ProducerPiece* first_pieces;  // per CTA: its first piece (CTAs without pieces: unused)
  const int* cta_begin;
  const int* cta_class;            // per CTA: its width class (Schedule::cta_class)
  const CUtensorMap* weight_maps;  // two per group (box 128 / 256 rows; MoE plans: kMoeMapsPerExpert), 64-byte aligned, in global memory
  const CUtensorMap* act_maps;     // per width class n16: the activation workspace, box 16 * n16 rows x 64 k
  // Two per group over C (box 64 n x 64 tokens, 64 n x 8 tokens; 128-byte swizzle) for the
  // TMA-store epilogue of 16-bit outputs, or null (f32 output, or the plan keeps the warps'
  // stores); c_tma[group] = 1 where the group's maps are valid (N a multiple of 8).
  const CUtensorMap* c_maps;
  const std::uint8_t* c_tma;
  const std::uint8_t* const* scale_blocked;  // per group: the weight scales in blocked layout
  // Per group: the user's linear weight scales when the producer gathers them itself (rows of a
  // multiple of 4 bytes), else null (then scale_blocked holds a per-run blocked copy).
  const std::uint8_t* const* scale_linear;
  float* partials;
  int* flags;                      // one hand-off counter per tile, 0 between runs
  int ring_bytes;  // dynamic shared memory for the ring (the CTA sizes its stages to its width class)
  int narrow_rows;  // weight rows of the <= 128-token tiles (Schedule::narrow_rows: 256 or 128)
  int early_kblocks;  // k-blocks of weights (at most the ring) issued before waiting for the pre-pass
  ScaleLayout layout;
  // How MXFP4 weight scales are decoded (kMxTwo / kMxOne / kMxOneChecked, below): when every
  // scale code the kernel reads is <= 128, 2^(code - 1) is a bf16 power of two, so raw * 2^126 *
  // 2^(code - 127) is the one exact multiply raw * 2^(code - 1), the same rounding (mainloop.cuh,
  // dequant_row).
  int small_mx_scales;
  // 1: every CTA lets the launch after it start at once (griddepcontrol.launch_dependents at its start), so that
  // launch's CTAs take the SMs this grid's CTAs leave and run their prologue beside its tail. Set only where the
  // library launches that next kernel itself, as a programmatic dependent that waits before it reads this grid's
  // output (the expert layer's GEMM1 and GEMM2: MoeKernelPlan::let_dependents_start).
  int trigger_dependents;
  MoeScheduleParams moe;  // experts > 0: the CTAs build the work list from the run's routing
};

}  // namespace fp4gemm::detail::sm90
