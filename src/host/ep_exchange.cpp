// fp4gemm::EpExchange (fp4gemm/ep.hpp): the expert-parallel exchange's buffer layout, validation
// and phases; the kernels are kernels/ep.cu (through the registry).
//
// Exchange buffer of every rank (the same offsets on every rank, each region 256-byte aligned):
//   counts  int32 [16]            counts[s]: rows rank s sends here this step (written by s, phase 1);
//                                 counts[8]: their sum (written here, phase 2: the layer's token count)
//   ids     int32 [capacity, k]   per received row, the local expert id of each of the token's k
//                                 slots whose expert is here, -1 for the others (and past the count)
//   rows    bf16 [capacity, H]    or packed e2m1 [capacity, H/2] + linear scales [capacity, H/vec]
//   y       bf16 [capacity * k, H] the local layer's expert output rows, in expert order (phase 3,
//                                 MoeLayerArgs::expert_rows), read in place by the combines of the
//                                 rows' origin ranks (phase 4)
//   row_of  int32 [capacity * k]  where pair (row, slot)'s output is in y (MoeLayerArgs::row_of)
// capacity = W * max_tokens: a token travels once to each rank that holds one of its experts (not
// once per pair), and the local layer expands it to its pairs with its own routing.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "fp4gemm/ep.hpp"
#include "fp4gemm/fp4gemm.hpp"
#include "host/core/cuda_check.hpp"
#include "host/core/device_memory.hpp"
#include "host/core/validate.hpp"
#include "host/device_guard.hpp"
#include "host/kernel_registry.hpp"  // (kernels/ep.hpp)

namespace fp4gemm {

namespace {

constexpr int kMaxWorld = detail::kEpMaxWorld, kMaxTopk = detail::kEpMaxTopk;
using Layout = detail::EpLayout;

std::size_t align256(std::size_t x) { return (x + 255) / 256 * 256; }

int vec_of(EpRows r) { return r == EpRows::nvfp4 ? 16 : 32; }

Layout layout_of(const EpConfig& c) {
  Layout l;
  const std::size_t cap = std::size_t{1} * c.world * c.max_tokens, k = static_cast<std::size_t>(c.topk),
                    H = static_cast<std::size_t>(c.hidden);
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t here = at;
    at = align256(at + bytes);
    return here;
  };
  l.counts = take(sizeof(int) * 2 * kMaxWorld);
  l.ids = take(sizeof(int) * cap * k);
  if (c.rows == EpRows::bf16) {
    l.rows = take(cap * H * 2);
  } else {
    l.packed = take(cap * H / 2);
    l.scales = take(cap * (H / vec_of(c.rows)));
  }
  l.y = take(cap * k * H * 2);
  l.row_of = take(sizeof(int) * cap * k);
  l.total = at;
  return l;
}

[[noreturn]] void fail(const char* argument, const std::string& message) { throw Error(argument, -1, message); }

void validate_config(const EpConfig& c) {
  if (c.world < 1 || c.world > kMaxWorld) fail("config.world", "must be in 1..8, got " + std::to_string(c.world));
  if (c.rank < 0 || c.rank >= c.world)
    fail("config.rank", "must be in 0..world-1 = " + std::to_string(c.world - 1) + ", got " + std::to_string(c.rank));
  if (c.experts < 1 || c.experts % c.world != 0)
    fail("config.experts", "must be a positive multiple of world = " + std::to_string(c.world) + ", got " +
                               std::to_string(c.experts));
  if (c.topk < 1 || c.topk > kMaxTopk) fail("config.topk", "must be in 1..32, got " + std::to_string(c.topk));
  if (c.hidden < 64 || c.hidden % 64 != 0 || c.hidden > 65536)
    fail("config.hidden", "must be a multiple of 64 in 64..65536, got " + std::to_string(c.hidden));
  if (c.max_tokens < 1 || c.max_tokens >= (1 << 28))  // (send_counts notes place * 8 + rank in an int)
    fail("config.max_tokens", "must be in 1..2^28 - 1, got " + std::to_string(c.max_tokens));
  // (the local layer plans world * max_tokens tokens of k pairs: at most 2^30 pairs)
  if (std::int64_t{c.world} * c.max_tokens * c.topk > (std::int64_t{1} << 30))
    fail("config.max_tokens", "world * max_tokens * topk must be at most 2^30, got " +
                                  std::to_string(std::int64_t{c.world} * c.max_tokens * c.topk));
  if (c.rows == EpRows::nvfp4 && !(c.global_scale > 0.0f && c.global_scale < INFINITY))
    fail("config.global_scale", "must be a positive finite number, got " + std::to_string(c.global_scale));
}

}  // namespace

