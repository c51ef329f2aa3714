// Exact e2m1 -> f16/bf16 dequantisation and the K order that makes it cheap (host + device).
//
// NOTES: a consumer thread owns 16 consecutive K elements (8 bytes) of two weight rows per
// 64-wide k-block and turns each 32-bit word of 8 nibbles into 4 half2 registers. The pairing of
// nibbles into registers is chosen for the cheapest bit manipulation (NVFP4: e2m1_quad_f16_raw,
// 3.75 operations per register; MXFP4: e2m1_quad_bf16_raw, nibbles (p, p+4) so that both halves
// need the same shift). It fixes which K element feeds which wgmma k slot; the activation
// pre-pass writes the activations in the same order (`wgmma_k_source_*`), so the dot product is
// unchanged.
#pragma once

#include <cstdint>

#include "formats/host_device.hpp"

namespace fp4gemm::detail {

// Within a 64-wide k-block: the source element (0..63) that feeds wgmma k position kk (0..63).
// kk = 16*step + slot; in the m64nNk16 register-A fragment, thread t of a quad holds slots
// {2t, 2t+1} (register a0/a1) and {2t+8, 2t+9} (a2/a3), i.e. source elements 16t..16t+15.
// MXFP4 (bf16) pairs nibbles p and p+4 of a word per register (e2m1_quad_bf16_raw, out[p]): register
// step s holds elements (s, s+4) (+8 for the upper slots).
FP4GEMM_HD int wgmma_k_source_mxfp4(int kk) {
  const int step = kk / 16, slot = kk % 16;
  const int t = (slot % 8) / 2, h = slot % 2, upper = slot / 8;
  return 16 * t + step + 4 * h + 8 * upper;
}
// NVFP4 (f16) builds the registers with e2m1_quad_f16_raw: step s holds elements (b, b+2) with
// b = 0, 1, 4, 5 for s = 0..3 (+8 for the upper slots).
FP4GEMM_HD int wgmma_k_source_nvfp4(int kk) {
  const int step = kk / 16, slot = kk % 16;
  const int t = (slot % 8) / 2, h = slot % 2, upper = slot / 8;
  return 16 * t + 8 * upper + 4 * (step / 2) + step % 2 + 2 * h;
}

// MXFP4 on pieces, the decode path's per-chunk range check: a lane's two rows' scale codes, two per
// register (bits 0-7 and 16-23, the other bits zero). True iff any of the four codes is > 128 (the
// one-multiply decode covers codes <= 128): code + 127 reaches bit 8 exactly when code >= 129, and no
// half carries into the next (code + 127 < 2^9). (A 32-bit max of the two registers, split afterwards,
// compared the high codes first and hid a low code > 128 behind the other row's larger high code: that
// code's multiplier, built for <= 128, was +Inf or negative.)
FP4GEMM_HD bool mx_packed_codes_above_128(std::uint32_t cg, std::uint32_t ch) {
  return (((cg + 0x007F007Fu) | (ch + 0x007F007Fu)) & 0x01000100u) != 0u;
}

// __byte_perm(x, y, s): result byte i = byte (s >> 4i) & 7 of the 8-byte value y:x.
FP4GEMM_HD std::uint32_t byte_perm(std::uint32_t x, std::uint32_t y, std::uint32_t sel) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, sel);
#else
  const std::uint64_t pool = (static_cast<std::uint64_t>(y) << 32) | x;
  std::uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<std::uint32_t>((pool >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
#endif
}

// f16 bit patterns of value e2m1 * 2^-14 (subnormal for 0.5, exactly as in e2m1; the sign kept
// on zero) for all 8 nibbles e0..e7 of `w` (e0 in bits 0-3): out[0] = (e0, e2), out[1] = (e1, e3), out[2] = (e4, e6), out[3] = (e5, e7), low half
// first. Each nibble becomes the f16's high byte S000EEM0 (sign, low exponent bits, top mantissa
// bit; the low byte is zero): 3 operations make that byte for the four high nibbles, 4 for the
// four low ones, and one PRMT per register spreads two bytes into place -- 15 operations per 4
// registers with the scale multiply, against 19 for pairing nibbles p and p+4 by shifts and masks
// (the pairing that bf16 below keeps).
FP4GEMM_HD void e2m1_quad_f16_raw(std::uint32_t w, std::uint32_t (&out)[4]) {
  const std::uint32_t hi = (w & 0x80808080u) | ((w >> 3) & 0x0E0E0E0Eu);
  const std::uint32_t lo = ((w << 4) & 0x80808080u) | ((w << 1) & 0x0E0E0E0Eu);
  out[0] = byte_perm(lo, 0u, 0x1404u);  // [0, lo byte 0, 0, lo byte 1]
  out[1] = byte_perm(hi, 0u, 0x1404u);
  out[2] = byte_perm(lo, 0u, 0x3424u);
  out[3] = byte_perm(hi, 0u, 0x3424u);
}

// bf16x2 bit patterns of nibbles p and p+4 of `w` (out[p], p = 0..3, low half first) with the
// e2m1 bits placed in the low exponent / top mantissa bits: raw value = e2m1 * 2^-126 (subnormal
// for 0.5, exactly as e2m1 itself is). bf16's e2m1 bits straddle a byte, so the byte/PRMT scheme
// of e2m1_quad_f16_raw does not apply. One multiply places both pieces of a nibble isolated at
// bits 0-3: x * (2^6 + 2^12) puts its e2m1 bits at 6-8 and its sign at 15 (the two copies, at
// 6-9 and 12-15, do not overlap, so there are no carries), and the nibble p + 4 at bits 16-19
// lands 16 bits higher. Pairs (1, 5) sit 4 bits up (times 2^2 + 2^8), pairs (2, 6) and (3, 7)
// reuse both after one shift by 8: 13 operations per word, against 16 for a shift per piece
// (mask(w << 6 - 4p) | mask(w << 12 - 4p) per register; counted in the SASS).
FP4GEMM_HD void e2m1_quad_bf16_raw(std::uint32_t w, std::uint32_t (&out)[4]) {
  constexpr std::uint32_t kPlaced = 0x81C081C0u;  // sign bit 15, e2m1 bits 6-8, per half
  const std::uint32_t v = w >> 8;
  out[0] = ((w & 0x000F000Fu) * 0x1040u) & kPlaced;
  out[1] = ((w & 0x00F000F0u) * 0x0104u) & kPlaced;
  out[2] = ((v & 0x000F000Fu) * 0x1040u) & kPlaced;
  out[3] = ((v & 0x00F000F0u) * 0x0104u) & kPlaced;
}

// MXFP4 weights in pieces (WeightLayout::pieces) store each 32-bit word with its bits permuted at pack time, so that
// e2m1_quad_bf16_pieces(pieces_word_bits(w)) == e2m1_quad_bf16_raw(w) in 9 operations instead of 13 (checked in
// bench/micro/repack_9op_check.py and tests/host/test_dequant.cpp). Register p holds nibbles p (low half) and p + 4 (high half);
// the bf16 target bits of a nibble are {6, 7, 8} (mantissa bit, exponent bits) and 15 (sign). Registers 0, 1, 2 are
// stored at the targets shifted down by 0, 3 and 6 bits (one shift and one mask each); the target sets tile a 16-bit
// half three times, not four, so register 3 takes the bits left over, {14, 10, 11, 13} (mantissa, E0, E1, sign), and
// costs a right shift by 8, a mask, one multiply that places three copies and a mask.
// Bit positions of nibble p's bits (mantissa, E0, E1, sign) in the low half of a stored word; nibble p + 4 sits 16
// higher.
FP4GEMM_HD int pieces_bit_position(int p, int bit) {
  constexpr int kPos[4][4] = {{6, 7, 8, 15}, {3, 4, 5, 12}, {0, 1, 2, 9}, {14, 10, 11, 13}};
  return kPos[p][bit];
}
FP4GEMM_HD std::uint32_t pieces_word_bits(std::uint32_t w) {
  std::uint32_t s = 0;
  for (int j = 0; j < 8; ++j)
    for (int b = 0; b < 4; ++b) s |= ((w >> (4 * j + b)) & 1u) << (pieces_bit_position(j & 3, b) + 16 * (j >> 2));
  return s;
}
FP4GEMM_HD void e2m1_quad_bf16_pieces(std::uint32_t s, std::uint32_t (&out)[4]) {
  constexpr std::uint32_t kPlaced = 0x81C081C0u;  // sign bit 15, e2m1 bits 6-8, per half
  constexpr std::uint32_t kThird = 0x006C006Cu;   // register 3's bits after the shift by 8: 6, 2, 3, 5 per half
  out[0] = s & kPlaced;
  out[1] = (s << 3) & kPlaced;
  out[2] = (s << 6) & kPlaced;
  // mantissa 6 -> 6 (x 1), E0 2 -> 7 and E1 3 -> 8 (x 2^5), sign 5 -> 15 (x 2^10): the copies meet no set bit
  out[3] = (((s >> 8) & kThird) * (1u + (1u << 5) + (1u << 10))) & kPlaced;
}

// NVFP4 weights in pieces: the same idea for e2m1_quad_f16_raw's registers (register 0 = nibbles (0, 2), 1 = (1, 3),
// 2 = (4, 6), 3 = (5, 7), low half first), whose f16 target bits per half are {9, 10, 11} (mantissa bit, exponent
// bits) and 15 (sign). Register 0 is stored at its targets, register 1 three bits lower (a shift and a mask);
// registers 2 and 3 take the bits left over, {3, 4, 5, 13} and {0, 1, 2, 14}, each placed by one multiply between two
// masks: x (2^6 + 2^2) and x (2^9 + 2^1) put every copy of every kept bit (both halves) on a distinct bit, so there
// are no carries, and the targets receive exactly the nibble's bits: 9 operations per word instead of 11.
FP4GEMM_HD int pieces_bit_position_nv(int p, int bit) {
  constexpr int kPos[4][4] = {{9, 10, 11, 15}, {6, 7, 8, 12}, {3, 4, 5, 13}, {0, 1, 2, 14}};
  return kPos[p][bit];
}
FP4GEMM_HD std::uint32_t pieces_word_bits_nv(std::uint32_t w) {
  std::uint32_t s = 0;
  for (int j = 0; j < 8; ++j) {  // nibble j -> register (j & 1) + 2 (j >> 2), half (j >> 1) & 1
    const int p = (j & 1) + 2 * (j >> 2), half = (j >> 1) & 1;
    for (int b = 0; b < 4; ++b) s |= ((w >> (4 * j + b)) & 1u) << (pieces_bit_position_nv(p, b) + 16 * half);
  }
  return s;
}
FP4GEMM_HD void e2m1_quad_f16_pieces(std::uint32_t s, std::uint32_t (&out)[4]) {
  constexpr std::uint32_t kPlaced = 0x8E008E00u;  // sign bit 15, e2m1 bits 9-11, per half
  out[0] = s & kPlaced;
  out[1] = (s << 3) & kPlaced;
  out[2] = ((s & 0x20382038u) * ((1u << 6) + (1u << 2))) & kPlaced;
  out[3] = ((s & 0x40074007u) * ((1u << 9) + (1u << 1))) & kPlaced;
}

// The word bits pack_pieces stores for a format's kernels (pieces_word_bits / pieces_word_bits_nv).
FP4GEMM_HD std::uint32_t pieces_word_bits_for(bool nvfp4, std::uint32_t w) {
  return nvfp4 ? pieces_word_bits_nv(w) : pieces_word_bits(w);
}

// A word's four 16-bit pair registers as a kernel decodes it: f16 (NVFP4) or bf16 (MXFP4), from the rows' bits or from
// pieces' (bits permuted at pack time).
template <bool kF16, bool kPieces>
FP4GEMM_HD void e2m1_quad(std::uint32_t w, std::uint32_t (&out)[4]) {
  if constexpr (kF16 && kPieces) e2m1_quad_f16_pieces(w, out);
  else if constexpr (kF16) e2m1_quad_f16_raw(w, out);
  else if constexpr (kPieces) e2m1_quad_bf16_pieces(w, out);
  else e2m1_quad_bf16_raw(w, out);
}

// NVFP4 weights run in f16: dq * 2^-7 = raw * (scale * 2^7) is one exact multiply (scale * 2^7
// <= 57344 fits f16; every dq * 2^-7 is a multiple of 2^-17, inside f16's subnormal grid), and
// the epilogue multiplies the FP32 accumulator by 2^7.
constexpr float kNvfp4AccScale = 128.0f;

}  // namespace fp4gemm::detail
