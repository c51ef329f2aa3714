// fp4gemm::quantize_activations: the GPU activation quantiser (NVFP4 with a global scale, MXFP4),
// bit for bit the host rule of fp4gemm::formats::quantize (formats.hpp).
//
// One thread per scale block (16 / 32 elements), persistent: a grid of whole waves, each thread
// loads its next block's 32-128 bytes before it quantises the current one (with only the current
// block's loads, a thread had nothing in flight while it computed, and the kernel was
// latency-bound at ~35 % issue).
// Per block: amax (packed bf16x2 / f16x2 max for 16-bit inputs), the scale code, 16 / 32 nibbles
// stored as 8-byte words, one scale byte (linear, or at its blocked-atom offset).
//
// The element rounding is the exact quotient's round-to-nearest-even, without a division: x / d
// rounds to code >= c exactly when |x| >= t d (or >, for a tie that goes down to the even code)
// for the 7 midpoints t. Per block the kernel turns each midpoint into the smallest FP32 value
// T_c that reaches code c -- fl(t d), moved up one ulp when the FMA residual t d - fl(t d) is
// positive (or zero, for a strict ">") -- so every element is a 3-step search over 7 sorted
// thresholds whatever d is (a calibrated NVFP4 global scale included). The residual's sign is
// exact while d lies in [2^-100, 2^100]; outside (blocks near FP32's under- or overflow) the
// correctly rounded quotient decides, ties settled by its FMA remainder (e2m1_code below).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device/ptx/ptx.cuh"
#include "device/quantize_rule.cuh"
#include "formats/scale_layout.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/quantize.hpp"
#include "kernels/launch_config.hpp"
#include "kernels/quantize.hpp"

