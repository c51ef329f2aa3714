// fp4gemm::Tuning: measurement and test knobs of a plan. Defaults are the production choices.
#pragma once

#include <optional>

namespace fp4gemm {

// What a plan of the fused kernel may be told instead of deciding for itself: the tools' A/B
// measurements and the tests that force a path set these; nothing else should. A
// default-constructed Tuning is exactly what every user gets. An unset std::optional means "the
// plan decides" (its value is then chosen per problem); a plain field holds today's production
// value. Read once, when a Plan is built (Options::tuning); the reference backend ignores it, but
// out-of-range values are rejected for every backend with fp4gemm::Error naming the field
// ("options.tuning.class_round", ...). The `fp4gemm` CLI fills one from FP4GEMM_* environment
// variables (named beside each field; docs/DESIGN.md "Measurement knobs"); the library itself
// reads no environment.
struct Tuning {
  // ---- schedule (the host-built stream-K work list, docs/DESIGN.md "Schedule") ----------------
  // Cost model of one k-block of a tile: fixed + per_token * tokens, for 128-row (wide) and
  // 256-row (narrow) tiles; finite, >= 0. Unset: the fitted defaults (165 + 1.28 t, 365 + 1.7 t).
  std::optional<double> wide_fixed, wide_per_token;      // FP4GEMM_WIDE_COST=F[:T]
  std::optional<double> narrow_fixed, narrow_per_token;  // FP4GEMM_NARROW_COST=F[:T]
  std::optional<double> epilogue_cost;  // owner's epilogue per output element (0.05); FP4GEMM_EPILOGUE_COST
  std::optional<int> class_round;       // width classes rounded up to a multiple: 1, 2, 4 or 8 (1); FP4GEMM_CLASS_ROUND
  // true: stream-K always; false: whole tiles only; unset: the smaller estimated makespan.
  std::optional<bool> split_k;           // FP4GEMM_SPLIT_K=0|1
  // Estimate's charge per FP32 partial element of a split-K hand-off, writer and owner side
  // (1/16); owner_cost then overrides the owner side. Finite, >= 0.
  std::optional<double> handoff_cost;    // FP4GEMM_HANDOFF_COST
  std::optional<double> owner_cost;      // FP4GEMM_OWNER_COST
  // Dual (GLU) plans: split tiles of one writer share the epilogue between the owner and the
  // writer (true, the default); false: the owner finishes every split tile. H200, 5 rounds on
  // GPU MODE's four shapes: -18 % on 256x4096x7168, -0.4..-4 % on the others (on an H100: -9 %
  // there, +2..+4 % elsewhere). FP4GEMM_SHARE_EPILOGUE=0|1
  bool share_epilogue = true;
  std::optional<int> tile_tokens;        // token tiles at most this wide (8..256), no width search; FP4GEMM_TILE_TOKENS
  std::optional<int> narrow_rows;        // weight rows of the <= 128-token tiles: 128 or 256; FP4GEMM_NARROW_ROWS
  std::optional<int> max_ctas;           // at most this many CTAs (>= 1; default: one per SM); FP4GEMM_MAX_CTAS
  // MoE plans only: the device schedule splits a 16- (32-) token class's partial last round by
  // stream-K where that saves at least this many k-blocks per CTA (whole numbers 0..100000;
  // default 16 / 12, moe_tiles.hpp moe_split_min_gain). FP4GEMM_MOE_SPLIT_GAIN=G16[:G32]
  std::optional<double> moe_split_gain16, moe_split_gain32;

  // ---- kernel resources, pre-pass and launch -------------------------------------------------
  // Cap on the ring of pipeline stages in KiB (>= 0; clamped to [two stages, all the shared
  // memory]); unset: all of it.
  std::optional<int> ring_kb;            // FP4GEMM_RING_KB
  // The TMA-store epilogue (16-bit outputs, wherever N % 8 == 0) on / off; unset: on with >= 4
  // pieces per CTA.
  std::optional<bool> tma_store;         // FP4GEMM_TMA_STORE=0|1
  bool convert_scales = false;  // linear weight scales always take the per-run conversion to blocked; FP4GEMM_CONVERT_SCALES=1
  // Knobs that only re-measured a past decision (the pre-pass's inline group table and metadata
  // prefetch, weights issued before the pre-pass wait, programmatic dependent launch, the
  // hand-off-aware stream-K packing forced off, the MoE CTAs' early k-blocks) are gone: their
  // measurements are in docs/perf-history.md, and the CLI refuses their variables by name.
};

}  // namespace fp4gemm
