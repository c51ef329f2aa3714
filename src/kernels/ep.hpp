// The expert-parallel exchange's kernels (fp4gemm::EpExchange, host/ep_exchange.cpp: the buffer
// layout, validation and the class): counting, sending rows into the peers' buffers, and the
// combine over the rows the peers' layers left. Launches enqueue only; each returns the launch's
// error. Internal.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "fp4gemm/ep.hpp"

namespace fp4gemm::detail {

inline constexpr int kEpMaxWorld = 8, kEpMaxTopk = 32;

// Byte offsets of the regions of every rank's exchange buffer (host/ep_exchange.cpp layout_of).
struct EpLayout {
  std::size_t counts = 0, ids = 0, rows = 0, packed = 0, scales = 0, y = 0, row_of = 0, total = 0;
};

// One rank's exchange as its launches see it.
struct EpKernelArgs {
  char* const* peers = nullptr;  // device table [kEpMaxWorld]: every rank's buffer base as mapped here
  EpLayout at;
  int world = 0, rank = 0, experts = 0, topk = 0, hidden = 0;
  int capacity = 0;  // received rows: world * max_tokens
  int multiprocessors = 0;
  EpRows rows = EpRows::bf16;
  float gs = 1.0f;            // NVFP4 rows: the global scale
  int* slot = nullptr;        // [max_tokens * k] phase 1's places
  int2* pair_row = nullptr;   // [max_tokens * k] phase 2's (rank, received row) of each pair
};

// Phase 1 (one block): places and this rank's counts in every destination's buffer.
cudaError_t launch_ep_count(const EpKernelArgs& e, const void* ids, bool ids_int64, int tokens, cudaStream_t stream);
// Phase 2: every token's row once to each rank holding one of its experts, quantised for FP4 rows.
cudaError_t launch_ep_send(const EpKernelArgs& e, const void* x, long long ldx, const void* ids, bool ids_int64,
                           int tokens, cudaStream_t stream);
// Phase 4: each token's pairs' rows, found through their ranks' row_of, summed in slot order.
cudaError_t launch_ep_combine(const EpKernelArgs& e, const void* ids, bool ids_int64, const void* weights,
                              bool weights_bf16, int tokens, void* out, long long ld_out, cudaStream_t stream);

}  // namespace fp4gemm::detail