struct EpExchange::Impl {
  EpConfig config;
  Layout at;
  DeviceInfo device;
  detail::DeviceAllocations memory;
  int* slot = nullptr;     // [max_tokens * k] phase 1's places (this rank's own)
  int2* pair_row = nullptr;  // [max_tokens * k] phase 2: (rank, received row) of each pair's token there
  int capacity = 0;        // received rows: W * max_tokens
  char** table = nullptr;  // [kMaxWorld] device copy of the buffer bases
  std::vector<char*> bases;
  void check_step(const EpStepArgs& a, bool ids, bool hidden) const {
    const EpConfig& c = config;
    if (a.tokens < 0 || a.tokens > c.max_tokens)
      fail("tokens", "must be in 0..max_tokens = " + std::to_string(c.max_tokens) + ", got " + std::to_string(a.tokens));
    if (a.tokens == 0) return;
    if (ids && a.topk_ids == nullptr) fail("topk_ids", "null pointer");
    if (hidden) {
      const std::int64_t ld = a.ld_hidden == 0 ? c.hidden : a.ld_hidden;
      if (a.hidden == nullptr || reinterpret_cast<std::uintptr_t>(a.hidden) % 16 != 0)
        fail("hidden", "must be a 16-byte aligned device pointer");
      if (ld < c.hidden || ld % 8 != 0)
        fail("ld_hidden", "must be a multiple of 8 and >= hidden, got " + std::to_string(ld));
    }
  }
  char* own() const { return bases[config.rank]; }
  detail::EpKernelArgs kernel_args() const {
    detail::EpKernelArgs e;
    e.peers = table, e.at = at;
    e.world = config.world, e.rank = config.rank, e.experts = config.experts, e.topk = config.topk;
    e.hidden = config.hidden, e.capacity = capacity, e.multiprocessors = device.multiprocessors;
    e.rows = config.rows, e.gs = config.rows == EpRows::nvfp4 ? config.global_scale : 1.0f;
    e.slot = slot, e.pair_row = pair_row;
    return e;
  }
};

std::size_t EpExchange::buffer_bytes(const EpConfig& config) {
  validate_config(config);
  return layout_of(config).total;
}

EpExchange::EpExchange(const EpConfig& config, std::span<void* const> buffers) : impl_(std::make_unique<Impl>()) {
  validate_config(config);
  Impl& p = *impl_;
  p.config = config;
  p.at = layout_of(config);
  p.device = device_info(config.device);
  p.config.device = p.device.index;
  p.capacity = config.world * config.max_tokens;
  if (static_cast<int>(buffers.size()) != config.world)
    fail("buffers", "needs one buffer per rank (" + std::to_string(config.world) + "), got " + std::to_string(buffers.size()));
  for (int r = 0; r < config.world; ++r) {
    if (buffers[r] == nullptr || reinterpret_cast<std::uintptr_t>(buffers[r]) % 256 != 0)
      fail("buffers", "buffer of rank " + std::to_string(r) + " must be a 256-byte aligned device pointer");
    p.bases.push_back(static_cast<char*>(buffers[r]));
  }
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, buffers[config.rank]) != cudaSuccess || attr.type != cudaMemoryTypeDevice ||
      attr.device != p.device.index) {
    (void)cudaGetLastError();
    fail("buffers", "this rank's buffer (rank " + std::to_string(config.rank) + ") is not device memory of device " +
                        std::to_string(p.device.index));
  }
  detail::DeviceGuard guard(p.device.index);
  p.slot = p.memory.allocate<int>(sizeof(int) * config.max_tokens * config.topk, "EpExchange workspace");
  p.pair_row = p.memory.allocate<int2>(sizeof(int2) * config.max_tokens * config.topk, "EpExchange workspace");
  // No place and no pair yet (-1): phases run out of order (a combine before any send_rows, or
  // send_rows before any send_counts) find nothing instead of uninitialised memory.
  FP4GEMM_CUDA_CHECK(cudaMemset(p.slot, 0xFF, sizeof(int) * config.max_tokens * config.topk), "EpExchange workspace");
  FP4GEMM_CUDA_CHECK(cudaMemset(p.pair_row, 0xFF, sizeof(int2) * config.max_tokens * config.topk), "EpExchange workspace");
  std::vector<char*> table(p.bases);
  table.resize(kMaxWorld, nullptr);
  p.table = p.memory.upload(table, "EpExchange workspace");
  // This rank's own rows start empty (ids -1, no counts, row_of -1): a layer run on them before a
  // first step reads nothing, and a combine before any layer run finds no rows.
  const std::size_t slots = std::size_t{1} * p.capacity * config.topk;
  FP4GEMM_CUDA_CHECK(cudaMemset(p.own() + p.at.counts, 0, sizeof(int) * 2 * kMaxWorld), "buffers");
  FP4GEMM_CUDA_CHECK(cudaMemset(p.own() + p.at.ids, 0xFF, sizeof(int) * slots), "buffers");
  FP4GEMM_CUDA_CHECK(cudaMemset(p.own() + p.at.row_of, 0xFF, sizeof(int) * slots), "buffers");
  FP4GEMM_CUDA_CHECK(cudaDeviceSynchronize(), "buffers");
}

