// Benchmark problems: shapes, GPU MODE-style random inputs generated on the GPU, poisoned outputs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_util.hpp"
#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::cli {

// One grouped problem: group g is (m[g], n, k). A dense GEMM with batch l is l equal groups.
struct ProblemShape {
  std::string name;       // "seed1", "dense2", "grouped", ...
  std::vector<int> m;
  int n = 0, k = 0;
  int l = 0;              // batch of a dense --mnkl problem (0: a grouped problem)
  double flops() const;   // sum of 2*m*n*k
  std::string describe() const;  // "G=8 M=80,176,... N=4096 K=7168"
};

struct DataSettings {
  Format format = Format::nvfp4;
  ScaleLayout layout = ScaleLayout::linear;
  OutType out = OutType::f16;
  std::uint64_t seed = 1111;
};

// One group's device buffers. Buffers of a group with m == 0 are empty (null), as the API allows.
struct GroupBuffers {
  int m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0;  // bytes, multiple of 16
  std::int64_t ldc = 0;           // elements, multiple of 8
  DeviceBuffer a, b, sfa, sfb, c;
};

// All inputs of one problem on the device: e2m1 values from {0, +-0.5, +-1, +-1.5} and scales
// from {1, 2} (GPU MODE's generator), derived from (seed, group, tensor) by a counter-based hash
// so a given seed always gives the same data. Construction synchronises the device.
class ProblemData {
 public:
  ProblemData(const ProblemShape& shape, const DataSettings& settings);

  const ProblemShape& shape() const { return shape_; }
  const DataSettings& settings() const { return settings_; }
  const std::vector<GroupBuffers>& groups() const { return groups_; }
  std::vector<GroupDesc> descs() const;
  // Every output byte (padding columns included) set to 0xFF: NaN in f16, bf16 and f32.
  void poison_outputs(cudaStream_t stream) const;

 private:
  ProblemShape shape_;
  DataSettings settings_;
  std::vector<GroupBuffers> groups_;
};

// Device bytes the inputs and outputs of `shape` take (for the free-memory check).
std::size_t problem_device_bytes(const ProblemShape& shape, const DataSettings& settings);

// Row strides the CLI uses: A/B rows padded to 16 bytes, C rows to 8 elements.
std::int64_t packed_row_bytes(int k);
std::int64_t output_row_elems(int n);

// ---- GPU fill kernels (data.cu) --------------------------------------------------------------
// `bytes` must be a multiple of 16 and `p` 16-byte aligned.
void fill_e2m1_gpu_mode(void* p, std::size_t bytes, std::uint64_t seed, cudaStream_t stream);
void fill_scales_gpu_mode(void* p, std::size_t bytes, Format format, std::uint64_t seed,
                          cudaStream_t stream);
// Realistic data (SPEC 4: tensor-core power depends on the data): every byte random (all 16 e2m1
// nibbles), and scales spread over the normal range (E4M3 codes 0x08..0x7E: 2^-6..448; UE8M0
// 127 +- 10: 2^-10..2^10).
void fill_bytes_random(void* p, std::size_t bytes, std::uint64_t seed, cudaStream_t stream);
// `mx_max`: the largest UE8M0 code (kCheckpointMxScaleMax: the range of trained weights' scales,
// a block's largest magnitude <= 6, where MoE plans take one multiply per weight pair).
inline constexpr unsigned kDefaultMxScaleMax = 137, kCheckpointMxScaleMax = 127;
void fill_scales_random(void* p, std::size_t bytes, Format format, std::uint64_t seed, cudaStream_t stream,
                        unsigned mx_max = kDefaultMxScaleMax);
// `count` bf16 values from GPU MODE's {0, +-0.5, +-1, +-1.5} (W4A16 activations with exact sums).
void fill_bf16_gpu_mode(void* p, std::size_t count, std::uint64_t seed, cudaStream_t stream);
// `count` random non-zero bf16 values in [-1, 1] (for the cuBLAS ceiling).
void fill_bf16_random(void* p, std::size_t count, std::uint64_t seed, cudaStream_t stream);

}  // namespace fp4gemm::cli
