// GPU MODE-style random inputs generated on the GPU with a counter-based hash (no cuRAND).
#include <cuda_bf16.h>

#include <algorithm>
#include <sstream>

#include "data.hpp"
#include "fp4gemm/formats.hpp"

namespace fp4gemm::cli {
namespace {

constexpr int kFillThreads = 256;
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// splitmix64's finaliser: a good 64-bit mixer, the same on host and device.
__host__ __device__ inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// NOTES: one 8-bit slice of a hash picks one of GPU MODE's seven values {0, .5, 1, 1.5} and their
// negatives; e2m1 codes 0..3 and 9..11 (0x8, negative zero, is not produced).
__device__ inline std::uint32_t e2m1_code_from_byte(std::uint32_t byte) {
  const std::uint32_t pick = (byte * 7u) >> 8;  // 0..6, nearly uniform
  return pick < 4u ? pick : pick + 5u;
}

__global__ void fill_e2m1_kernel(uint4* out, std::size_t vectors, std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
       i += stride) {
    std::uint32_t words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const std::uint64_t h = mix64(seed + (i * 4 + w) * kGolden);
      std::uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) word |= e2m1_code_from_byte((h >> (8 * j)) & 0xFFu) << (4 * j);
      words[w] = word;
    }
    out[i] = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// Each byte is `low` or `high` (the codes of scale 1 and scale 2), one hash bit per byte.
__global__ void fill_scales_kernel(uint4* out, std::size_t vectors, std::uint64_t seed,
                                   std::uint32_t low, std::uint32_t high) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
       i += stride) {
    const std::uint64_t h = mix64(seed + i * kGolden);
    std::uint32_t words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      std::uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) word |= (((h >> (w * 4 + j)) & 1u) ? high : low) << (8 * j);
      words[w] = word;
    }
    out[i] = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// Every byte from the hash: `lo + (byte * span >> 8)`, span = 0 keeping the raw byte.
__global__ void fill_bytes_kernel(uint4* out, std::size_t vectors, std::uint64_t seed, std::uint32_t lo,
                                  std::uint32_t span) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
       i += stride) {
    std::uint32_t words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const std::uint64_t h = mix64(seed + (i * 2 + w / 2) * kGolden) >> (32 * (w % 2));
      std::uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t b = (h >> (8 * j)) & 0xFFu;
        word |= (span == 0 ? b : lo + ((b * span) >> 8)) << (8 * j);
      }
      words[w] = word;
    }
    out[i] = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

__global__ void fill_bf16_kernel(__nv_bfloat16* out, std::size_t count, std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const std::uint64_t h = mix64(seed + i * kGolden);
    const float u = (static_cast<float>(h >> 40) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
    float x = 2.0f * u - 1.0f;
    if (x == 0.0f) x = 0.25f;
    out[i] = __float2bfloat16_rn(x);
  }
}

// GPU MODE's values as bf16 (W4A16 activations): {0, +-0.5, +-1, +-1.5}, exact partial sums.
__global__ void fill_bf16_gpu_mode_kernel(std::uint16_t* out, std::size_t count, std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const std::uint32_t code = e2m1_code_from_byte(mix64(seed + i * kGolden) & 0xFFu);
    const std::uint32_t magnitude = code & 7u;  // 0..3: 0, 0.5, 1, 1.5
    const std::uint16_t bits = magnitude == 0 ? 0 : magnitude == 1 ? 0x3F00 : magnitude == 2 ? 0x3F80 : 0x3FC0;
    out[i] = static_cast<std::uint16_t>(bits | ((code & 8u) ? 0x8000u : 0u));
  }
}

unsigned grid_for(std::size_t items) {
  const std::size_t blocks = (items + kFillThreads - 1) / kFillThreads;
  return static_cast<unsigned>(std::clamp<std::size_t>(blocks, 1, 65536));
}

// Independent streams of random numbers per (group, tensor).
enum class Tensor : std::uint64_t { a = 1, b = 2, sfa = 3, sfb = 4 };
std::uint64_t tensor_seed(std::uint64_t seed, int group, Tensor t) {
  return mix64(seed ^ mix64(static_cast<std::uint64_t>(group) * 8 + static_cast<std::uint64_t>(t)));
}

}  // namespace