EpExchange::~EpExchange() = default;
EpExchange::EpExchange(EpExchange&&) noexcept = default;
EpExchange& EpExchange::operator=(EpExchange&&) noexcept = default;

static const EpExchange::Impl& checked(const std::unique_ptr<EpExchange::Impl>& p) {
  if (!p) throw Error("exchange", -1, "used after being moved from");
  return *p;
}

void EpExchange::send_counts(const EpStepArgs& a, cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  p.check_step(a, true, false);
  detail::DeviceGuard guard(p.device.index);
  FP4GEMM_CUDA_CHECK(detail::launch_ep_count(p.kernel_args(), a.topk_ids, a.ids_int64, a.tokens, stream), "send_counts");
}

void EpExchange::send_rows(const EpStepArgs& a, cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  p.check_step(a, true, true);
  const EpConfig& c = p.config;
  detail::DeviceGuard guard(p.device.index);
  const long long ldx = a.ld_hidden == 0 ? c.hidden : a.ld_hidden;
  FP4GEMM_CUDA_CHECK(detail::launch_ep_send(p.kernel_args(), a.hidden, ldx, a.topk_ids, a.ids_int64, a.tokens, stream),
                     "send_rows");
}

EpReceived EpExchange::received() const {
  const Impl& p = checked(impl_);
  EpReceived r;
  r.capacity = p.capacity;
  r.topk = p.config.topk;
  r.counts = reinterpret_cast<const int*>(p.own() + p.at.counts);
  r.count = r.counts + kMaxWorld;
  r.ids = reinterpret_cast<const int*>(p.own() + p.at.ids);
  if (p.config.rows == EpRows::bf16) {
    r.rows = p.own() + p.at.rows;
  } else {
    r.packed = p.own() + p.at.packed;
    r.scales = p.own() + p.at.scales;
  }
  r.y = p.own() + p.at.y;
  r.row_of = reinterpret_cast<int*>(p.own() + p.at.row_of);
  return r;
}

void EpExchange::combine(const EpStepArgs& a, cudaStream_t stream) const {
  const Impl& p = checked(impl_);
  p.check_step(a, true, false);
  const EpConfig& c = p.config;
  if (a.tokens == 0) return;
  if (a.topk_weights == nullptr) fail("topk_weights", "null pointer");
  const std::int64_t ld_out = a.ld_out == 0 ? c.hidden : a.ld_out;
  if (a.out == nullptr || reinterpret_cast<std::uintptr_t>(a.out) % 16 != 0) fail("out", "must be a 16-byte aligned device pointer");
  if (ld_out < c.hidden || ld_out % 8 != 0) fail("ld_out", "must be a multiple of 8 and >= hidden, got " + std::to_string(ld_out));
  detail::DeviceGuard guard(p.device.index);
  const std::int64_t pairs = std::int64_t{a.tokens} * c.topk;
  detail::check_device_buffer("out", -1, a.out, ((std::int64_t{a.tokens} - 1) * ld_out + c.hidden) * 2, p.device.index);
  detail::check_device_buffer("topk_ids", -1, a.topk_ids, pairs * (a.ids_int64 ? 8 : 4), p.device.index);
  detail::check_device_buffer("topk_weights", -1, a.topk_weights, pairs * (a.weights_bf16 ? 2 : 4), p.device.index);
  FP4GEMM_CUDA_CHECK(detail::launch_ep_combine(p.kernel_args(), a.topk_ids, a.ids_int64, a.topk_weights, a.weights_bf16,
                                               a.tokens, a.out, ld_out, stream),
                     "combine");
}

const EpConfig& EpExchange::config() const { return checked(impl_).config; }

std::string EpExchange::describe() const {
  const Impl& p = checked(impl_);
  const EpConfig& c = p.config;
  std::ostringstream os;
  os << "EpExchange rank " << c.rank << " of " << c.world << ": " << c.experts << " experts (" << c.experts / c.world
     << " here), top-" << c.topk << ", H " << c.hidden << ", up to " << c.max_tokens << " tokens per rank; rows travel as "
     << (c.rows == EpRows::bf16 ? "bf16" : c.rows == EpRows::nvfp4 ? "NVFP4 (packed e2m1 + E4M3 scales)" : "MXFP4 (packed e2m1 + UE8M0 scales)")
     << "; each token sent once per rank holding one of its experts; receive capacity " << p.capacity
     << " rows; exchange buffer " << p.at.total / 1024 << " KiB per rank";
  return os.str();
}

}  // namespace fp4gemm
