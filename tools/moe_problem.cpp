// MoE problems for the CLI: routings, device data, plan, check and the dynamic-routing loop.
#include "moe_problem.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "data.hpp"
#include "fp4gemm/formats.hpp"
#include "fp4gemm/reference.hpp"
#include "host/core/moe_validate.hpp"

namespace fp4gemm::cli {

namespace {

// Independent random streams per tensor, as ProblemData's (data.cu).
std::uint64_t moe_seed(std::uint64_t seed, std::uint64_t tensor) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + tensor;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::int64_t bf16_row_bytes(int k) { return (std::int64_t{k} * 2 + 15) / 16 * 16; }

// Host memory the CUDA driver can copy from asynchronously.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes) {
    CLI_CUDA_CHECK(cudaMallocHost(&p_, std::max<std::size_t>(bytes, 16)), "dynamic routing (pinned memory)");
  }
  ~PinnedBuffer() { cudaFreeHost(p_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  int* ints() const { return static_cast<int*>(p_); }

 private:
  void* p_ = nullptr;
};

}  // namespace

// ---- shapes, settings, routings --------------------------------------------------------------------

std::string MoeShape::describe() const {
  std::ostringstream os;
  os << "E=" << experts << " N=" << n << " K=" << k << " T=" << tokens << " top-" << topk;
  return os.str();
}

std::string MoeSettings::describe() const {
  std::ostringstream os;
  os << to_string(format) << " weights x "
     << (activation == MoeActivation::bf16 ? "bf16 activations (W4A16)"
                                            : std::string(to_string(format)) + " activations (W4A4)")
     << ", " << to_string(scales) << " weight scales -> " << to_string(out) << ", " << to_string(layout)
     << ", routing " << routing << ", " << (gpumode_values ? "GPU MODE values"
                                  : checkpoint_scales ? "full-range values, checkpoint-range MXFP4 scales (codes 117..127)"
                                                      : "full-range values");
  return os.str();
}

const std::vector<std::string>& moe_routings() {
  static const std::vector<std::string> kinds{"uniform", "skewed", "balanced", "one-hot"};
  return kinds;
}

HostRouting draw_routing(int experts, int tokens, int topk, const std::string& kind, std::mt19937_64& rng) {
  const std::size_t rows = static_cast<std::size_t>(tokens) * topk;
  std::vector<int> ids(rows);
  if (kind == "balanced") {
    for (std::size_t i = 0; i < rows; ++i) ids[i] = static_cast<int>(i % experts);
  } else if (kind == "one-hot") {
    for (std::size_t i = 0; i < rows; ++i) ids[i] = static_cast<int>(i % topk);
  } else if (kind == "uniform") {
    std::vector<int> perm(experts);
    std::iota(perm.begin(), perm.end(), 0);
    for (int t = 0; t < tokens; ++t)
      for (int j = 0; j < topk; ++j) {  // a partial Fisher-Yates shuffle: topk distinct experts
        std::uniform_int_distribution<int> pick(j, experts - 1);
        std::swap(perm[j], perm[pick(rng)]);
        ids[static_cast<std::size_t>(t) * topk + j] = perm[j];
      }
  } else if (kind == "skewed") {
    // Expert of popularity rank r has weight (r + 1)^-1.2; topk distinct experts per token drawn
    // with probability proportional to weight (Efraimidis-Spirakis: the largest log(u) / weight).
    std::vector<int> rank(experts);
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);
    std::vector<double> weight(experts);
    for (int e = 0; e < experts; ++e) weight[e] = std::pow(rank[e] + 1.0, -1.2);
    std::uniform_real_distribution<double> uniform(std::nextafter(0.0, 1.0), 1.0);
    std::vector<std::pair<double, int>> keys(experts);
    for (int t = 0; t < tokens; ++t) {
      for (int e = 0; e < experts; ++e) keys[e] = {std::log(uniform(rng)) / weight[e], e};
      std::partial_sort(keys.begin(), keys.begin() + topk, keys.end(), std::greater<>());
      for (int j = 0; j < topk; ++j) ids[static_cast<std::size_t>(t) * topk + j] = keys[j].second;
    }
  } else {
    throw Error("--routing", -1, "unknown routing '" + kind + "' (expected uniform, skewed, balanced or one-hot)");
  }
  // Counting sort by expert, stable by (token, slot): what fp4gemm.moe.align_routing computes.
  HostRouting r;
  r.rows = static_cast<int>(rows);
  r.counts.assign(experts, 0);
  for (int e : ids) ++r.counts[e];
  r.offsets.assign(experts + 1, 0);
  for (int e = 0; e < experts; ++e) r.offsets[e + 1] = r.offsets[e] + r.counts[e];
  r.gather.resize(rows);
  std::vector<int> next(r.offsets.begin(), r.offsets.end() - 1);
  for (std::size_t i = 0; i < rows; ++i) r.gather[next[ids[i]]++] = static_cast<int>(i / topk);
  for (int c : r.counts) r.active_experts += c > 0, r.max_rows = std::max(r.max_rows, c);
  return r;
}

