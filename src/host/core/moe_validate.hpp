// Host-side validation of the MoE GEMM (fp4gemm::MoeGemm): the weights and options a plan is
// built from, one run's arguments, and — for host data (the CPU reference path) — the routing the
// device schedule and pre-pass would check at run time. In fp4gemm_core (no CUDA calls), so that
// the Python binding's host (NumPy) path accepts exactly what the device path accepts, with the
// same messages.
#pragma once

#include <cstdint>

#include "fp4gemm/moe.hpp"
#include "fp4gemm/moe_layer.hpp"

namespace fp4gemm::detail {

// The device schedule (device/moe_schedule.cuh) keeps every expert's tiles and per-class prefixes
// in shared memory: up to 512 experts (also fp4gemm::align_routing's limit).
inline constexpr int kMaxMoeExperts = 512;

// Checks `w` and `o` as MoeGemm's constructor does (everything but the device-memory checks) and
// returns `w` with its defaults resolved (ldw = K/2, expert_stride = N * ldw, scale_expert_stride =
// one expert's dense scales in o.scale_layout). Throws fp4gemm::Error naming the field.
MoeWeights validate_moe(const MoeWeights& w, const MoeOptions& o);

// Weight rows per expert in MoeWeights::w: N, or 2N for a GLU's stacked / interleaved gate and
// up (GateUpLayout::separate: N in w and N in w_up).
int moe_weight_rows(const MoeWeights& w, const MoeOptions& o);

// Rows of A and C a plan serves: capacity (contiguous) or experts * capacity (masked).
std::int64_t moe_rows(int experts, const MoeOptions& o);

// Checks one run's host arguments (pointers non-null and aligned, strides, the routing arguments
// the layout takes) as MoeGemm::run does. `w` as returned by validate_moe.
void check_moe_args(const MoeWeights& w, const MoeOptions& o, const MoeArgs& a);

// Routing in host memory (the reference path), checked at once with what the device checks at run
// time and MoeGemm::check() reports: offsets non-decreasing from >= 0 with offsets[E] <= capacity,
// counts in [0, capacity], gather_index[r] in [0, num_tokens) for r < offsets[E]. Throws
// fp4gemm::Error naming expert_offsets / expert_counts / gather_index.
void check_moe_routing(int experts, const MoeOptions& o, const int* offsets, const int* counts, const int* gather,
                       int num_tokens);

// ---- the expert layer (fp4gemm::MoeLayer, moe_layer.hpp) ----
// Checks a layer's weights and options as MoeLayer's constructor does (everything but the device
// memory checks); throws fp4gemm::Error naming the field ("weights.inter", "options.a1_scale", ...).
void validate_moe_layer(const MoeLayerWeights& w, const MoeLayerOptions& o);
// Checks one run's host arguments as MoeLayer::run does.
void check_moe_layer_args(const MoeLayerWeights& w, const MoeLayerOptions& o, const MoeLayerArgs& a);

}  // namespace fp4gemm::detail
