// Internal: the MoE layer owns two MoeGemm plans that nothing else can reach, and serialises its
// own runs (one RunSerializer for the whole layer). Its runs enqueue the GEMMs through here, without
// each GEMM's own event wait / record: inside the layer's cached CUDA graph those would be four
// external event nodes, which make every replay cost 11 us of host time instead of 4.5
// (measured on an H200 host with bench/micro/graph_launch.cu).
#pragma once
#include <cuda_runtime_api.h>

#include "fp4gemm/moe.hpp"

namespace fp4gemm::detail {

struct MoePreparedInput;  // host/kernel_registry.hpp

struct MoeGemmOwner {
  // MoeGemm::run without the device guard and the run serialiser: the caller holds both. The
  // arguments are validated as run() validates them.
  static void enqueue(const MoeGemm& gemm, const MoeArgs& args, cudaStream_t stream);
  // MoeGemm::reload_scales' work on `stream` (not captured) without its serialisation: the caller's.
  static void reload(const MoeGemm& gemm, cudaStream_t stream);
  // The layer's W4A16 hand-over (host/kernel_registry.hpp, MoeKernelPlan): GEMM1's output written
  // in the k order of GEMM2's workspace, and GEMM2 run on it without its pre-pass.
  static bool write_k_order_output(MoeGemm& gemm);
  static MoePreparedInput prepared_input(const MoeGemm& gemm);  // rows null: the plan has none
  static void enqueue_prepared(const MoeGemm& gemm, const MoeArgs& args, cudaStream_t stream);
  // MoeKernelPlan::let_dependents_start: the layer launches every kernel after its GEMMs itself.
  static void let_dependents_start(MoeGemm& gemm);
};

}  // namespace fp4gemm::detail