void validate_moe_shape(const MoeShape& s, const MoeSettings& settings) {
  if (s.experts < 1 || s.experts > detail::kMaxMoeExperts)
    throw Error("--experts", -1, "must be 1.." + std::to_string(detail::kMaxMoeExperts) + " (got " +
                                     std::to_string(s.experts) + ")");
  if (s.n < 1) throw Error("--n", -1, "N must be positive (got " + std::to_string(s.n) + ")");
  const int block = scale_block_size(settings.format);
  if (s.k < 1) throw Error("--k", -1, "K must be positive (got " + std::to_string(s.k) + ")");
  if (s.k % block != 0)
    throw Error("--k", -1, "K = " + std::to_string(s.k) + " is not a multiple of the " + to_string(settings.format) +
                               " scale block (" + std::to_string(block) + ")");
  if (s.tokens < 1) throw Error("--tokens", -1, "must be at least 1 (got " + std::to_string(s.tokens) + ")");
  if (s.topk < 1 || s.topk > s.experts)
    throw Error("--topk", -1, "must be in [1, experts = " + std::to_string(s.experts) + "] (got " +
                                  std::to_string(s.topk) + ")");
  if (static_cast<std::int64_t>(s.tokens) * s.topk > INT_MAX)
    throw Error("--tokens", -1, "tokens x topk must stay below 2^31");
  const auto& kinds = moe_routings();
  if (std::find(kinds.begin(), kinds.end(), settings.routing) == kinds.end())
    throw Error("--routing", -1, "unknown routing '" + settings.routing + "'");
  if (settings.activation == MoeActivation::bf16 && settings.format != Format::mxfp4)
    throw Error("--act", -1, "bf16 activations (W4A16) run with mxfp4 weights");
  if (settings.pieces && (s.n % 16 != 0 || s.k % 32 != 0))
    throw Error("--weight-layout", -1, "pieces need N a multiple of 16 and K a multiple of 32 (got N " +
                                           std::to_string(s.n) + ", K " + std::to_string(s.k) + ")");
}

// ---- the problem -----------------------------------------------------------------------------------

