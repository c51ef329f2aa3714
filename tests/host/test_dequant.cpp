// Host tier: the kernel's exact e2m1 -> 16-bit bit tricks (device/dequant.cuh) and the K orders
// they imply. The activation pre-pass and the weight dequantisation must agree on which source
// element feeds which wgmma k slot; a mismatch gives wrong sums that no bit-exact GPU test on
// random data would localise as clearly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "device/dequant.cuh"
#include "device/group_params.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/reference.hpp"

namespace fp4gemm::detail {
namespace {

using formats::e2m1_to_float;
using reference::bf16_bits_to_double;
using reference::half_bits_to_double;

std::uint32_t random_word(std::mt19937& rng) { return static_cast<std::uint32_t>(rng()); }

TEST(Dequant, QuadF16PatternsAreExactE2m1InTheDocumentedOrder) {
  // e2m1_quad_f16_raw: register r holds nibbles (b, b + 2), b = 0, 1, 4, 5; value = e2m1 * 2^-14,
  // the sign kept on zero (0x8000 for -0).
  constexpr int kBase[4] = {0, 1, 4, 5};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20000; ++trial) {
    // Every nibble value in every position within the first 16 x 8 trials, random afterwards.
    std::uint32_t w = random_word(rng);
    if (trial < 128) {
      const int pos = trial % 8, nib = trial / 8;
      w = (w & ~(0xFu << (4 * pos))) | (static_cast<std::uint32_t>(nib) << (4 * pos));
    }
    std::uint32_t out[4];
    e2m1_quad_f16_raw(w, out);
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h) {
        const int e = kBase[r] + 2 * h;
        const unsigned nib = (w >> (4 * e)) & 0xFu;
        const auto bits = static_cast<std::uint16_t>(out[r] >> (16 * h));
        ASSERT_EQ(half_bits_to_double(bits), std::ldexp(e2m1_to_float(nib), -14))
            << "word " << std::hex << w << " register " << r;
        ASSERT_EQ(bits >> 15, nib >> 3) << "sign of nibble " << e;
        ASSERT_EQ(bits & 0x71FF, 0) << "stray bits outside S000EEM0 00000000";
      }
  }
}

TEST(Dequant, QuadBf16PatternsAreExactE2m1InTheDocumentedOrder) {
  // e2m1_quad_bf16_raw: register p holds nibbles (p, p + 4); value = e2m1 * 2^-126, the sign kept
  // on zero, no bit outside sign / low exponent / top mantissa (the multiply must not carry).
  // Every value of every nibble pair against every other nibble's value in turn, then random words.
  std::mt19937 rng(11);
  std::vector<std::uint32_t> words;
  for (int p = 0; p < 4; ++p)
    for (unsigned a = 0; a < 16; ++a)
      for (unsigned b = 0; b < 16; ++b)
        for (unsigned other = 0; other < 16; ++other) {
          std::uint32_t w = 0x11111111u * other;
          w = (w & ~(0xFu << (4 * p)) & ~(0xFu << (4 * (p + 4)))) | (a << (4 * p)) | (b << (4 * (p + 4)));
          words.push_back(w);
        }
  for (int trial = 0; trial < 100000; ++trial) words.push_back(random_word(rng));
  for (const std::uint32_t w : words) {
    std::uint32_t out[4];
    e2m1_quad_bf16_raw(w, out);
    for (int p = 0; p < 4; ++p)
      for (int h = 0; h < 2; ++h) {
        const unsigned nib = (w >> (4 * (p + 4 * h))) & 0xFu;
        const auto bits = static_cast<std::uint16_t>(out[p] >> (16 * h));
        ASSERT_EQ(bf16_bits_to_double(bits), std::ldexp(static_cast<double>(e2m1_to_float(nib)), -126))
            << "word " << std::hex << w << " register " << p;
        ASSERT_EQ(bits >> 15, nib >> 3) << "sign of nibble " << p + 4 * h;
        ASSERT_EQ(bits & 0x7E3F, 0) << "stray bits outside S0000000 EEM00000 in word " << std::hex << w;
      }
  }
}

// wgmma k position kk = 16 * step + slot; thread t of a quad holds slots {2t, 2t+1} (register
// `step`) and {2t+8, 2t+9} (register 4 + step), low half first; its source elements are
// 16t..16t+15, word x = elements 0..7, word y = 8..15.
template <typename SourceFn, typename RegisterFn>
void expect_order_matches_registers(SourceFn source, RegisterFn element_of_register) {
  std::set<int> seen;
  for (int kk = 0; kk < 64; ++kk) {
    const int src = source(kk);
    ASSERT_GE(src, 0);
    ASSERT_LT(src, 64);
    seen.insert(src);
    const int step = kk / 16, slot = kk % 16, t = (slot % 8) / 2, h = slot % 2, upper = slot / 8;
    EXPECT_EQ(src, 16 * t + element_of_register(4 * upper + step, h)) << "k position " << kk;
  }
  EXPECT_EQ(seen.size(), 64u) << "not a permutation of the k-block";
}