namespace fp4gemm {

namespace {

constexpr int kThreads = 256;

using detail::quant::code_divisor;
using detail::quant::code_scale;
using detail::quant::e2m1_code;
using detail::quant::e4m3_code;

// Per scale code: the block's thresholds. The divisor d of a block depends only on its scale code
// (and the tensor's global scale), so each CTA tabulates, once, for every code: the 7 thresholds
// T_c, the smallest input values that reach code c + 1 (16-bit inputs: as the input type, packed
// twice into a word for a paired compare; f32: as FP32), and whether the fast path applies.
//
// T_c from the midpoint t: fl(t d) moved up one ulp when the FMA residual t d - fl(t d) is
// positive (or zero, where a tie goes down to the even code: codes 1, 3, 5, 7 need |x| strictly
// above t d); the residual's sign is exact for d in [2^-100, 2^100]. For 16-bit inputs T_c is then
// rounded up to the type (smallest bf16 / f16 >= T_c): for an input x of that type, x >= T_c
// exactly when x >= that value.
constexpr int kTableWords = 8;  // 7 thresholds + flags
constexpr std::uint32_t kFast = 1, kZero = 2;

template <Format F>
constexpr int kCodes = F == Format::nvfp4 ? 128 : 256;

template <Format F, typename T>
__device__ void build_table(std::uint32_t (*table)[kTableWords], float gs) {
  for (int code = threadIdx.x; code < kCodes<F>; code += kThreads) {
    const float scale = code_scale<F>(code), d = code_divisor<F>(code, gs);
    std::uint32_t* e = table[code];
    const bool fast = scale > 0.0f && d >= 0x1p-100f && d <= 0x1p100f;
    e[7] = fast ? kFast : scale > 0.0f ? 0u : kZero;
    constexpr float kT[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
#pragma unroll
    for (int c = 0; c < 7; ++c) {
      const float t = __fmul_rn(kT[c], d);
      const float r = fmaf(kT[c], d, -t);
      const bool up = r > 0.0f || (c % 2 == 0 && r == 0.0f);
      const float th = __uint_as_float(__float_as_uint(t) + (up ? 1u : 0u));
      std::uint32_t w;
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const std::uint32_t h = __bfloat16_as_ushort(__float2bfloat16_ru(th));
        w = h | h << 16;
      } else if constexpr (std::is_same_v<T, __half>) {
        const std::uint32_t h = __half_as_ushort(__float2half_ru(th));
        w = h | h << 16;
      } else {
        w = __float_as_uint(th);
      }
      e[c] = fast ? w : 0u;
    }
  }
}

// The grid-stride walk over (row, block): the stride's whole rows and remaining blocks, so a
// thread steps without a division.
struct QuantizeWalk {
  std::int64_t rows = 0, blocks_per_row = 0;
  std::int64_t stride_rows = 0, stride_blocks = 0;
  // Optional device bounds: only rows [*row_begin, *row_end) (clamped to [0, rows)) are quantised.
  const int* row_begin = nullptr;
  const int* row_end = nullptr;
  detail::QuantizeChain chain = detail::QuantizeChain::none;  // where it waits for a programmatic predecessor
};

// The packed pair type of a 16-bit input type, and a 32-bit word seen as one.
template <typename T>
using Pair = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __nv_bfloat162, __half2>;

template <typename T>
__device__ __forceinline__ Pair<T> as_pair(std::uint32_t v) {
  Pair<T> r;
  memcpy(&r, &v, 4);
  return r;
}

// A block's raw input: kVec elements of T as 16-byte words.
template <Format F, typename T>
struct RawBlock {
  static constexpr int kVec = F == Format::nvfp4 ? 16 : 32;
  static constexpr int kLoads = kVec * static_cast<int>(sizeof(T)) / 16;
  uint4 w[kLoads];
  __device__ __forceinline__ void load(const T* src) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) w[l] = __ldcs(reinterpret_cast<const uint4*>(src) + l);
  }
  __device__ __forceinline__ std::uint32_t word(int i) const {  // 32-bit word i of the block
    const uint4& q = w[i / 4];
    return i % 4 == 0 ? q.x : i % 4 == 1 ? q.y : i % 4 == 2 ? q.z : q.w;
  }
  // Element i as FP32 (exact).
  __device__ __forceinline__ float element(int i) const {
    if constexpr (sizeof(T) == 4) {
      return __uint_as_float(word(i));
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      const std::uint32_t v = word(i / 2);
      return __uint_as_float(i % 2 == 0 ? v << 16 : v & 0xFFFF0000u);
    } else {
      const std::uint32_t v = word(i / 2);
      return __half2float(__ushort_as_half(static_cast<unsigned short>(i % 2 == 0 ? v & 0xFFFFu : v >> 16)));
    }
  }
  // max |x| over the block, NaN if any element is NaN (16-bit inputs: packed max, exact).
  __device__ __forceinline__ float amax() const {
    if constexpr (sizeof(T) == 4) {
      float m = 0.0f;
      bool nan = false;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float x = element(i);
        nan |= x != x;
        m = fmaxf(m, fabsf(x));
      }
      return nan ? __uint_as_float(0x7FC00000u) : m;
    } else {
      Pair<T> m = __habs2(as_pair<T>(word(0)));
#pragma unroll
      for (int i = 1; i < kVec / 2; ++i) m = __hmax2_nan(m, __habs2(as_pair<T>(word(i))));
      const float lo = __low2float(m), hi = __high2float(m);
      return lo != lo || hi != hi ? __uint_as_float(0x7FC00000u) : fmaxf(lo, hi);
    }
  }
};

// Two elements (one 32-bit word of bf16 / f16) -> their two nibbles, in bits 0-3 (first element)
// and 16-19 (second). A branch-free 3-step search on both 16-bit lanes at once: each step is one
// paired compare (lane masks 0xFFFF / 0) and the next step's thresholds are selected per lane with
// the mask (one LOP3 each), so the three masks are the code's bits 2, 1, 0.
template <typename T>
__device__ __forceinline__ std::uint32_t nibble_pair(std::uint32_t w, const std::uint32_t* th) {
  const Pair<T> a = __habs2(as_pair<T>(w));
  auto ge = [&](std::uint32_t t) { return __hge2_mask(a, as_pair<T>(t)); };
  auto pick = [](std::uint32_t m, std::uint32_t yes, std::uint32_t no) { return (m & yes) | (~m & no); };
  const std::uint32_t b2 = ge(th[3]);
  const std::uint32_t b1 = ge(pick(b2, th[5], th[1]));
  const std::uint32_t b0 = ge(pick(b2, pick(b1, th[6], th[4]), pick(b1, th[2], th[0])));
  // per 16-bit lane: code in bits 0-2, the sign (bit 15 of the lane) in bit 3
  return (b0 & 0x00010001u) | (b1 & 0x00020002u) | (b2 & 0x00040004u) | ((w >> 12) & 0x00080008u);
}

