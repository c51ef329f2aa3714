// FP4GEMM_DIGEST=1: each bench suite case prints a 64-bit FNV-1a digest of the outputs it just
// timed ("digest <suite> <case> <hex>"), so two builds' outputs can be compared byte for byte from
// their logs (an A/B of a refactor: identical digests = identical bytes). Off by default; it adds a
// device-to-host copy after the timing, never inside it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace fp4gemm::cli {

inline bool digest_enabled() {
  const char* e = std::getenv("FP4GEMM_DIGEST");
  return e != nullptr && *e != '\0' && *e != '0';
}

class Digest {
 public:
  // Adds `bytes` bytes of device memory at `p` (after the work enqueued on `stream`).
  void add(const void* p, std::size_t bytes, cudaStream_t stream) {
    if (p == nullptr || bytes == 0) return;
    std::vector<unsigned char> host(bytes);
    if (cudaStreamSynchronize(stream) != cudaSuccess || cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
      ok_ = false;
      return;
    }
    for (unsigned char c : host) h_ = (h_ ^ c) * 1099511628211ull;
  }
  void print(const char* suite, int index) const {
    if (ok_) std::printf("digest %s %d %016llx\n", suite, index, static_cast<unsigned long long>(h_));
    else std::printf("digest %s %d copy-failed\n", suite, index);
    std::fflush(stdout);
  }

 private:
  std::uint64_t h_ = 1469598103934665603ull;
  bool ok_ = true;
};

}  // namespace fp4gemm::cli