MoeProblem::MoeProblem(const MoeShape& shape, const MoeSettings& settings, std::vector<HostRouting> pool)
    : shape_(shape), settings_(settings), pool_(std::move(pool)) {
  const int e = shape.experts, n = shape.n, k = shape.k;
  const bool fp4 = settings.activation == MoeActivation::fp4;
  const bool masked = settings.layout == MoeLayout::masked;
  const std::int64_t cols = k / scale_block_size(settings.format);
  const std::int64_t ldw = packed_row_bytes(k);
  const std::int64_t scale_stride = static_cast<std::int64_t>(formats::scale_bytes(settings.scales, n, cols));
  if (masked) {
    for (const HostRouting& r : pool_) capacity_ = std::max(capacity_, r.max_rows);
    capacity_ = std::max(capacity_, 1);
  } else {
    capacity_ = pool_.front().rows;
  }
  a_rows_ = masked ? e * capacity_ : shape.tokens;
  lda_ = fp4 ? packed_row_bytes(k) : bf16_row_bytes(k);
  a_scale_cols_ = fp4 ? cols : 0;
  ldc_ = output_row_elems(n);
  const std::int64_t out_rows = masked ? std::int64_t{e} * capacity_ : capacity_;
  const std::size_t esize = out_type_size(settings.out);

  const std::size_t bytes_w = static_cast<std::size_t>(e) * n * ldw, bytes_ws = static_cast<std::size_t>(e) * scale_stride;
  const std::size_t bytes_a = static_cast<std::size_t>(a_rows_) * lda_, bytes_as = static_cast<std::size_t>(a_rows_) * cols;
  const std::size_t bytes_c = static_cast<std::size_t>(out_rows) * ldc_ * esize;
  // The plan's workspace holds the dequantised activations of every row (16-bit, K padded to 64).
  const std::size_t workspace = static_cast<std::size_t>(masked ? out_rows : capacity_) * ((k + 63) / 64 * 64) * 2;
  require_free_memory(bytes_w + bytes_ws + bytes_a + bytes_as + bytes_c + workspace + (64u << 20), "MoE problem data");
  w_ = DeviceBuffer(bytes_w, "data (weights)");
  w_scales_ = DeviceBuffer(bytes_ws, "data (weight scales)");
  a_ = DeviceBuffer(bytes_a, "data (activations)");
  if (fp4) a_scales_ = DeviceBuffer(bytes_as, "data (activation scales)");
  if (masked) {
    counts_ = DeviceBuffer(static_cast<std::size_t>(e) * 4, "data (expert counts)");
  } else {
    offsets_ = DeviceBuffer(static_cast<std::size_t>(e + 1) * 4, "data (expert offsets)");
    gather_ = DeviceBuffer(static_cast<std::size_t>(capacity_) * 4, "data (gather index)");
  }
  c_ = DeviceBuffer(bytes_c, "data (output)");

  // Whole allocations are filled (padding included): every byte is a valid value.
  const std::uint64_t seed = settings.seed;
  if (settings.gpumode_values) {
    fill_e2m1_gpu_mode(w_.get(), w_.padded_bytes(), moe_seed(seed, 1), nullptr);
    fill_scales_gpu_mode(w_scales_.get(), w_scales_.padded_bytes(), settings.format, moe_seed(seed, 2), nullptr);
    if (fp4) {
      fill_e2m1_gpu_mode(a_.get(), a_.padded_bytes(), moe_seed(seed, 3), nullptr);
      fill_scales_gpu_mode(a_scales_.get(), a_scales_.padded_bytes(), settings.format, moe_seed(seed, 4), nullptr);
    } else {
      fill_bf16_gpu_mode(a_.get(), a_.padded_bytes() / 2, moe_seed(seed, 3), nullptr);
    }
  } else {
    fill_bytes_random(w_.get(), w_.padded_bytes(), moe_seed(seed, 1), nullptr);
    fill_scales_random(w_scales_.get(), w_scales_.padded_bytes(), settings.format, moe_seed(seed, 2), nullptr,
                       settings.checkpoint_scales ? kCheckpointMxScaleMax : kDefaultMxScaleMax);
    if (fp4) {
      fill_bytes_random(a_.get(), a_.padded_bytes(), moe_seed(seed, 3), nullptr);
      fill_scales_random(a_scales_.get(), a_scales_.padded_bytes(), settings.format, moe_seed(seed, 4), nullptr);
    } else {
      fill_bf16_random(a_.get(), a_.padded_bytes() / 2, moe_seed(seed, 3), nullptr);
    }
  }
  poison_output(nullptr);
  CLI_CUDA_CHECK(cudaDeviceSynchronize(), "data");

  MoeWeights w;
  w.experts = e, w.n = n, w.k = k;
  w.w = w_.get();
  w.ldw = ldw;
  w.expert_stride = n * ldw;
  if (settings.pieces) {  // the same bytes repacked (the reference still reads the rows)
    const std::size_t bytes = static_cast<std::size_t>(pieces_bytes(n, k)) * e;
    require_free_memory(bytes, "the weights in pieces");
    pieces_ = DeviceBuffer(bytes, "data (weights in pieces)");
    pack_pieces(w_.get(), pieces_.get(), e, n, k, settings.format);
    CLI_CUDA_CHECK(cudaDeviceSynchronize(), "data");
    w.w = pieces_.get(), w.ldw = 0, w.expert_stride = 0;
  }
  w.scales = w_scales_.get();
  w.scale_expert_stride = scale_stride;
  fp4gemm::MoeOptions o;
  o.format = settings.format;
  o.scale_layout = settings.scales;
  o.out_type = settings.out;
  o.activation = settings.activation;
  o.layout = settings.layout;
  o.capacity = capacity_;
  o.tuning = settings.tuning;
  if (settings.pieces) o.weight_layout = WeightLayout::pieces;
  plan_ = std::make_unique<MoeGemm>(w, o);
  use_routing(0);
}