// Four nibble pairs (elements 2j in bits 0-3, 2j + 1 in bits 16-19 of r[j]) -> one word of 8
// nibbles in element order: two shift-adds and two byte permutes.
__device__ __forceinline__ std::uint32_t pack_pairs(const std::uint32_t* r) {
  const std::uint32_t lo = r[0] + (r[1] << 8), hi = r[2] + (r[3] << 8);  // nibbles in bytes, no carries
  const std::uint32_t even = __byte_perm(lo, hi, 0x5410), odd = __byte_perm(lo, hi, 0x7632);
  return even + (odd << 4);
}

template <Format F, typename T>
__device__ __forceinline__ void quantize_block(const QuantizeArgs& a, float gs, float inv6gs,
                                               const std::uint32_t (*table)[kTableWords],
                                               const RawBlock<F, T>& x, std::int64_t row, std::int64_t b,
                                               std::int64_t blocks_per_row) {
  constexpr int kVec = RawBlock<F, T>::kVec;
  const float amax = x.amax();
  const bool nan = amax != amax;
  std::uint32_t code;
  if constexpr (F == Format::nvfp4) {
    // The rule is E4M3(fl(fl(amax / 6) / gs)). amax * inv6gs (inv6gs = fl(1 / fl(6 gs))) is
    // within 5 roundings (< 2^-21 relative) of that quotient, so when both ends of a 2^-20
    // relative interval around it round to one code (E4M3 rounding is monotone), so does the
    // quotient (below FP32's normal range every value is far under E4M3's smallest code, and
    // overflow saturates both). Otherwise -- amax near a code boundary (rare), or inv6gs = 0: a
    // global scale too large or too small for the shortcut -- the two correctly rounded
    // divisions decide.
    const float q = amax * inv6gs;
    code = e4m3_code(q * (1.0f - 0x1p-20f));
    if (!(inv6gs > 0.0f) || code != e4m3_code(q * (1.0f + 0x1p-20f)))
      code = e4m3_code(__fdiv_rn(__fdiv_rn(amax, 6.0f), gs));
    if (nan) code = 0x7Fu;
  } else {
    code = detail::quant::mx_scale_code(amax);
  }
  const uint4 t0 = *reinterpret_cast<const uint4*>(table[code]);
  const uint4 t1 = *reinterpret_cast<const uint4*>(table[code] + 4);
  const std::uint32_t th[7] = {t0.x, t0.y, t0.z, t0.w, t1.x, t1.y, t1.z};
  // Nibbles. A scale of 0 or NaN gives all-zero nibbles (formats.hpp's rule).
  std::uint32_t words[kVec / 8] = {};
  if (t1.w & kFast) {
    if constexpr (sizeof(T) == 2) {
#pragma unroll
      for (int q = 0; q < kVec / 8; ++q) {
        std::uint32_t r[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) r[j] = nibble_pair<T>(x.word(4 * q + j), th);
        words[q] = pack_pairs(r);
      }
    } else {
      // A branch-free 3-step search over the sorted FP32 thresholds (3 compares, 4 selects).
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float v = fabsf(x.element(i));
        const bool p2 = v >= __uint_as_float(th[3]);
        const bool p1 = v >= __uint_as_float(p2 ? th[5] : th[1]);
        const std::uint32_t lo = p1 ? th[2] : th[0], hi = p1 ? th[6] : th[4];
        const bool p0 = v >= __uint_as_float(p2 ? hi : lo);
        const std::uint32_t c = (p2 ? 4u : 0u) | (p1 ? 2u : 0u) | (p0 ? 1u : 0u);
        words[i / 8] |= (((x.word(i) >> 28) & 8u) | c) << (4 * (i % 8));
      }
    }
  } else if (!(t1.w & kZero)) {  // d near under- or overflow: the exact quotient's rounding via the division
    const float divisor = code_divisor<F>(code, gs);
#pragma unroll
    for (int i = 0; i < kVec; ++i) words[i / 8] |= e2m1_code(x.element(i), divisor) << (4 * (i % 8));
  }
  std::uint8_t* dst = static_cast<std::uint8_t*>(a.packed) + row * a.ld_packed + b * (kVec / 2);
  // 8-byte stores: ld_packed need only be a multiple of 8.
  __stcs(reinterpret_cast<uint2*>(dst), make_uint2(words[0], words[1]));
  if constexpr (kVec == 32) __stcs(reinterpret_cast<uint2*>(dst + 8), make_uint2(words[2], words[3]));
  auto* sc = static_cast<std::uint8_t*>(a.scales);
  if (a.scale_layout == ScaleLayout::linear) sc[row * blocks_per_row + b] = static_cast<std::uint8_t>(code);
  else sc[formats::detail::blocked_offset<std::int64_t>(row, b, blocks_per_row)] = static_cast<std::uint8_t>(code);
}

