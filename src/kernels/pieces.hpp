// The repack of expert weights into WeightLayout::pieces (kernels/pieces.cu); the checks and the public entry points
// are host/pieces.cpp. Internal.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp4gemm::detail {

// Which rows a piece's lane pairs: plain weights (rows 16b + g and 16b + g + 8), or a GLU's w13 whose 16-row block b
// is gate(8b + g) and up(8b + g) with the gate / up rows stacked (gate i, up inter + i) or interleaved (2i, 2i + 1).
enum class PieceRows { plain, gate_up_stacked, gate_up_interleaved };

// w: [experts, rows, k / 2] contiguous; out: experts x (rows / 16) x ceil(k / 128) x 1 KB. Arguments checked.
// nvfp4: each word's bits in the NVFP4 (f16) kernels' decode order, else the MXFP4 (bf16) kernels' (device/dequant.cuh,
// pieces_word_bits_for).
cudaError_t launch_pack_pieces(const std::uint8_t* w, std::uint8_t* out, int experts, int rows, int k, PieceRows kind,
                               bool nvfp4, cudaStream_t stream);

}  // namespace fp4gemm::detail