void MoeProblem::use_routing(std::size_t i) {
  const HostRouting& r = pool_.at(i);
  if (settings_.layout == MoeLayout::masked) {
    CLI_CUDA_CHECK(cudaMemcpy(counts_.get(), r.counts.data(), r.counts.size() * 4, cudaMemcpyHostToDevice), "routing");
  } else {
    CLI_CUDA_CHECK(cudaMemcpy(offsets_.get(), r.offsets.data(), r.offsets.size() * 4, cudaMemcpyHostToDevice), "routing");
    CLI_CUDA_CHECK(cudaMemcpy(gather_.get(), r.gather.data(), r.gather.size() * 4, cudaMemcpyHostToDevice), "routing");
  }
  current_ = i;
}

MoeArgs MoeProblem::args() const {
  MoeArgs a;
  a.a = a_.get();
  a.lda = lda_;
  a.a_scales = settings_.activation == MoeActivation::fp4 ? a_scales_.get() : nullptr;
  if (settings_.layout == MoeLayout::masked) {
    a.expert_counts = counts_.as<const int>();
  } else {
    a.expert_offsets = offsets_.as<const int>();
    a.gather_index = gather_.as<const int>();
    a.num_tokens = shape_.tokens;
  }
  a.c = c_.get();
  a.ldc = ldc_;
  return a;
}

void MoeProblem::run(cudaStream_t stream) const { plan_->run(args(), stream); }

void MoeProblem::poison_output(cudaStream_t stream) const {
  CLI_CUDA_CHECK(cudaMemsetAsync(c_.get(), 0xFF, c_.padded_bytes(), stream), "data");
}

double MoeProblem::flops() const { return 2.0 * routing().rows * shape_.n * static_cast<double>(shape_.k); }

double MoeProblem::bytes() const {
  const HostRouting& r = routing();
  const double n = shape_.n, k = shape_.k, cols = k / scale_block_size(settings_.format);
  const double weights = r.active_experts * (n * k / 2 + n * cols);
  const double act_row = settings_.activation == MoeActivation::fp4 ? k / 2 + cols : 2 * k;
  // Contiguous: each token is read once (the gather reads it again for its other experts, from L2);
  // masked: every routed row is its own.
  const double act_rows = settings_.layout == MoeLayout::masked ? r.rows : shape_.tokens;
  return weights + act_rows * act_row + static_cast<double>(r.rows) * n * out_type_size(settings_.out);
}

// ---- check -------------------------------------------------------------------------------------------