template <Format F, typename T>
__global__ void __launch_bounds__(kThreads) quantize_kernel(QuantizeArgs a, QuantizeWalk walk) {
  constexpr int kVec = RawBlock<F, T>::kVec;
  ptx::launch_dependents();  // (launched as a programmatic dependent only by the expert layer: QuantizeChain)
  if (walk.chain == detail::QuantizeChain::wait_first) ptx::wait_prerequisites();
  __shared__ alignas(16) std::uint32_t table[kCodes<F>][kTableWords];
  const float gs = F == Format::nvfp4 && a.global_scale_device != nullptr ? *a.global_scale_device : a.global_scale;
  const float inv6gs_rn = __frcp_rn(__fmul_rn(6.0f, gs));  // (0: no shortcut, quantize_block)
  const float inv6gs = inv6gs_rn >= 0x1p-120f && inv6gs_rn <= 0x1p120f ? inv6gs_rn : 0.0f;
  const std::int64_t u = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const std::int64_t begin = walk.row_begin != nullptr ? min(walk.rows, static_cast<std::int64_t>(max(*walk.row_begin, 0))) : 0;
  const std::int64_t end = walk.row_end != nullptr ? min(walk.rows, static_cast<std::int64_t>(max(*walk.row_end, 0))) : walk.rows;
  walk.rows = end;
  std::int64_t row = u / walk.blocks_per_row, b = u - row * walk.blocks_per_row;
  row += begin;
  const T* x = static_cast<const T*>(a.x);
  RawBlock<F, T> cur;
  if (row < walk.rows) cur.load(x + row * a.ldx + b * kVec);  // in flight while the table is built
  build_table<F, T>(table, gs);
  __syncthreads();
  // wait_last (QuantizeChain): every thread with rows waits at its end, so the grid cannot complete before its
  // predecessor -- thread 0 always has one (host/quantize.cpp: wait_last only without row bounds, on >= 1 row). Threads without rows
  // return at once: a wait on that path, or the loop inside an `if` with one wait after it, gave the f16 instance of one
  // format an 8-byte stack frame.
  if (row >= walk.rows) return;
  for (;;) {
    std::int64_t next_row = row + walk.stride_rows, next_b = b + walk.stride_blocks;
    if (next_b >= walk.blocks_per_row) next_b -= walk.blocks_per_row, ++next_row;
    const bool more = next_row < walk.rows;
    RawBlock<F, T> next;
    if (more) next.load(x + next_row * a.ldx + next_b * kVec);  // in flight while this block is quantised
    quantize_block<F, T>(a, gs, inv6gs, table, cur, row, b, walk.blocks_per_row);
    if (!more) break;
    cur = next;
    row = next_row, b = next_b;
  }
  if (walk.chain == detail::QuantizeChain::wait_last) ptx::wait_prerequisites();
}

// Blocked layout: the padding (rows past `rows` up to a multiple of 128, columns past cols up to a
// multiple of 4) is written as 0, as formats::linear_to_blocked does.
__global__ void __launch_bounds__(kThreads) blocked_padding_kernel(std::uint8_t* scales, std::int64_t rows,
                                                                   std::int64_t cols) {
  const std::int64_t prow = (rows + 127) / 128 * 128, pcols = (cols + 3) / 4 * 4;
  const std::int64_t total = prow * pcols;
  for (std::int64_t u = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; u < total;
       u += static_cast<std::int64_t>(gridDim.x) * kThreads) {
    const std::int64_t r = u / pcols, c = u % pcols;
    if (r >= rows || c >= cols) scales[formats::detail::blocked_offset<std::int64_t>(r, c, cols)] = 0;
  }
}