// Weights in pieces: pack_pieces permutes each word's bits (pieces_word_bits for MXFP4, pieces_word_bits_nv for NVFP4)
// so that the kernels decode it in 9 operations; the registers must be the rows' decode of the original word
// (e2m1_quad_bf16_raw / e2m1_quad_f16_raw) -- every code in every slot, every value of either 16-bit half, the
// all-zero and all-one words, random words -- and the permutation must be one (every bit lands on its own position).
template <class Raw, class Pieces, class Bits>
void expect_pieces_decode_raw(Raw raw, Pieces pieces, Bits bits) {
  auto same = [&](std::uint32_t w) {
    std::uint32_t a[4], b[4];
    raw(w, a);
    pieces(bits(w), b);
    for (int p = 0; p < 4; ++p)
      if (a[p] != b[p]) return false;
    return true;
  };
  for (int j = 0; j < 8; ++j)
    for (std::uint32_t c = 0; c < 16; ++c) EXPECT_TRUE(same(c << (4 * j))) << "code " << c << " in slot " << j;
  for (std::uint32_t v = 0; v < 0x10000u; ++v) {
    ASSERT_TRUE(same(v)) << std::hex << "word 0x" << v;
    ASSERT_TRUE(same(v << 16)) << std::hex << "word 0x" << (v << 16);
  }
  EXPECT_TRUE(same(0xFFFFFFFFu));
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t w = static_cast<std::uint32_t>(rng());
    ASSERT_TRUE(same(w)) << std::hex << "word 0x" << w;
  }
  std::uint32_t seen = 0;
  for (int b = 0; b < 32; ++b) {
    const std::uint32_t s = bits(1u << b);
    EXPECT_EQ(__builtin_popcount(s), 1) << "bit " << b;
    seen |= s;
  }
  EXPECT_EQ(seen, 0xFFFFFFFFu);
}

TEST(Dequant, PiecesWordBitsDecodeToTheRawRegisters) {
  using namespace fp4gemm::detail;
  expect_pieces_decode_raw([](std::uint32_t w, std::uint32_t (&o)[4]) { e2m1_quad_bf16_raw(w, o); },
                           [](std::uint32_t s, std::uint32_t (&o)[4]) { e2m1_quad_bf16_pieces(s, o); },
                           [](std::uint32_t w) { return pieces_word_bits(w); });
}

TEST(Dequant, NvPiecesWordBitsDecodeToTheRawRegisters) {
  using namespace fp4gemm::detail;
  expect_pieces_decode_raw([](std::uint32_t w, std::uint32_t (&o)[4]) { e2m1_quad_f16_raw(w, o); },
                           [](std::uint32_t s, std::uint32_t (&o)[4]) { e2m1_quad_f16_pieces(s, o); },
                           [](std::uint32_t w) { return pieces_word_bits_nv(w); });
  for (int nv = 0; nv < 2; ++nv)  // pack_pieces' choice by format
    EXPECT_EQ(pieces_word_bits_for(nv == 1, 0x12345678u), nv ? pieces_word_bits_nv(0x12345678u) : pieces_word_bits(0x12345678u));
}

TEST(Dequant, Nvfp4KOrderMatchesTheQuadRegisters) {
  constexpr int kBase[4] = {0, 1, 4, 5};
  expect_order_matches_registers(wgmma_k_source_nvfp4, [&](int reg, int h) {
    return 8 * (reg / 4) + kBase[reg % 4] + 2 * h;  // dequant_row: out[i] from q.x, out[4 + i] from q.y
  });
}

TEST(Dequant, Mxfp4KOrderMatchesThePairRegisters) {
  expect_order_matches_registers(wgmma_k_source_mxfp4, [&](int reg, int h) {
    return 8 * (reg / 4) + reg % 4 + 4 * h;  // e2m1_quad_bf16_raw out[p]: nibbles p and p + 4
  });
}