CheckReport MoeProblem::check(cudaStream_t stream) {
  poison_output(stream);
  run(stream);
  CLI_CUDA_CHECK(cudaStreamSynchronize(stream), "check (run)");
  plan_->check(stream);
  const HostRouting& r = routing();
  const int e = shape_.experts, n = shape_.n;
  const bool masked = settings_.layout == MoeLayout::masked;
  const std::vector<std::uint8_t> w = download(w_), ws = download(w_scales_), out = download(c_);
  std::vector<std::uint8_t> a = download(a_), as = download(a_scales_);

  reference::MoeHostProblem p;
  p.experts = e, p.n = n, p.k = shape_.k;
  p.format = settings_.format;
  p.bf16_activations = settings_.activation == MoeActivation::bf16;
  p.a = a.data();
  p.lda = lda_;
  p.a_scales = p.bf16_activations ? nullptr : as.data();
  p.a_rows = a_rows_;
  p.w = w.data();
  p.ldw = packed_row_bytes(shape_.k);
  p.w_expert_stride = n * p.ldw;
  p.w_scales = ws.data();
  p.w_layout = settings_.scales;
  p.w_scale_expert_stride = static_cast<std::int64_t>(ws.size()) / e;
  p.offsets = masked ? nullptr : r.offsets.data();
  p.counts = masked ? r.counts.data() : nullptr;
  p.capacity = capacity_;
  p.gather = masked ? nullptr : r.gather.data();
  p.ldc = ldc_;
  p.out_type = settings_.out;
  std::vector<std::uint8_t> ref(out.size(), 0xFF);
  p.c = ref.data();
  reference::moe_gemm(p);

  CheckReport report;
  report.require_bit_identical = settings_.gpumode_values;
  report.fp32_bound = !settings_.gpumode_values;
  const std::int64_t out_rows = masked ? std::int64_t{e} * capacity_ : capacity_;
  std::vector<double> exact, slack;
  if (report.fp32_bound) {
    // The float64 result, rounded once to f32, and the slack 2 K 2^-24 sum_k |a_k w_k|, from the
    // same reference on copies of the data with every sign cleared (scales are positive).
    auto f32_pass = [&](const std::uint8_t* a_data, const std::uint8_t* w_data) {
      std::vector<float> c(static_cast<std::size_t>(out_rows) * ldc_, 0.0f);
      reference::MoeHostProblem q = p;
      q.a = a_data, q.w = w_data, q.c = c.data(), q.out_type = OutType::f32;
      reference::moe_gemm(q);
      std::vector<double> v(static_cast<std::size_t>(out_rows) * n);
      for (std::int64_t row = 0; row < out_rows; ++row)
        for (int col = 0; col < n; ++col) v[row * n + col] = c[row * ldc_ + col];
      return v;
    };
    exact = f32_pass(a.data(), w.data());
    std::vector<std::uint8_t> w_abs(w);
    for (auto& byte : w_abs) byte &= 0x77;  // both nibbles' sign bits
    if (p.bf16_activations) {
      for (std::size_t i = 1; i < a.size(); i += 2) a[i] &= 0x7F;  // bf16 sign bits (little endian)
    } else {
      for (auto& byte : a) byte &= 0x77;
    }
    slack = f32_pass(a.data(), w_abs.data());
    for (double& s : slack) s *= 2.0 * shape_.k * 0x1p-24;
  }
  const std::size_t esize = out_type_size(settings_.out);
  auto compare = [&](std::int64_t row0, std::int64_t rows) {
    const std::size_t byte0 = static_cast<std::size_t>(row0) * ldc_ * esize;
    compare_rows(out.data() + byte0, ref.data() + byte0, rows, n, ldc_, settings_.out, report,
                 report.fp32_bound ? exact.data() + row0 * n : nullptr,
                 report.fp32_bound ? slack.data() + row0 * n : nullptr);
  };
  if (!masked) {
    compare(0, r.rows);  // every row is routed: capacity = tokens * topk
  } else {
    for (int x = 0; x < e; ++x) {
      const std::int64_t base = std::int64_t{x} * capacity_;
      compare(base, r.counts[x]);
      const std::size_t rest = static_cast<std::size_t>(base + r.counts[x]) * ldc_ * esize;
      count_outside_writes(out.data() + rest, capacity_ - r.counts[x], ldc_, settings_.out, report);
    }
  }
  return report;
}

// ---- the dynamic-routing loop ------------------------------------------------------------------------

double MoeProblem::dynamic_us_per_step(int steps, cudaStream_t stream) {
  const bool masked = settings_.layout == MoeLayout::masked;
  const int e = shape_.experts;
  // Every routing of the pool in pinned memory: offsets and gather index (or counts) back to back.
  const std::size_t per = masked ? e : static_cast<std::size_t>(e + 1) + capacity_;
  PinnedBuffer staging(pool_.size() * per * 4);
  for (std::size_t i = 0; i < pool_.size(); ++i) {
    int* dst = staging.ints() + i * per;
    const HostRouting& r = pool_[i];
    if (masked) {
      std::copy(r.counts.begin(), r.counts.end(), dst);
    } else {
      std::copy(r.offsets.begin(), r.offsets.end(), dst);
      std::copy(r.gather.begin(), r.gather.end(), dst + e + 1);
    }
  }
  auto step = [&](int s) {
    const std::size_t i = static_cast<std::size_t>(s) % pool_.size();
    const int* src = staging.ints() + i * per;
    if (masked) {
      CLI_CUDA_CHECK(cudaMemcpyAsync(counts_.get(), src, e * 4, cudaMemcpyHostToDevice, stream), "dynamic routing");
    } else {
      CLI_CUDA_CHECK(cudaMemcpyAsync(offsets_.get(), src, (e + 1) * 4, cudaMemcpyHostToDevice, stream), "dynamic routing");
      CLI_CUDA_CHECK(cudaMemcpyAsync(gather_.get(), src + e + 1, static_cast<std::size_t>(capacity_) * 4,
                                     cudaMemcpyHostToDevice, stream),
                     "dynamic routing");
    }
    run(stream);
    current_ = i;
  };
  constexpr int kWarmup = 5;
  for (int s = 0; s < kWarmup; ++s) step(s);
  CLI_CUDA_CHECK(cudaStreamSynchronize(stream), "dynamic routing");
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) step(kWarmup + s);
  CLI_CUDA_CHECK(cudaStreamSynchronize(stream), "dynamic routing");
  const auto t1 = std::chrono::steady_clock::now();
  plan_->check(stream);
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / steps;
}

}  // namespace fp4gemm::cli