// ---- fills ------------------------------------------------------------------------------------

void fill_e2m1_gpu_mode(void* p, std::size_t bytes, std::uint64_t seed, cudaStream_t stream) {
  const std::size_t vectors = bytes / 16;
  if (vectors == 0) return;
  fill_e2m1_kernel<<<grid_for(vectors), kFillThreads, 0, stream>>>(static_cast<uint4*>(p), vectors, seed);
  CLI_CUDA_CHECK(cudaGetLastError(), "data");
}

void fill_scales_gpu_mode(void* p, std::size_t bytes, Format format, std::uint64_t seed,
                          cudaStream_t stream) {
  const std::size_t vectors = bytes / 16;
  if (vectors == 0) return;
  // Scale 1 and scale 2: E4M3 0x38 / 0x40, UE8M0 127 / 128.
  const std::uint32_t low = format == Format::nvfp4 ? 0x38u : 127u;
  const std::uint32_t high = format == Format::nvfp4 ? 0x40u : 128u;
  fill_scales_kernel<<<grid_for(vectors), kFillThreads, 0, stream>>>(static_cast<uint4*>(p), vectors,
                                                                    seed, low, high);
  CLI_CUDA_CHECK(cudaGetLastError(), "data");
}

void fill_bytes_random(void* p, std::size_t bytes, std::uint64_t seed, cudaStream_t stream) {
  const std::size_t vectors = bytes / 16;
  if (vectors == 0) return;
  fill_bytes_kernel<<<grid_for(vectors), kFillThreads, 0, stream>>>(static_cast<uint4*>(p), vectors, seed, 0, 0);
  CLI_CUDA_CHECK(cudaGetLastError(), "data");
}

void fill_scales_random(void* p, std::size_t bytes, Format format, std::uint64_t seed, cudaStream_t stream,
                        unsigned mx_max) {
  const std::size_t vectors = bytes / 16;
  if (vectors == 0) return;
  // E4M3 normal codes 0x08..0x7E (0x7F is NaN); UE8M0 117..mx_max (137 by default).
  const std::uint32_t lo = format == Format::nvfp4 ? 0x08u : 117u;
  const std::uint32_t span = format == Format::nvfp4 ? 0x7Fu - 0x08u : std::max(mx_max, 117u) - 117u + 1u;
  fill_bytes_kernel<<<grid_for(vectors), kFillThreads, 0, stream>>>(static_cast<uint4*>(p), vectors, seed, lo, span);
  CLI_CUDA_CHECK(cudaGetLastError(), "data");
}

void fill_bf16_gpu_mode(void* p, std::size_t count, std::uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  fill_bf16_gpu_mode_kernel<<<grid_for(count), kFillThreads, 0, stream>>>(static_cast<std::uint16_t*>(p), count, seed);
  CLI_CUDA_CHECK(cudaGetLastError(), "data");
}

void fill_bf16_random(void* p, std::size_t count, std::uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  fill_bf16_kernel<<<grid_for(count), kFillThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(p), count,
                                                                seed);
  CLI_CUDA_CHECK(cudaGetLastError(), "data");
}

// ---- shapes -----------------------------------------------------------------------------------

double ProblemShape::flops() const {
  double total = 0;
  for (int mg : m) total += 2.0 * mg * static_cast<double>(n) * k;
  return total;
}

std::string ProblemShape::describe() const {
  std::ostringstream os;
  if (l > 0) {
    os << "M=" << (m.empty() ? 0 : m.front()) << " N=" << n << " K=" << k << " L=" << l;
    return os.str();
  }
  os << "G=" << m.size() << " M=";
  for (std::size_t i = 0; i < m.size(); ++i) os << (i ? "," : "") << m[i];
  os << " N=" << n << " K=" << k;
  return os.str();
}

std::int64_t packed_row_bytes(int k) { return (static_cast<std::int64_t>(k) / 2 + 15) / 16 * 16; }
std::int64_t output_row_elems(int n) { return (static_cast<std::int64_t>(n) + 7) / 8 * 8; }

