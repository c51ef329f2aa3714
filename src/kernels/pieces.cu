// Expert weights into WeightLayout::pieces (fp4gemm/moe.hpp): one thread per 16-byte lane slot of a piece.
#include "kernels/pieces.hpp"

#include "device/dequant.cuh"

#include <algorithm>

namespace fp4gemm::detail {

namespace {

// Piece (e, b, kb) is [32 lanes][16 B]; lane (g, c) = 4g + c holds bytes 8c..8c+7 of k-block kb of row r0 (its first
// 8 bytes) and of row r1, zeros past the row's k / 2 bytes (the last 128-wide chunk's second k-block, where k % 128 is
// 32 or 64; rows are 16-byte multiples, so an 8-byte slice is all in or all out).
__global__ void pack_pieces_kernel(const std::uint8_t* __restrict__ w, uint4* __restrict__ out, long long slots,
                                   int blocks, int kblocks2, int row_bytes, int inter, PieceRows kind, bool nvfp4) {
  for (long long t = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; t < slots;
       t += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(t % 32), g = lane / 4, c = lane % 4;
    const long long piece = t / 32;
    const int kb = static_cast<int>(piece % kblocks2);
    const long long eb = piece / kblocks2;
    const int b = static_cast<int>(eb % blocks);
    const long long e = eb / blocks;
    int r0, r1;
    if (kind == PieceRows::plain) {
      r0 = 16 * b + g, r1 = r0 + 8;
    } else {
      const int i = 8 * b + g;
      r0 = kind == PieceRows::gate_up_interleaved ? 2 * i : i;
      r1 = kind == PieceRows::gate_up_interleaved ? 2 * i + 1 : inter + i;
    }
    const int byte = 32 * kb + 8 * c;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (byte < row_bytes) {
      const std::uint8_t* we = w + e * (16LL * blocks) * row_bytes;
      const uint2 a = *reinterpret_cast<const uint2*>(we + static_cast<long long>(r0) * row_bytes + byte);
      const uint2 h = *reinterpret_cast<const uint2*>(we + static_cast<long long>(r1) * row_bytes + byte);
      // each word's bits in the order its format's kernels decode in 9 operations (dequant.cuh, pieces_word_bits_for)
      v = make_uint4(pieces_word_bits_for(nvfp4, a.x), pieces_word_bits_for(nvfp4, a.y),
                     pieces_word_bits_for(nvfp4, h.x), pieces_word_bits_for(nvfp4, h.y));
    }
    out[t] = v;
  }
}

}  // namespace

cudaError_t launch_pack_pieces(const std::uint8_t* w, std::uint8_t* out, int experts, int rows, int k, PieceRows kind,
                               bool nvfp4, cudaStream_t stream) {
  const int blocks = rows / 16, kblocks2 = 2 * ((k + 127) / 128);
  const long long slots = static_cast<long long>(experts) * blocks * kblocks2 * 32;
  const int grid = static_cast<int>(std::min<long long>((slots + 255) / 256, 4096));
  pack_pieces_kernel<<<grid, 256, 0, stream>>>(w, reinterpret_cast<uint4*>(out), slots, blocks, kblocks2, k / 2,
                                               rows / 2, kind, nvfp4);
  return cudaGetLastError();
}

}  // namespace fp4gemm::detail
