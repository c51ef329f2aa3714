// The activation pre-pass of the fused kernel: FP4 activations (pointer-array groups, or one routed
// MoE stack with its gather index) dequantised exactly, or bf16 activations reordered, into the
// GEMM's workspace in wgmma K order; and the per-run conversion of linear weight scales that TMA
// cannot read into the blocked layout.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "device/dequant.cuh"
#include "device/prepass_args.hpp"
#include "device/group_params.hpp"
#include "device/ptx/ptx.cuh"
#include "device/moe_error.hpp"
#include "device/trace.cuh"
#include "formats/scale_layout.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::detail::sm90 {

// ---------------------------------------------------------------------------------------------
// Kernel 1: activations -> exact 16-bit values in wgmma K order
// ---------------------------------------------------------------------------------------------

// Sets a bit of the MoE plan's error word (device/moe_error.hpp).
__device__ __forceinline__ void moe_report(int* error, int bit, int index, int value) {
  MoeErrorWord* e = reinterpret_cast<MoeErrorWord*>(error);
  atomicOr(&e->bits, bit);
  if (atomicCAS(&e->kind, 0, bit) == 0) {  // the first report names its place (read after the grid ends)
    e->index = index;
    e->value = value;
  }
}

template <Format F>
__device__ __forceinline__ float scale_value(unsigned code) {
  if constexpr (F == Format::nvfp4) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
    return __half2float(__half(h));
  } else {
    if (code == 0xFFu) return __int_as_float(0x7FC00000);
    return code == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(code) << 23);
  }
}

// One (token row, k-block) unit per thread of a warp-uniform call: rows m < row_limit of group g
// are dequantised (or, bf16, reordered) into workspace row g.act_row0 + m.
template <Format F, PrepassSource S>
__device__ __forceinline__ void prepass_unit(const PrepassArgs& args, const PrepassGroup& g, int u, int row_limit,
                                             uint4* buf, int lane) {
  constexpr int kVec = F == Format::nvfp4 ? 16 : 32;
  void* const out = args.out;
  const int out_cols = args.out_cols;
  const ScaleLayout layout = args.layout;
  const int kblocks = (g.k + 63) / 64;  // >= 1: the plan passes only groups with M, K > 0
  const int m = u / kblocks, kb = u - m * kblocks;
  bool valid = m < row_limit;
  int src_m = m;  // the row of g.a (and its scales) that becomes workspace row m
  if constexpr (S != PrepassSource::grouped_fp4) {
    if (valid && args.slot_counts != nullptr) valid = m % args.slot_rows < __ldg(args.slot_counts + m / args.slot_rows);
    if (valid && args.gather != nullptr) {
      src_m = __ldg(args.gather + m);
      if (src_m < 0 || src_m >= args.gather_rows) {
        if (kb == 0) moe_report(args.error, kMoeBadGather, m, src_m);
        valid = false;
      }
    }
  }
  const int cols = g.k / kVec;
  using Elem = std::conditional_t<F == Format::nvfp4, __half, __nv_bfloat16>;
  uint4* dst = valid ? reinterpret_cast<uint4*>(static_cast<Elem*>(out) +
                                                static_cast<std::int64_t>(g.act_row0 + m) * out_cols + kb * 64)
                     : nullptr;

  if constexpr (S == PrepassSource::routed_bf16) {
    if (valid) {
      // W4A16: 64 bf16 values (128 bytes; past K read as zero), element e of the block at
      // 16-bit slot e; chunk c, pair i takes elements 8 (2i + c % 2) + c / 2 and that + 4, as
      // the MXFP4 path below orders its nibbles.
      std::uint32_t v[32];
      const std::uint8_t* src = g.a + static_cast<std::int64_t>(src_m) * g.lda + kb * 128;
      const int valid_elems = min(64, g.k - kb * 64);
      if (valid_elems == 64) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint4 q = __ldg(reinterpret_cast<const uint4*>(src) + i);
          v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
        }
      } else {
        const auto* s16 = reinterpret_cast<const std::uint16_t*>(src);
#pragma unroll
        for (int i = 0; i < 32; ++i)
          v[i] = (2 * i < valid_elems ? s16[2 * i] : 0u) | ((2 * i + 1 < valid_elems ? s16[2 * i + 1] : 0u) << 16);
      }
      auto elem = [&](int e) { return (v[e / 2] >> (16 * (e % 2))) & 0xFFFFu; };  // e compile-time
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        std::uint32_t packed[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int e0 = 8 * (2 * i + (c & 1)) + (c >> 1);
          packed[i] = elem(e0) | (elem(e0 + 4) << 16);
        }
        buf[lane * 8 + (c ^ (lane & 7))] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
      }
    }
  } else if (valid) {
    // The block's 64 nibbles as 8 words (element e in word e / 8); bytes past K read as zero.
    std::uint32_t w[8];
    const std::uint8_t* src = g.a + static_cast<std::int64_t>(src_m) * g.lda + kb * 32;
    const int valid_bytes = min(32, g.k / 2 - kb * 32);
    if (valid_bytes == 32) {
      const uint4 lo = __ldg(reinterpret_cast<const uint4*>(src)), hi = __ldg(reinterpret_cast<const uint4*>(src + 16));
      w[0] = lo.x, w[1] = lo.y, w[2] = lo.z, w[3] = lo.w, w[4] = hi.x, w[5] = hi.y, w[6] = hi.z, w[7] = hi.w;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) w[i] = 0;
#pragma unroll
      for (int i = 0; i < 32; ++i)
        if (i < valid_bytes) w[i / 4] |= static_cast<std::uint32_t>(src[i]) << (8 * (i % 4));
    }
    unsigned code[64 / kVec];