namespace {
struct GroupSizes {
  std::size_t a, b, sfa, sfb, c;
};
GroupSizes group_sizes(int m, int n, int k, const DataSettings& s) {
  const std::int64_t cols = formats::scale_cols(s.format, k);
  GroupSizes z{};
  z.b = static_cast<std::size_t>(n) * packed_row_bytes(k);
  z.sfb = formats::scale_bytes(s.layout, n, cols);
  if (m > 0) {
    z.a = static_cast<std::size_t>(m) * packed_row_bytes(k);
    z.sfa = formats::scale_bytes(s.layout, m, cols);
    z.c = static_cast<std::size_t>(m) * output_row_elems(n) * out_type_size(s.out);
  }
  return z;
}
}  // namespace

std::size_t problem_device_bytes(const ProblemShape& shape, const DataSettings& settings) {
  std::size_t total = 0;
  for (int m : shape.m) {
    if (m == 0) continue;
    const GroupSizes z = group_sizes(m, shape.n, shape.k, settings);
    total += z.a + z.b + z.sfa + z.sfb + z.c;
  }
  return total;
}

// ---- problem data -----------------------------------------------------------------------------

ProblemData::ProblemData(const ProblemShape& shape, const DataSettings& settings)
    : shape_(shape), settings_(settings) {
  require_free_memory(problem_device_bytes(shape, settings) + (64u << 20), "problem data");
  groups_.resize(shape.m.size());
  for (std::size_t g = 0; g < shape.m.size(); ++g) {
    GroupBuffers& gb = groups_[g];
    gb.m = shape.m[g];
    gb.n = shape.n;
    gb.k = shape.k;
    gb.lda = gb.ldb = packed_row_bytes(shape.k);
    gb.ldc = output_row_elems(shape.n);
    if (gb.m == 0) continue;  // an empty group: null pointers, as the API allows
    const GroupSizes z = group_sizes(gb.m, gb.n, gb.k, settings);
    gb.a = DeviceBuffer(z.a, "data (A)");
    gb.b = DeviceBuffer(z.b, "data (B)");
    gb.sfa = DeviceBuffer(z.sfa, "data (SFA)");
    gb.sfb = DeviceBuffer(z.sfb, "data (SFB)");
    gb.c = DeviceBuffer(z.c, "data (C)");
    const int gi = static_cast<int>(g);
    // Whole allocations are filled (row padding and blocked-layout padding included): every
    // byte is a valid value, so nothing a kernel might over-read is NaN.
    fill_e2m1_gpu_mode(gb.a.get(), gb.a.padded_bytes(), tensor_seed(settings.seed, gi, Tensor::a), nullptr);
    fill_e2m1_gpu_mode(gb.b.get(), gb.b.padded_bytes(), tensor_seed(settings.seed, gi, Tensor::b), nullptr);
    fill_scales_gpu_mode(gb.sfa.get(), gb.sfa.padded_bytes(), settings.format,
                         tensor_seed(settings.seed, gi, Tensor::sfa), nullptr);
    fill_scales_gpu_mode(gb.sfb.get(), gb.sfb.padded_bytes(), settings.format,
                         tensor_seed(settings.seed, gi, Tensor::sfb), nullptr);
  }
  poison_outputs(nullptr);
  CLI_CUDA_CHECK(cudaDeviceSynchronize(), "data");
}

std::vector<GroupDesc> ProblemData::descs() const {
  std::vector<GroupDesc> out(groups_.size());
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const GroupBuffers& gb = groups_[g];
    GroupDesc& d = out[g];
    d.m = gb.m;
    d.n = gb.n;
    d.k = gb.k;
    d.a = gb.a.get();
    d.lda = gb.lda;
    d.b = gb.b.get();
    d.ldb = gb.ldb;
    d.sfa = gb.sfa.get();
    d.sfb = gb.sfb.get();
    d.c = gb.c.get();
    d.ldc = gb.ldc;
    d.alpha = 1.0f;
  }
  return out;
}

void ProblemData::poison_outputs(cudaStream_t stream) const {
  for (const GroupBuffers& gb : groups_)
    if (gb.c.get()) CLI_CUDA_CHECK(cudaMemsetAsync(gb.c.get(), 0xFF, gb.c.padded_bytes(), stream), "data");
}

}  // namespace fp4gemm::cli
