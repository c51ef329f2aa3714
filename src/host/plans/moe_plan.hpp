// Host entry point of the sm_90a fused kernel as an MoE kernel (MoeGemm's registry entry).
#pragma once

#include <memory>

#include "host/kernel_registry.hpp"

namespace fp4gemm::detail::sm90 {

// The device-scheduled MoE GEMM on the fused kernel: weight maps, scale copies, workspace and
// grid built once per weight set (throws fp4gemm::Error); enqueue launches the pre-pass and the
// GEMM, whose CTAs cut the run's routing into work themselves (device/moe_schedule.cuh).
std::unique_ptr<MoeKernelPlan> make_fused_moe_plan(const MoeKernelContext& context);

}  // namespace fp4gemm::detail::sm90
