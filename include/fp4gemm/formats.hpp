// Host-side format helpers: e2m1 / E4M3 / UE8M0 codecs, scale layouts, quantise / dequantise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::formats {

// ---- element and scale codecs (exact; see SPEC §1) ------------------------------------------
float e2m1_to_float(std::uint8_t nibble);       // low 4 bits used
std::uint8_t float_to_e2m1(float x);            // round to nearest even, saturate to +-6; NaN -> 0
float e4m3_to_float(std::uint8_t code);         // 0x7F / 0xFF -> NaN
std::uint8_t float_to_e4m3(float x);            // RNE, saturate to +-448, NaN -> 0x7F
float ue8m0_to_float(std::uint8_t code);        // 2^(code-127); 0xFF -> NaN
std::uint8_t float_to_ue8m0(float x);           // smallest power of two >= |x| (x > 0); NaN -> 0xFF
float scale_to_float(Format f, std::uint8_t code);

// Packed rows: element k of a row lives in byte k/2, even k in the low nibble.
std::uint8_t get_nibble(const std::uint8_t* row, std::int64_t k);
void set_nibble(std::uint8_t* row, std::int64_t k, std::uint8_t nibble);

// ---- scale layouts ---------------------------------------------------------------------------
// scale_cols = K / scale_block_size(format).
std::int64_t scale_cols(Format f, std::int64_t k);
std::int64_t padded_rows(std::int64_t rows);          // round up to 128
std::int64_t padded_scale_cols(std::int64_t cols);    // round up to 4
std::size_t linear_scale_bytes(std::int64_t rows, std::int64_t cols);
std::size_t blocked_scale_bytes(std::int64_t rows, std::int64_t cols);
std::size_t scale_bytes(ScaleLayout l, std::int64_t rows, std::int64_t cols);
// Byte offset of scale (r, c) in the blocked layout of a [rows, cols] scale matrix.
std::size_t blocked_offset(std::int64_t r, std::int64_t c, std::int64_t cols);
std::size_t scale_offset(ScaleLayout l, std::int64_t r, std::int64_t c, std::int64_t cols);
// Converters. Padding bytes of the blocked layout are written as 0.
void linear_to_blocked(const std::uint8_t* linear, std::int64_t rows, std::int64_t cols,
                       std::uint8_t* blocked);
void blocked_to_linear(const std::uint8_t* blocked, std::int64_t rows, std::int64_t cols,
                       std::uint8_t* linear);

// ---- quantiser (reference quality, host) -----------------------------------------------------
// x: [rows, k] floats with row stride ldx (elements). Writes packed e2m1 [rows, k/2] (row stride
// k/2 bytes) and linear scales [rows, k/vec]. k must be a multiple of the block size. Per block
// (the rule the GPU quantiser, fp4gemm::quantize_activations, follows bit for bit):
//  - NVFP4, with the per-tensor FP32 global scale gs (> 0, finite; NVIDIA's recipe, ModelOpt's
//    input_scale: a value is e2m1 * S * gs): S = E4M3(fl(fl(amax / 6) / gs)) (FP32 divisions,
//    then round to nearest even E4M3, saturating at 448); each element is x / fl(S * gs) rounded
//    to nearest even e2m1 (the exact quotient's rounding), saturating at 6. With gs = 1 this is
//    E4M3(amax / 6) and x / S.
//  - MXFP4 (OCP MX): S = 2^(floor(log2 amax) - 2) (UE8M0 code clamped to 0..254; amax = 0: code 0,
//    amax = inf: 0xFE); each element x / S rounded to nearest even e2m1, saturating. gs must be 1.
//  - Special values: a block with a NaN gets the NaN scale code (0x7F / 0xFF) and all nibbles 0;
//    S = 0 (NVFP4 blocks below E4M3's smallest subnormal / 2) gives nibbles 0; an infinite element
//    gives +-6 (and the block the largest scale); -0 and negatives rounding to zero keep the sign
//    (nibble 0x8).
void quantize(Format f, const float* x, std::int64_t rows, std::int64_t k, std::int64_t ldx,
              std::uint8_t* packed, std::uint8_t* scales_linear, float global_scale = 1.0f);
// Inverse: packed rows with stride ld (bytes), scales in `layout`; writes [rows, k] floats.
void dequantize(Format f, ScaleLayout layout, const std::uint8_t* packed, std::int64_t rows,
                std::int64_t k, std::int64_t ld, const std::uint8_t* scales, float* out);

}  // namespace fp4gemm::formats