TEST(Dequant, BytePermHostFallbackMatchesPrmt) {
  // Hand-worked: result byte i = byte sel_i of y:x.
  EXPECT_EQ(byte_perm(0x44332211u, 0x88776655u, 0x3210u), 0x44332211u);
  EXPECT_EQ(byte_perm(0x44332211u, 0x88776655u, 0x7654u), 0x88776655u);
  EXPECT_EQ(byte_perm(0x44332211u, 0u, 0x1404u), 0x22001100u);
  EXPECT_EQ(byte_perm(0x44332211u, 0u, 0x3424u), 0x44003300u);
}

// The W4A16 layer's hand-over (kGluKOrder): GEMM1's GLU epilogue stages column j = warp * 8 + q of
// a warpgroup's 32 at glu_k_order_slot; drain thread cp reads slots 2cp, 2cp + 1 and stores them at
// col0 + 2cp + glu_k_order_shift and + 1. Every output column must land at the k position whose
// source (wgmma_k_source_mxfp4, the order GEMM2's pre-pass writes) is that column, within its own
// 64-column block, each position exactly once.
TEST(Dequant, GluKOrderHandOverWritesThePrepassOrder) {
  for (int block = 0; block < 3; ++block) {
    std::set<int> positions;
    for (int u = 0; u < 2; ++u) {
      const int col0 = 64 * block + 32 * u;
      std::set<int> slots;
      for (int warp = 0; warp < 4; ++warp)
        for (int q = 0; q < 8; ++q) {
          const int j = warp * 8 + q, slot = glu_k_order_slot(warp, q);
          ASSERT_GE(slot, 0);
          ASSERT_LT(slot, 32);
          slots.insert(slot);
          const int cp = slot / 2, h = slot % 2;
          const int pos = col0 + 2 * cp + glu_k_order_shift(col0, cp) + h;
          ASSERT_EQ(pos / 64, block) << "column " << col0 + j << " leaves its k-block";
          EXPECT_EQ(64 * block + wgmma_k_source_mxfp4(pos % 64), col0 + j) << "warp " << warp << " q " << q;
          positions.insert(pos);
        }
      EXPECT_EQ(slots.size(), 32u) << "two columns share a staging slot";
    }
    EXPECT_EQ(positions.size(), 64u) << "block " << block << ": a k position written twice";
  }
}

// The decode path's range check on MXFP4 pieces (decode_stream.cuh): a chunk takes the one-multiply decode only if
// no code of any lane is > 128. Every code in every position, against the obvious per-code test; the case a 32-bit max
// of the two registers hid (row g's low code 200 behind row h's larger high code).
TEST(Dequant, PackedMxCodeCheckSeesEveryCodeAbove128) {
  auto pack = [](unsigned lo, unsigned hi) { return static_cast<std::uint32_t>(lo | hi << 16); };
  auto naive = [](const unsigned (&c)[4]) { return c[0] > 128 || c[1] > 128 || c[2] > 128 || c[3] > 128; };
  EXPECT_TRUE(mx_packed_codes_above_128(pack(200, 100), pack(120, 110)));
  EXPECT_TRUE(mx_packed_codes_above_128(pack(129, 127), pack(127, 128)));
  EXPECT_FALSE(mx_packed_codes_above_128(pack(128, 128), pack(128, 128)));
  EXPECT_FALSE(mx_packed_codes_above_128(0, 0));
  EXPECT_TRUE(mx_packed_codes_above_128(pack(255, 255), pack(255, 255)));
  // every code 0..255 in each position, the other three from values around the boundary
  constexpr unsigned kOthers[] = {0, 1, 100, 127, 128, 129, 130, 200, 255};
  for (int pos = 0; pos < 4; ++pos)
    for (unsigned v = 0; v < 256; ++v)
      for (unsigned a : kOthers)
        for (unsigned b : kOthers)
          for (unsigned d : kOthers) {
            unsigned c[4] = {a, b, d, a};
            c[pos] = v;
            const bool want = naive(c);
            ASSERT_EQ(mx_packed_codes_above_128(pack(c[0], c[1]), pack(c[2], c[3])), want)
                << "codes " << c[0] << " " << c[1] << " " << c[2] << " " << c[3];
          }
  std::mt19937 rng(11);
  std::uniform_int_distribution<unsigned> near(120, 136), any(0, 255);
  for (int trial = 0; trial < 200000; ++trial) {
    unsigned c[4];
    for (unsigned& x : c) x = trial % 2 ? near(rng) : any(rng);
    ASSERT_EQ(mx_packed_codes_above_128(pack(c[0], c[1]), pack(c[2], c[3])), naive(c))
        << "codes " << c[0] << " " << c[1] << " " << c[2] << " " << c[3];
  }
}

}  // namespace
}  // namespace fp4gemm::detail