#pragma unroll
    for (int j = 0; j < 64 / kVec; ++j) {
      const int col = kb * (64 / kVec) + j;
      code[j] = col < cols ? __ldg(g.sfa + formats::detail::scale_offset(layout, src_m, col, cols)) : 0u;
    }
    auto put = [&](int c, std::uint32_t p0, std::uint32_t p1, std::uint32_t p2, std::uint32_t p3) {
      buf[lane * 8 + (c ^ (lane & 7))] = make_uint4(p0, p1, p2, p3);
    };
    if constexpr (F == Format::nvfp4) {
      // raw * 2^14 is the e2m1 value (exact); times the E4M3 scale it stays exact in f16
      // (|value| <= 6 * 448, every product a multiple of 2^-10 with <= 6 significant bits).
      // Columns past K have code 0 = scale 0 (their weights are zero too).
      const __half2 two14 = __half2half2(__ushort_as_half(0x7400));
      __half2 s[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        s[j] = __half2half2(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code[j]), __NV_E4M3)));
      auto cvt = [&](std::uint32_t raw, int i) {
        const __half2 r = __hmul2(__hmul2(*reinterpret_cast<const __half2*>(&raw), two14), s[i]);
        return *reinterpret_cast<const std::uint32_t*>(&r);
      };
      // Chunk c (k-step c / 2, upper slots iff c odd), pair i (thread i of the quad) = register
      // c / 2 of e2m1_quad_f16_raw(word 2i + c % 2) (wgmma_k_source_nvfp4).
      std::uint32_t quad[8][4];
#pragma unroll
      for (int i = 0; i < 8; ++i) e2m1_quad_f16_raw(w[i], quad[i]);
#pragma unroll
      for (int c = 0; c < 8; ++c)
        put(c, cvt(quad[0 + c % 2][c / 2], 0), cvt(quad[2 + c % 2][c / 2], 1), cvt(quad[4 + c % 2][c / 2], 2),
            cvt(quad[6 + c % 2][c / 2], 3));
    } else {
      // MXFP4 -> bf16 through FP32 (scales 2^-127..2^127 reach bf16's subnormals; FP32 -> bf16
      // rounding of an exactly representable product is exact).
      float scale[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) scale[j] = kb * 2 + j < cols ? scale_value<F>(code[j]) : 0.f;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int odd = c & 1, half_c = c >> 1;
        std::uint32_t packed[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const std::uint32_t word = w[2 * i + odd];
          float dq[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const unsigned nib = (word >> (4 * (half_c + 4 * h))) & 0xFu;
            const unsigned cm = nib & 7u;  // e2m1 magnitude without a table (no local memory)
            const float mag = cm >= 2 ? __int_as_float(static_cast<int>(((126u + (cm >> 1)) << 23) | ((cm & 1u) << 22)))
                                      : 0.5f * static_cast<float>(cm);
            dq[h] = ((nib & 8u) ? -mag : mag) * scale[i / 2];  // exact in FP32 and in bf16
          }
          const __nv_bfloat162 b2 = __floats2bfloat162_rn(dq[0], dq[1]);
          packed[i] = *reinterpret_cast<const std::uint32_t*>(&b2);
        }
        put(c, packed[0], packed[1], packed[2], packed[3]);
      }
    }
  }
  __syncwarp();
  // Store: round j, lanes 8q..8q+7 write the 8 chunks of unit 4j + q (one 128-byte row segment).
  const int cc = lane % 8;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int unit = 4 * j + lane / 8;
    uint4* d = reinterpret_cast<uint4*>(__shfl_sync(0xFFFFFFFFu, reinterpret_cast<std::uintptr_t>(dst), unit));
    if (d != nullptr) d[cc] = buf[unit * 8 + (cc ^ (unit & 7))];
  }
  __syncwarp();  // the next unit's puts reuse buf
}