// Blocks of quantize_kernel<F, T> resident on all of `device`'s SMs at once (a whole wave),
// queried once per device and kernel.
template <Format F, typename T>
cudaError_t wave_blocks_of(int device, std::int64_t& blocks) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices] = {};
  if (device >= 0 && device < kMaxDevices)
    if (const int v = cache[device].load(std::memory_order_relaxed); v > 0) {
      blocks = v;
      return cudaSuccess;
    }
  int sms = 0, per_sm = 0;
  if (const cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess) return e;
  if (const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, quantize_kernel<F, T>, kThreads, 0);
      e != cudaSuccess)
    return e;
  const int v = std::max(1, sms * std::max(1, per_sm));
  if (device >= 0 && device < kMaxDevices) cache[device].store(v, std::memory_order_relaxed);
  blocks = v;
  return cudaSuccess;
}

cudaError_t quantize_wave_blocks(int device, Format f, InputType in, std::int64_t& blocks) {
  if (f == Format::nvfp4) {
    if (in == InputType::bf16) return wave_blocks_of<Format::nvfp4, __nv_bfloat16>(device, blocks);
    if (in == InputType::f16) return wave_blocks_of<Format::nvfp4, __half>(device, blocks);
    return wave_blocks_of<Format::nvfp4, float>(device, blocks);
  }
  if (in == InputType::bf16) return wave_blocks_of<Format::mxfp4, __nv_bfloat16>(device, blocks);
  if (in == InputType::f16) return wave_blocks_of<Format::mxfp4, __half>(device, blocks);
  return wave_blocks_of<Format::mxfp4, float>(device, blocks);
}

}  // namespace

namespace detail {

cudaError_t launch_quantize_kernel(const QuantizeArgs& a, const int* row_begin, const int* row_end, cudaStream_t stream,
                                   QuantizeChain chain) {
  const int vec = scale_block_size(a.format);
  const std::int64_t bpr = a.k / vec, total = a.rows * bpr;
  // Whole waves: as many 256-thread blocks as fit on every SM (the kernels' occupancy, queried
  // once per device and format x input; fewer when the matrix is small).
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  std::int64_t wave = 0;
  if (const cudaError_t e = quantize_wave_blocks(device, a.format, a.input, wave); e != cudaSuccess) return e;
  const unsigned grid = static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>((total + kThreads - 1) / kThreads, wave)));
  QuantizeWalk walk;
  walk.rows = a.rows, walk.blocks_per_row = bpr;
  walk.row_begin = row_begin, walk.row_end = row_end, walk.chain = chain;
  const std::int64_t stride = static_cast<std::int64_t>(grid) * kThreads;
  walk.stride_rows = stride / bpr, walk.stride_blocks = stride % bpr;
  auto go = [&](auto fmt_tag, auto type_tag) {
    constexpr Format F = decltype(fmt_tag)::value;
    using T = typename decltype(type_tag)::type;
    const LaunchConfig l(dim3(grid), dim3(kThreads), 0, stream, chain != QuantizeChain::none);
    return cudaLaunchKernelEx(&l.config, quantize_kernel<F, T>, a, walk);
  };
  using Nv = std::integral_constant<Format, Format::nvfp4>;
  using Mx = std::integral_constant<Format, Format::mxfp4>;
  struct Bf { using type = __nv_bfloat16; };
  struct Hf { using type = __half; };
  struct Ff { using type = float; };
  cudaError_t launched;
  if (a.format == Format::nvfp4) {
    if (a.input == InputType::bf16) launched = go(Nv{}, Bf{});
    else if (a.input == InputType::f16) launched = go(Nv{}, Hf{});
    else launched = go(Nv{}, Ff{});
  } else {
    if (a.input == InputType::bf16) launched = go(Mx{}, Bf{});
    else if (a.input == InputType::f16) launched = go(Mx{}, Hf{});
    else launched = go(Mx{}, Ff{});
  }
  if (launched != cudaSuccess) return launched;
  if (a.scale_layout == ScaleLayout::blocked && (a.rows % 128 != 0 || bpr % 4 != 0)) {
    const std::int64_t pad = (a.rows + 127) / 128 * 128 * ((bpr + 3) / 4 * 4);
    blocked_padding_kernel<<<static_cast<unsigned>(std::min<std::int64_t>((pad + kThreads - 1) / kThreads, 1024)), kThreads, 0,
                             stream>>>(static_cast<std::uint8_t*>(a.scales), a.rows, bpr);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

}  // namespace detail

}  // namespace fp4gemm
