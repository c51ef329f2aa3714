// fp4gemm::pack_pieces / pack_pieces_gate_up (fp4gemm/moe.hpp, WeightLayout::pieces): the checks, then the repack
// (kernels/pieces.cu, through the registry).
#include <cstdint>
#include <string>

#include "fp4gemm/moe.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/moe_validate.hpp"
#include "host/core/validate.hpp"
#include "host/kernel_registry.hpp"  // (kernels/pieces.hpp)

namespace fp4gemm {

const char* to_string(WeightLayout w) { return w == WeightLayout::rows ? "rows" : "pieces"; }

namespace {

void pack(const void* w, void* out, int experts, int rows, int k, detail::PieceRows kind, Format format,
          cudaStream_t stream, const char* what) {
  if (format != Format::mxfp4 && format != Format::nvfp4)
    throw Error("format", -1, "must be Format::mxfp4 or Format::nvfp4 (the format of the plans that will read the pieces)");
  if (experts < 1 || experts > detail::kMaxMoeExperts)
    throw Error("experts", -1, "must be 1.." + std::to_string(detail::kMaxMoeExperts) + " (got " + std::to_string(experts) + ")");
  const std::int64_t piece_bytes = pieces_bytes(rows, k);  // (checks rows and k)
  if (w == nullptr || reinterpret_cast<std::uintptr_t>(w) % 16 != 0)
    throw Error("w", -1, "must be a 16-byte aligned device pointer");
  if (out == nullptr || reinterpret_cast<std::uintptr_t>(out) % 16 != 0)
    throw Error("out", -1, "must be a 16-byte aligned device pointer");
  int device = 0;
  FP4GEMM_CUDA_CHECK(cudaGetDevice(&device), what);
  const std::int64_t in_bytes = std::int64_t{experts} * rows * (k / 2), out_bytes = experts * piece_bytes;
  detail::check_device_buffer("w", -1, w, in_bytes, device, "[experts, rows, k / 2] packed e2m1");
  detail::check_device_buffer("out", -1, out, out_bytes, device, "experts x pieces_bytes(rows, k)");
  const auto a = reinterpret_cast<std::uintptr_t>(w), b = reinterpret_cast<std::uintptr_t>(out);
  if (a < b + static_cast<std::uintptr_t>(out_bytes) && b < a + static_cast<std::uintptr_t>(in_bytes))
    throw Error("out", -1, "must not overlap w (the repack is not in place)");
  FP4GEMM_CUDA_CHECK(detail::launch_pack_pieces(static_cast<const std::uint8_t*>(w), static_cast<std::uint8_t*>(out),
                                                experts, rows, k, kind, format == Format::nvfp4, stream),
                     what);
}

}  // namespace

void pack_pieces(const void* w, void* out, int experts, int rows, int k, Format format, cudaStream_t stream) {
  pack(w, out, experts, rows, k, detail::PieceRows::plain, format, stream, "pack_pieces");
}

void pack_pieces_gate_up(const void* w13, void* out, int experts, int inter, int k, GateUpLayout gate_up, Format format,
                         cudaStream_t stream) {
  if (gate_up != GateUpLayout::stacked && gate_up != GateUpLayout::interleaved)
    throw Error("gate_up", -1, "w13 in pieces pairs gate and up rows of one buffer: stacked or interleaved");
  if (inter < 8 || inter % 8 != 0)
    throw Error("inter", -1, "must be a positive multiple of 8 (a piece holds 8 gate rows and their 8 up rows), got " +
                                 std::to_string(inter));
  if (inter > (1 << 29)) throw Error("inter", -1, "too many rows");
  pack(w13, out, experts, 2 * inter, k,
       gate_up == GateUpLayout::stacked ? detail::PieceRows::gate_up_stacked : detail::PieceRows::gate_up_interleaved,
       format, stream, "pack_pieces_gate_up");
}

}  // namespace fp4gemm