// One thread per (token row, 64-wide k-block): it reads the block's 32 bytes of FP4 and its scales
// once, so every thread has a unique 32-byte load in flight. Output chunk c (wgmma k positions
// 8c..8c+7) holds pairs (8c + 2i, 8c + 2i + 1): thread i's registers for k-step c/2, lower
// (c even) or upper slots, i.e. two source elements of word 2i + c%2 chosen by
// detail::wgmma_k_source_<format> (MXFP4: nibbles c/2 and c/2 + 4). The 128-byte result goes through a per-warp shared-memory buffer so
// that the global stores are coalesced (8 lanes per 128-byte row segment): a thread storing its own
// eight 16-byte chunks touched 32 rows per instruction and the kernel ran at ~0.3 TB/s.
template <Format F, PrepassSource S = PrepassSource::grouped_fp4>
__global__ void __launch_bounds__(256) dequant_activations(const __grid_constant__ PrepassArgs args) {
  constexpr bool kRouted = S != PrepassSource::grouped_fp4;
  const int lane = threadIdx.x % 32;
  if (threadIdx.x < 32) {  // the GEMM's metadata into L2, one line per lane of the first blocks
    const int line = (blockIdx.y * gridDim.x + blockIdx.x) * 32 + lane;
    if (line < args.meta_lines) ptx::prefetch_l2(args.meta + static_cast<std::int64_t>(line) * 128);
  }
  // Routed: launched as a programmatic dependent of the launch before it (the layer's routing), this grid waits for
  // it before reading the rows, the offsets and the gather index, and only then lets the GEMM start: the GEMM reads
  // the routing's offsets in its prologue, before its own wait (which is for this grid). Every thread reaches the
  // wait. (Without programmatic launch the wait returns at once.)
  if constexpr (kRouted) ptx::wait_prerequisites();
  ptx::launch_dependents();  // the GEMM's CTAs may start their prologue as SMs free up
  Trace::prepass_begin();
  __shared__ uint4 staging[8][32 * 8];  // per warp: [unit = lane][chunk, XOR-swizzled by lane % 8]
  uint4* buf = staging[threadIdx.x / 32];
  if constexpr (!kRouted) {
    for (int gi = blockIdx.y; gi < args.num_groups; gi += gridDim.y) {  // block-uniform
      const PrepassGroup g = gi < args.inline_count ? args.inline_groups[gi] : args.groups[gi];
      prepass_unit<F, S>(args, g, blockIdx.x * blockDim.x + threadIdx.x, g.m, buf, lane);
    }
  } else {
    // One routed stack, rows [*first_row, *end_row) (device data) in a grid-stride loop: a plan
    // sized for a large capacity costs little on a decode step.
    const PrepassGroup& g = args.inline_groups[0];
    const int end = args.end_row != nullptr ? max(0, min(g.m, __ldg(args.end_row))) : g.m;
    const int first = args.first_row != nullptr ? max(0, min(end, __ldg(args.first_row))) : 0;
    const int kblocks = (g.k + 63) / 64;
    const int units = (end - first) * kblocks;  // < 2^31 (checked by the MoE plan)
    for (int base = blockIdx.x * blockDim.x; base < units; base += gridDim.x * blockDim.x)  // block-uniform
      prepass_unit<F, S>(args, g, first * kblocks + base + threadIdx.x, end, buf, lane);
  }
  Trace::prepass_end(lane);
}

// One thread per (row, 8 column blocks): it reads 32 bytes of a row (a full sector) and writes one
// 4-byte word into each of 8 atoms; the 128 threads of a row block write consecutive words.
__device__ __forceinline__ void convert_scale_unit(const ScaleConversion& j, std::int64_t u) {
  const int col_blocks = (j.cols + 3) / 4;
  const int groups8 = (col_blocks + 7) / 8;
  if (u >= static_cast<std::int64_t>((j.rows + 127) / 128) * groups8 * 128) return;
  const int w = static_cast<int>(u % 128);                 // word within an atom
  const std::int64_t unit = u / 128;
  const int rb = static_cast<int>(unit / groups8), cb0 = static_cast<int>(unit % groups8) * 8;
  const int r = rb * 128 + (w % 4) * 32 + w / 4;
  std::uint32_t word[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (r < j.rows) {
    const std::uint8_t* src = j.src + static_cast<std::int64_t>(r) * j.cols + cb0 * 4;
    const int avail = j.cols - cb0 * 4;  // bytes of this row from column cb0 * 4 on
    if (avail >= 32 && (reinterpret_cast<std::uintptr_t>(src) & 15) == 0) {
      const uint4 lo = __ldg(reinterpret_cast<const uint4*>(src)), hi = __ldg(reinterpret_cast<const uint4*>(src + 16));
      word[0] = lo.x, word[1] = lo.y, word[2] = lo.z, word[3] = lo.w, word[4] = hi.x, word[5] = hi.y, word[6] = hi.z,
      word[7] = hi.w;
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i)
        if (i < avail) word[i / 4] |= static_cast<std::uint32_t>(__ldg(src + i)) << (8 * (i % 4));
    }
  }
  std::uint32_t* dst = reinterpret_cast<std::uint32_t*>(j.dst) + (static_cast<std::int64_t>(rb) * col_blocks + cb0) * 128 + w;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (cb0 + i < col_blocks) dst[i * 128] = word[i];
}

// Job i is converted by the blocks with blockIdx.y = i mod gridDim.y (<= 65535).
template <Format F>  // (per-format instantiation keeps the kernel in the format's translation unit)
__global__ void __launch_bounds__(256) scales_to_blocked(const ScaleConversion* jobs, int num_jobs) {
  const std::int64_t u = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int i = blockIdx.y; i < num_jobs; i += gridDim.y) convert_scale_unit(jobs[i], u);
}

}  // namespace fp4gemm::detail::sm90
