// GPU-test harness for the device-driven MoE GEMM: data, routings, buffers, checks.
#include "gpu/moe_problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/reference.hpp"

namespace fp4gemm::test::moe {

namespace {

std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

int uniform(std::mt19937_64& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

bool chance(std::mt19937_64& rng, double p) { return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p; }

std::string fmt(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string hex_bits(std::uint32_t bits, OutType type) {
  char buf[16];
  std::snprintf(buf, sizeof buf, type == OutType::f32 ? "0x%08x" : "0x%04x", bits);
  return buf;
}

bool power_of_two_or_zero(float a) {
  if (a == 0.0f) return true;
  if (!std::isfinite(a)) return false;
  int e = 0;
  return std::fabs(std::frexp(a, &e)) == 0.5f;
}

std::uint8_t nan_code(std::mt19937_64& rng, Format format) {
  return format == Format::nvfp4 ? static_cast<std::uint8_t>((rng() & 1) ? 0x7F : 0xFF) : std::uint8_t{0xFF};
}

float pick_alpha(std::mt19937_64& rng, Values values) {
  if (values == Values::gpumode) {  // powers of two (and 0) keep every output exact
    constexpr float kExact[] = {1.0f, 2.0f, 0.5f, 0.25f, 4.0f, -1.0f, -0.5f, 0.0f};
    return kExact[uniform(rng, 0, 7)];
  }
  return static_cast<float>(std::uniform_real_distribution<double>(-3.0, 3.0)(rng));
}

// The poison's bytes (little endian) in an output element.
void poison_pattern(Poison poison, OutType type, std::uint8_t (&pattern)[4]) {
  const std::uint32_t bits = poison_bits(poison, type);
  std::memcpy(pattern, &bits, 4);
}

double bf16_to_double(std::uint16_t bits) {
  const std::uint32_t w = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

}  // namespace

const char* to_string(AlphaMode a) {
  switch (a) {
    case AlphaMode::none:
      return "none";
    case AlphaMode::scalar:
      return "scalar";
    case AlphaMode::device:
      return "device";
  }
  return "?";
}

const char* to_string(RoutingKind k) {
  switch (k) {
    case RoutingKind::uniform:
      return "uniform";
    case RoutingKind::one_expert:
      return "one-expert";
    case RoutingKind::few_experts:
      return "few-experts";
    case RoutingKind::full:
      return "full";
    case RoutingKind::partial:
      return "partial";
    case RoutingKind::shifted:
      return "shifted";
    case RoutingKind::skewed:
      return "skewed";
    case RoutingKind::empty:
      return "empty";
    case RoutingKind::topk:
      return "topk";
    case RoutingKind::balanced:
      return "balanced";
  }
  return "?";
}

// ---- configuration --------------------------------------------------------------------------------

int MoeConfig::rows() const { return layout == MoeLayout::masked ? experts * capacity : capacity; }

int MoeConfig::a_rows() const { return gather ? (num_tokens > 0 ? num_tokens : capacity) : rows(); }

std::string MoeConfig::describe() const {
  std::ostringstream os;
  os << "seed=" << seed << " " << fp4gemm::to_string(format) << "/" << fp4gemm::to_string(scale_layout) << " x "
     << (activation == MoeActivation::fp4 ? fp4gemm::to_string(format) : "bf16") << " acts -> "
     << fp4gemm::to_string(out_type) << " " << test::to_string(values) << " " << fp4gemm::to_string(layout);
  if (gather) os << "+gather(tokens=" << a_rows() << ")";
  os << " E=" << experts << " N=" << n << " K=" << k << " capacity=" << capacity << " alpha=" << to_string(alpha);
  if (padded) os << " padded";
  if (default_strides) os << " default-strides";
  if (nan_scales) os << " nan-scales";
  if (max_scale_code > 0) os << " max-scale-code=" << max_scale_code;
  if (guard_bytes != 4096) os << " guard=" << guard_bytes;
  return os.str();
}

MoeConfig random_moe_config(std::uint64_t seed, double mac_budget) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull);
  MoeConfig c;
  c.format = (rng() & 1) ? Format::mxfp4 : Format::nvfp4;
  c.activation = c.format == Format::mxfp4 && chance(rng, 0.4) ? MoeActivation::bf16 : MoeActivation::fp4;
  c.scale_layout = (rng() & 1) ? ScaleLayout::blocked : ScaleLayout::linear;
  c.out_type = static_cast<OutType>(uniform(rng, 0, 2));
  c.values = (rng() & 1) ? Values::full : Values::gpumode;
  c.layout = chance(rng, 0.3) ? MoeLayout::masked : MoeLayout::contiguous;
  c.gather = c.layout == MoeLayout::contiguous && chance(rng, 0.5);
  const int r = uniform(rng, 0, 19);
  c.experts = r < 2    ? 1
              : r < 8  ? uniform(rng, 2, 8)
              : r < 14 ? uniform(rng, 9, 64)
              : r < 18 ? uniform(rng, 65, 511)
                       : 512;
  const int vec = scale_block_size(c.format);
  switch (uniform(rng, 0, 3)) {
    case 0:
      c.k = vec * uniform(rng, 1, 4);
      break;
    case 1:
      c.k = vec * (1 << uniform(rng, 0, 5));
      break;
    default:
      c.k = vec * uniform(rng, 1, 32);
      break;
  }
  switch (uniform(rng, 0, 3)) {
    case 0:
      c.n = uniform(rng, 1, 16);
      break;
    case 1:
      c.n = 8 * uniform(rng, 1, 64);
      break;
    case 2:
      c.n = 1 << uniform(rng, 3, 9);
      break;
    default:
      c.n = uniform(rng, 1, 520);
      break;
  }
  int cap;
  switch (uniform(rng, 0, 2)) {
    case 0:
      cap = uniform(rng, 1, 64);
      break;
    case 1:
      cap = uniform(rng, 65, 1024);
      break;
    default:
      cap = uniform(rng, 1025, 8192);
      break;
  }
  if (c.layout == MoeLayout::masked) cap = std::max(1, std::min(cap, 16384 / c.experts));
  const auto macs = [&] {
    const double rows = c.layout == MoeLayout::masked ? static_cast<double>(cap) * c.experts : cap;
    return rows * c.n * c.k;
  };
  while (macs() > mac_budget) {  // N and K first: the large row counts are the point
    if (c.n > 8 && (c.k <= 2 * vec || (rng() & 1)))
      c.n = (c.n + 1) / 2;
    else if (c.k > vec)
      c.k = std::max(vec, c.k / 2 / vec * vec);
    else if (c.n > 1)
      c.n = (c.n + 1) / 2;
    else
      cap = std::max(1, cap / 2);
  }
  while (static_cast<double>(c.experts) * c.n * c.k / 2 > 16.0e6) {  // weights <= 16 MB
    if (c.n > 8 && (c.k <= 2 * vec || (rng() & 1)))
      c.n = (c.n + 1) / 2;
    else
      c.k = std::max(vec, c.k / 2 / vec * vec);
  }
  c.capacity = cap;
  c.num_tokens = c.gather ? uniform(rng, 1, 2 * cap) : 0;
  c.alpha = static_cast<AlphaMode>(uniform(rng, 0, 2));
  c.padded = chance(rng, 0.4);
  c.default_strides = !c.padded && (c.k / 2) % 16 == 0 && chance(rng, 0.5);
  c.nan_scales = c.values == Values::full && chance(rng, 0.2);
  c.seed = rng();
  return c;
}

// ---- weights ----------------------------------------------------------------------------------------

MoeWeightSet::MoeWeightSet(const MoeConfig& cfg, bool on_device) : cfg_(cfg) {
  if (cfg.experts < 1 || cfg.n < 1 || cfg.k < 1 || cfg.capacity < 1 || cfg.k % scale_block_size(cfg.format) != 0)
    throw std::invalid_argument("MoeConfig: not a valid shape: " + cfg.describe());
  if (cfg.gather && cfg.layout != MoeLayout::contiguous)
    throw std::invalid_argument("MoeConfig: gather needs the contiguous layout");
  if (cfg.default_strides && (cfg.padded || (cfg.k / 2) % 16 != 0))
    throw std::invalid_argument("MoeConfig: default strides need K/2 % 16 == 0 and no padding");
  std::mt19937_64 rng(cfg.seed ^ 0x6A09E667F3BCC908ull);
  const int E = cfg.experts, N = cfg.n, K = cfg.k;
  const bool pad = cfg.padded;
  cols = K / scale_block_size(cfg.format);
  ldw = round_up(K / 2, 16) + (pad ? 16 * uniform(rng, 0, 2) : 0);
  expert_stride = std::int64_t{N} * ldw + (pad ? 16 * uniform(rng, 1, 4) : 0);
  const auto dense = static_cast<std::int64_t>(formats::scale_bytes(cfg.scale_layout, N, cols));
  scale_stride =
      dense + (pad ? (cfg.scale_layout == ScaleLayout::blocked ? 16 * uniform(rng, 1, 3) : uniform(rng, 1, 40)) : 0);
  const std::int64_t a_row = cfg.activation == MoeActivation::fp4 ? K / 2 : std::int64_t{2} * K;
  lda = round_up(a_row, 16) + (pad ? 16 * uniform(rng, 0, 3) : 0);
  ldc = round_up(N, 8) + (pad ? 8 * uniform(rng, 1, 3) : 0);

  w.resize(static_cast<std::size_t>(E * expert_stride));
  fill_random(rng, w.data(), w.size());                             // row and expert padding: garbage
  scales.assign(static_cast<std::size_t>(E * scale_stride), 0xFF);  // stride padding: NaN codes
  scales_linear.resize(static_cast<std::size_t>(E) * N * cols);
  for (int e = 0; e < E; ++e) {
    const std::vector<std::uint8_t> packed = random_packed(rng, cfg.values, N, K, ldw);
    std::memcpy(w.data() + e * expert_stride, packed.data(), packed.size());
    std::vector<std::uint8_t> lin = random_scales(rng, cfg.format, cfg.values, N, cols);
    if (cfg.nan_scales && cfg.values == Values::full && chance(rng, 0.3))
      lin[static_cast<std::size_t>(uniform(rng, 0, N - 1) * cols + uniform(rng, 0, static_cast<int>(cols) - 1))] =
          nan_code(rng, cfg.format);
    if (cfg.max_scale_code > 0 && cfg.format == Format::mxfp4 && !lin.empty()) {
      for (std::uint8_t& c : lin) c = static_cast<std::uint8_t>(std::min<int>(c, cfg.max_scale_code));
      lin[static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(lin.size()) - 1))] = 0;
      lin[static_cast<std::size_t>(uniform(rng, 0, static_cast<int>(lin.size()) - 1))] =
          static_cast<std::uint8_t>(cfg.max_scale_code);
    }
    std::memcpy(scales_linear.data() + static_cast<std::size_t>(e) * N * cols, lin.data(), lin.size());
    std::vector<std::uint8_t> dev = lin;
    if (cfg.scale_layout == ScaleLayout::blocked) {  // padding rows / columns: NaN codes
      dev.assign(formats::blocked_scale_bytes(N, cols), 0);
      formats::linear_to_blocked(lin.data(), N, cols, dev.data());
      std::vector<char> used(dev.size(), 0);
      for (int r = 0; r < N; ++r)
        for (std::int64_t c = 0; c < cols; ++c) used[formats::blocked_offset(r, c, cols)] = 1;
      for (std::size_t i = 0; i < dev.size(); ++i)
        if (!used[i]) dev[i] = 0xFF;
    }
    std::memcpy(scales.data() + e * scale_stride, dev.data(), dev.size());
  }
  if (cfg.alpha == AlphaMode::scalar) scalar_alpha = pick_alpha(rng, cfg.values);
  if (cfg.alpha == AlphaMode::device) {
    device_alphas.resize(static_cast<std::size_t>(E));
    for (float& a : device_alphas) a = pick_alpha(rng, cfg.values);
  }

  dq_.resize(static_cast<std::size_t>(E));
  dq_once_ = std::make_unique<std::once_flag[]>(static_cast<std::size_t>(E));
  if (!on_device) return;
  d_w_ = std::make_unique<DeviceBuffer>(w.size());
  d_scales_ = std::make_unique<DeviceBuffer>(scales.size());
  FP4GEMM_TEST_CUDA(cudaMemcpy(d_w_->get(), w.data(), w.size(), cudaMemcpyHostToDevice));
  FP4GEMM_TEST_CUDA(cudaMemcpy(d_scales_->get(), scales.data(), scales.size(), cudaMemcpyHostToDevice));
  if (cfg.alpha == AlphaMode::device) {
    d_alpha_ = std::make_unique<DeviceBuffer>(sizeof(float) * E);
    FP4GEMM_TEST_CUDA(cudaMemcpy(d_alpha_->get(), device_alphas.data(), sizeof(float) * E, cudaMemcpyHostToDevice));
  }
}

MoeWeights MoeWeightSet::weights() const {
  MoeWeights mw;
  mw.experts = cfg_.experts, mw.n = cfg_.n, mw.k = cfg_.k;
  mw.w = device_w();
  mw.ldw = cfg_.default_strides ? 0 : ldw;
  mw.expert_stride = cfg_.default_strides ? 0 : expert_stride;
  mw.scales = device_scales();
  mw.scale_expert_stride = cfg_.default_strides ? 0 : scale_stride;
  if (cfg_.alpha == AlphaMode::scalar) mw.alpha = scalar_alpha;
  if (cfg_.alpha == AlphaMode::device) {
    mw.alpha_device = device_alpha();
    mw.alpha = std::numeric_limits<float>::quiet_NaN();  // must not be used
  }
  return mw;
}

MoeOptions MoeWeightSet::options() const {
  MoeOptions o;
  o.format = cfg_.format;
  o.scale_layout = cfg_.scale_layout;
  o.out_type = cfg_.out_type;
  o.activation = cfg_.activation;
  o.layout = cfg_.layout;
  o.capacity = cfg_.capacity;
  o.device = -1;
  return o;
}

const std::vector<float>& MoeWeightSet::dequantised(int e) const {
  std::call_once(dq_once_[static_cast<std::size_t>(e)], [&] {
    std::vector<float>& out = dq_[static_cast<std::size_t>(e)];
    out.resize(static_cast<std::size_t>(cfg_.n) * cfg_.k);
    formats::dequantize(cfg_.format, ScaleLayout::linear, w.data() + e * expert_stride, cfg_.n, cfg_.k, ldw,
                        scales_linear.data() + static_cast<std::size_t>(e) * cfg_.n * cols, out.data());
  });
  return dq_[static_cast<std::size_t>(e)];
}

// ---- routings -----------------------------------------------------------------------------------

std::string Routing::describe() const {
  std::ostringstream os;
  os << kind << ": ";
  const std::vector<int>& v = offsets.empty() ? counts : offsets;
  std::int64_t total = 0;
  int used = 0, most = 0;
  if (!offsets.empty()) {
    const std::size_t E = offsets.size() - 1;
    for (std::size_t e = 0; e < E; ++e) {
      const int rows = offsets[e + 1] - offsets[e];
      used += rows != 0, most = std::max(most, rows);
    }
    total = static_cast<std::int64_t>(offsets[E]) - offsets[0];
    os << "offsets[0]=" << offsets[0] << " offsets[E]=" << offsets[E];
  } else {
    for (int c : counts) total += c, used += c != 0, most = std::max(most, c);
    os << "counts";
  }
  os << ", " << total << " rows, " << used << "/" << (offsets.empty() ? counts.size() : offsets.size() - 1)
     << " experts used, at most " << most << " per expert";
  if (v.size() <= 17) {
    os << " [";
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? " " : "") << v[i];
    os << "]";
  }
  if (!gather.empty()) os << ", gathered";
  return os.str();
}

Routing routing_from_counts(const MoeConfig& cfg, std::mt19937_64& rng, const std::vector<int>& counts, int first,
                            const std::string& kind) {
  Routing r;
  r.kind = kind;
  if (cfg.layout == MoeLayout::masked) {
    r.counts = counts;
    return r;
  }
  r.offsets.resize(counts.size() + 1);
  r.offsets[0] = first;
  for (std::size_t e = 0; e < counts.size(); ++e) r.offsets[e + 1] = r.offsets[e] + counts[e];
  if (cfg.gather) {
    r.gather.resize(static_cast<std::size_t>(cfg.capacity));
    for (int& g : r.gather) g = uniform(rng, 0, cfg.a_rows() - 1);
  }
  return r;
}

Routing make_routing(const MoeConfig& cfg, std::mt19937_64& rng, RoutingKind kind, std::int64_t max_rows) {
  const int E = cfg.experts, cap = cfg.capacity;
  std::vector<int> counts(static_cast<std::size_t>(E), 0);
  const auto pick_expert = [&] {
    switch (uniform(rng, 0, 2)) {
      case 0:
        return 0;
      case 1:
        return E - 1;
      default:
        return uniform(rng, 0, E - 1);
    }
  };
  // `rows` rows, each to an expert drawn with these weights (empty: uniform).
  const auto scatter = [&](std::int64_t rows, const std::vector<double>& weights) {
    if (weights.empty()) {
      for (std::int64_t i = 0; i < rows; ++i) ++counts[static_cast<std::size_t>(uniform(rng, 0, E - 1))];
      return;
    }
    std::discrete_distribution<int> d(weights.begin(), weights.end());
    for (std::int64_t i = 0; i < rows; ++i) ++counts[static_cast<std::size_t>(d(rng))];
  };
  const auto zipf = [&] {
    std::vector<int> rank(static_cast<std::size_t>(E));
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);
    std::vector<double> w(static_cast<std::size_t>(E));
    for (int e = 0; e < E; ++e)
      w[static_cast<std::size_t>(e)] = 1.0 / std::pow(rank[static_cast<std::size_t>(e)] + 1.0, 1.2);
    return w;
  };
  const std::string name = to_string(kind);

  if (cfg.layout == MoeLayout::masked) {
    switch (kind) {
      case RoutingKind::one_expert:
        counts[static_cast<std::size_t>(pick_expert())] = cap;
        break;
      case RoutingKind::few_experts:
        for (int i = uniform(rng, 1, std::min(3, E)); i > 0; --i)
          counts[static_cast<std::size_t>(uniform(rng, 0, E - 1))] = uniform(rng, 1, cap);
        break;
      case RoutingKind::full:
        std::fill(counts.begin(), counts.end(), cap);
        break;
      case RoutingKind::empty:
        break;
      case RoutingKind::balanced: {
        const int c = uniform(rng, 0, cap);
        for (int& x : counts) x = std::clamp(c + uniform(rng, -1, 1), 0, cap);
        break;
      }
      case RoutingKind::skewed: {
        const std::vector<double> w = zipf();
        const double top = *std::max_element(w.begin(), w.end());
        for (int e = 0; e < E; ++e)
          counts[static_cast<std::size_t>(e)] = static_cast<int>(cap * w[static_cast<std::size_t>(e)] / top);
        break;
      }
      default:  // uniform, partial, shifted, topk: independent counts, some at the edges
        for (int& x : counts) {
          const int r = uniform(rng, 0, 9);
          x = r == 0 ? 0 : r == 1 ? cap : uniform(rng, 0, cap);
        }
        break;
    }
    std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
    if (total > max_rows)  // the MAC budget
      for (int& x : counts) x = static_cast<int>(static_cast<std::int64_t>(x) * max_rows / total);
    return routing_from_counts(cfg, rng, counts, 0, name);
  }

  const int limit = static_cast<int>(std::min<std::int64_t>(cap, max_rows));
  int first = 0;
  switch (kind) {
    case RoutingKind::uniform:
      scatter(uniform(rng, 0, limit), {});
      break;
    case RoutingKind::one_expert:
      counts[static_cast<std::size_t>(pick_expert())] = limit;
      break;
    case RoutingKind::few_experts: {
      std::vector<double> w(static_cast<std::size_t>(E), 0.0);
      for (int i = uniform(rng, 1, std::min(3, E)); i > 0; --i)
        w[static_cast<std::size_t>(uniform(rng, 0, E - 1))] = 1.0 + (rng() % 4);
      scatter(uniform(rng, 1, std::max(1, limit)), w);
      break;
    }
    case RoutingKind::full:
      scatter(limit, {});
      break;
    case RoutingKind::partial:
      scatter(uniform(rng, 0, std::max(0, std::min(limit, cap - 1))), {});
      break;
    case RoutingKind::shifted: {
      const int rows = cap >= 2 ? uniform(rng, 0, std::min(limit, cap - 1)) : 0;
      first = cap >= 2 ? uniform(rng, 1, cap - rows) : uniform(rng, 0, cap);
      scatter(rows, {});
      break;
    }
    case RoutingKind::skewed:
      scatter(uniform(rng, 0, limit), zipf());
      break;
    case RoutingKind::empty:
      first = (rng() & 1) ? 0 : uniform(rng, 0, cap);
      break;
    case RoutingKind::balanced: {
      const int rows = uniform(rng, 0, limit);
      for (int e = 0; e < E; ++e) counts[static_cast<std::size_t>(e)] = rows / E + (e < rows % E ? 1 : 0);
      break;
    }
    case RoutingKind::topk: {
      // T tokens, each routed to topk distinct experts; rows sorted by expert, tokens ascending.
      const int topk = uniform(rng, 1, std::min(8, E));
      const int max_tokens = cfg.gather ? std::min(cfg.a_rows(), limit / topk) : limit / topk;
      const int tokens = uniform(rng, 0, std::max(0, max_tokens));
      std::vector<std::vector<int>> routed(static_cast<std::size_t>(E));
      std::vector<int> chosen;
      for (int t = 0; t < tokens; ++t) {
        chosen.clear();
        while (static_cast<int>(chosen.size()) < topk) {
          const int e = uniform(rng, 0, E - 1);
          if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
        }
        for (int e : chosen) routed[static_cast<std::size_t>(e)].push_back(t);
      }
      for (int e = 0; e < E; ++e)
        counts[static_cast<std::size_t>(e)] = static_cast<int>(routed[static_cast<std::size_t>(e)].size());
      Routing r = routing_from_counts(cfg, rng, counts, 0, name + "(top" + std::to_string(topk) + ")");
      if (cfg.gather) {
        int row = 0;
        for (const std::vector<int>& list : routed)
          for (int t : list) r.gather[static_cast<std::size_t>(row++)] = t;
      }
      return r;
    }
  }
  return routing_from_counts(cfg, rng, counts, first, name);
}

std::vector<int> row_owners(const MoeConfig& cfg, const Routing& routing) {
  std::vector<int> owner(static_cast<std::size_t>(cfg.rows()), -1);
  if (cfg.layout == MoeLayout::masked) {
    for (int e = 0; e < cfg.experts; ++e)
      for (int i = 0; i < std::clamp(routing.counts[static_cast<std::size_t>(e)], 0, cfg.capacity); ++i)
        owner[static_cast<std::size_t>(e) * cfg.capacity + i] = e;
    return owner;
  }
  for (int e = 0; e < cfg.experts; ++e)
    for (int r = std::max(0, routing.offsets[static_cast<std::size_t>(e)]);
         r < std::min(cfg.rows(), routing.offsets[static_cast<std::size_t>(e) + 1]); ++r)
      owner[static_cast<std::size_t>(r)] = e;
  return owner;
}

// ---- inputs -------------------------------------------------------------------------------------

MoeInputs make_inputs(const MoeWeightSet& ws, std::mt19937_64& rng, Routing routing) {
  const MoeConfig& cfg = ws.config();
  const int a_rows = cfg.a_rows(), K = cfg.k;
  MoeInputs in;
  if (cfg.activation == MoeActivation::fp4) {
    in.a = random_packed(rng, cfg.values, a_rows, K, ws.lda);
    in.a_scales = random_scales(rng, cfg.format, cfg.values, a_rows, ws.cols);
    if (cfg.nan_scales && cfg.values == Values::full && a_rows > 0)
      for (int i = uniform(rng, 0, 2); i > 0; --i)
        in.a_scales[static_cast<std::size_t>(uniform(rng, 0, a_rows - 1) * ws.cols +
                                             uniform(rng, 0, static_cast<int>(ws.cols) - 1))] =
            nan_code(rng, cfg.format);
  } else {
    in.a.resize(static_cast<std::size_t>(a_rows * ws.lda));
    fill_random(rng, in.a.data(), in.a.size());  // row padding: garbage
    for (int r = 0; r < a_rows; ++r) {
      auto* row = reinterpret_cast<std::uint16_t*>(in.a.data() + r * ws.lda);
      for (int k = 0; k < K; ++k) {
        const std::uint64_t x = rng();
        std::uint16_t bits;
        if (cfg.values == Values::gpumode) {  // e2m1 {0, +-0.5, +-1, +-1.5} x scale {1, 2}: exact in bf16
          const double v = formats::e2m1_to_float(static_cast<std::uint8_t>(x & 0xB)) * ((x >> 4) & 1 ? 2.0 : 1.0);
          bits = reference::float_to_bf16_bits(v);
        } else if ((x & 15) == 0) {
          bits = static_cast<std::uint16_t>((x >> 4) & 0x8000);  // +-0
        } else {                                                 // sign, exponent 2^-10..2^10, any mantissa
          const int exponent = 117 + static_cast<int>((x >> 8) % 21);
          bits = static_cast<std::uint16_t>(((x >> 4) & 1) << 15 | exponent << 7 | ((x >> 16) & 0x7F));
        }
        std::memcpy(row + k, &bits, 2);
      }
    }
    if (cfg.nan_scales && cfg.values == Values::full && a_rows > 0)
      for (int i = uniform(rng, 0, 2); i > 0; --i) {
        const std::uint16_t nan = (rng() & 1) ? 0x7FC0 : 0xFFC1;
        std::memcpy(in.a.data() + uniform(rng, 0, a_rows - 1) * ws.lda + 2 * uniform(rng, 0, K - 1), &nan, 2);
      }
  }
  in.routing = std::move(routing);
  in.alphas.assign(static_cast<std::size_t>(cfg.experts), 1.0f);
  if (cfg.alpha == AlphaMode::scalar) std::fill(in.alphas.begin(), in.alphas.end(), ws.scalar_alpha);
  if (cfg.alpha == AlphaMode::device) in.alphas = ws.device_alphas;
  return in;
}

// ---- buffers ------------------------------------------------------------------------------------

MoeBuffers::MoeBuffers(const MoeWeightSet& ws, bool on_device) : ws_(&ws) {
  const MoeConfig& cfg = ws.config();
  std::mt19937_64 rng(cfg.seed ^ 0xBB67AE8584CAA73Bull);
  const std::size_t elem = out_type_size(cfg.out_type);
  a_bytes_ = static_cast<std::size_t>(cfg.a_rows() * ws.lda);
  a_scale_bytes_ = cfg.activation == MoeActivation::fp4 ? static_cast<std::size_t>(cfg.a_rows() * ws.cols) : 0;
  c_offset_ = cfg.guard_bytes + 16 * static_cast<std::size_t>(uniform(rng, 0, 15));
  c_bytes_ = static_cast<std::size_t>(cfg.rows()) * static_cast<std::size_t>(ws.ldc) * elem;
  image_.resize(
      static_cast<std::size_t>(round_up(static_cast<std::int64_t>(c_offset_ + c_bytes_ + cfg.guard_bytes), 256)));
  fill_random(rng, image_.data(), image_.size());
  for (int r = 0; r < cfg.rows(); ++r)
    std::fill_n(image_.begin() + static_cast<std::ptrdiff_t>(c_offset_ + static_cast<std::size_t>(r) * ws.ldc * elem),
                static_cast<std::size_t>(cfg.n) * elem, std::uint8_t{0xFF});
  if (!on_device) return;
  const auto alloc = [](std::size_t bytes, auto** p) {
    FP4GEMM_TEST_CUDA(cudaMalloc(reinterpret_cast<void**>(p), std::max<std::size_t>(bytes, 16)));
  };
  try {
    alloc(a_bytes_, &a_);
    if (a_scale_bytes_ > 0) alloc(a_scale_bytes_, &a_scales_);
    alloc(sizeof(int) * (cfg.experts + 1), &offsets_);
    alloc(sizeof(int) * cfg.experts, &counts_);
    alloc(sizeof(int) * std::max(1, cfg.capacity), &gather_);
    alloc(image_.size(), &arena_);
    FP4GEMM_TEST_CUDA(cudaMemcpy(arena_, image_.data(), image_.size(), cudaMemcpyHostToDevice));
  } catch (...) {
    for (void* p : {static_cast<void*>(a_), static_cast<void*>(a_scales_), static_cast<void*>(offsets_),
                    static_cast<void*>(counts_), static_cast<void*>(gather_), static_cast<void*>(arena_)})
      if (p) cudaFree(p);
    throw;
  }
}

MoeBuffers::~MoeBuffers() {
  for (void* p : {static_cast<void*>(a_), static_cast<void*>(a_scales_), static_cast<void*>(offsets_),
                  static_cast<void*>(counts_), static_cast<void*>(gather_), static_cast<void*>(arena_)})
    if (p) cudaFree(p);
}

namespace {
void require_device(const void* arena) {
  if (arena == nullptr) throw std::logic_error("MoeBuffers built without device buffers");
}
}  // namespace

void MoeBuffers::upload(const MoeInputs& in, cudaStream_t stream) const {
  require_device(arena_);
  const MoeConfig& cfg = ws_->config();
  if (in.a.size() != a_bytes_ || in.a_scales.size() != a_scale_bytes_)
    throw std::invalid_argument("MoeBuffers::upload: activations of the wrong size");
  FP4GEMM_TEST_CUDA(cudaMemcpyAsync(a_, in.a.data(), a_bytes_, cudaMemcpyHostToDevice, stream));
  if (a_scale_bytes_ > 0)
    FP4GEMM_TEST_CUDA(cudaMemcpyAsync(a_scales_, in.a_scales.data(), a_scale_bytes_, cudaMemcpyHostToDevice, stream));
  const Routing& r = in.routing;
  if (cfg.layout == MoeLayout::contiguous) {
    if (r.offsets.size() != static_cast<std::size_t>(cfg.experts) + 1)
      throw std::invalid_argument("MoeBuffers::upload: offsets need experts + 1 entries");
    FP4GEMM_TEST_CUDA(
        cudaMemcpyAsync(offsets_, r.offsets.data(), sizeof(int) * r.offsets.size(), cudaMemcpyHostToDevice, stream));
    if (cfg.gather) {
      if (r.gather.size() != static_cast<std::size_t>(cfg.capacity))
        throw std::invalid_argument("MoeBuffers::upload: the gather index needs capacity entries");
      FP4GEMM_TEST_CUDA(
          cudaMemcpyAsync(gather_, r.gather.data(), sizeof(int) * r.gather.size(), cudaMemcpyHostToDevice, stream));
    }
  } else {
    if (r.counts.size() != static_cast<std::size_t>(cfg.experts))
      throw std::invalid_argument("MoeBuffers::upload: counts need experts entries");
    FP4GEMM_TEST_CUDA(
        cudaMemcpyAsync(counts_, r.counts.data(), sizeof(int) * r.counts.size(), cudaMemcpyHostToDevice, stream));
  }
  if (cfg.alpha == AlphaMode::device)
    FP4GEMM_TEST_CUDA(cudaMemcpyAsync(ws_->device_alpha(), in.alphas.data(), sizeof(float) * cfg.experts,
                                      cudaMemcpyHostToDevice, stream));
  FP4GEMM_TEST_CUDA(cudaStreamSynchronize(stream));
}

std::vector<std::uint8_t> MoeBuffers::c_image(Poison poison) const {
  std::vector<std::uint8_t> image = image_;
  if (poison == Poison::nan) return image;
  const MoeConfig& cfg = ws_->config();
  const std::size_t elem = out_type_size(cfg.out_type);
  std::uint8_t pattern[4];
  poison_pattern(poison, cfg.out_type, pattern);
  for (int r = 0; r < cfg.rows(); ++r) {
    std::uint8_t* row = image.data() + c_offset_ + static_cast<std::size_t>(r) * ws_->ldc * elem;
    for (int n = 0; n < cfg.n; ++n) std::memcpy(row + static_cast<std::size_t>(n) * elem, pattern, elem);
  }
  return image;
}

void MoeBuffers::reset_c(Poison poison, cudaStream_t stream) const {
  require_device(arena_);
  const std::vector<std::uint8_t> image = c_image(poison);
  FP4GEMM_TEST_CUDA(cudaMemcpyAsync(arena_, image.data(), image.size(), cudaMemcpyHostToDevice, stream));
  FP4GEMM_TEST_CUDA(cudaStreamSynchronize(stream));
}

std::vector<std::uint8_t> MoeBuffers::download_c(cudaStream_t stream) const {
  require_device(arena_);
  std::vector<std::uint8_t> out(image_.size());
  FP4GEMM_TEST_CUDA(cudaMemcpyAsync(out.data(), arena_, out.size(), cudaMemcpyDeviceToHost, stream));
  FP4GEMM_TEST_CUDA(cudaStreamSynchronize(stream));
  return out;
}

MoeArgs MoeBuffers::args() const {
  const MoeConfig& cfg = ws_->config();
  MoeArgs a;
  a.a = a_;
  a.lda = ws_->lda;
  a.a_scales = cfg.activation == MoeActivation::fp4 ? a_scales_ : nullptr;
  if (cfg.layout == MoeLayout::contiguous) {
    a.expert_offsets = offsets_;
    if (cfg.gather) a.gather_index = gather_, a.num_tokens = cfg.a_rows();
  } else {
    a.expert_counts = counts_;
  }
  a.c = arena_ + c_offset_;
  a.ldc = ws_->ldc;
  return a;
}

::testing::AssertionResult MoeBuffers::inputs_unchanged(const MoeInputs& in, cudaStream_t stream) const {
  require_device(arena_);
  const MoeConfig& cfg = ws_->config();
  const auto same = [&](const char* what, const void* device, const void* host, std::size_t bytes) -> std::string {
    if (bytes == 0) return {};
    std::vector<std::uint8_t> got(bytes);
    FP4GEMM_TEST_CUDA(cudaMemcpyAsync(got.data(), device, bytes, cudaMemcpyDeviceToHost, stream));
    FP4GEMM_TEST_CUDA(cudaStreamSynchronize(stream));
    const auto* h = static_cast<const std::uint8_t*>(host);
    for (std::size_t i = 0; i < bytes; ++i)
      if (got[i] != h[i]) return std::string(what) + " changed at byte " + std::to_string(i);
    return {};
  };
  std::string bad = same("A", a_, in.a.data(), a_bytes_);
  if (bad.empty()) bad = same("a_scales", a_scales_, in.a_scales.data(), a_scale_bytes_);
  if (bad.empty() && cfg.layout == MoeLayout::contiguous)
    bad = same("expert_offsets", offsets_, in.routing.offsets.data(), sizeof(int) * in.routing.offsets.size());
  if (bad.empty() && cfg.layout == MoeLayout::masked)
    bad = same("expert_counts", counts_, in.routing.counts.data(), sizeof(int) * in.routing.counts.size());
  if (bad.empty() && cfg.gather)
    bad = same("gather_index", gather_, in.routing.gather.data(), sizeof(int) * in.routing.gather.size());
  if (bad.empty()) bad = same("weights.w", ws_->device_w(), ws_->w.data(), ws_->w.size());
  if (bad.empty()) bad = same("weights.scales", ws_->device_scales(), ws_->scales.data(), ws_->scales.size());
  if (bad.empty() && cfg.alpha == AlphaMode::device)
    bad = same("weights.alpha_device", ws_->device_alpha(), in.alphas.data(), sizeof(float) * in.alphas.size());
  if (bad.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "an input was written: " << bad;
}

// ---- expected outputs and checks ------------------------------------------------------------------

std::vector<std::uint8_t> expected_c(const MoeWeightSet& ws, const MoeBuffers& buffers, const MoeInputs& in,
                                     Poison poison, int threads) {
  const MoeConfig& cfg = ws.config();
  std::vector<std::uint8_t> out = buffers.c_image(poison);
  reference::MoeHostProblem p;
  p.experts = cfg.experts, p.n = cfg.n, p.k = cfg.k;
  p.format = cfg.format;
  p.bf16_activations = cfg.activation == MoeActivation::bf16;
  p.a = in.a.data();
  p.lda = ws.lda;
  p.a_scales = cfg.activation == MoeActivation::fp4 ? in.a_scales.data() : nullptr;
  p.a_rows = cfg.a_rows();
  p.w = ws.w.data();
  p.ldw = ws.ldw;
  p.w_expert_stride = ws.expert_stride;
  p.w_scales = ws.scales.data();
  p.w_layout = cfg.scale_layout;
  p.w_scale_expert_stride = ws.scale_stride;
  p.alpha = cfg.alpha == AlphaMode::none ? nullptr : in.alphas.data();
  if (cfg.layout == MoeLayout::contiguous)
    p.offsets = in.routing.offsets.data();
  else
    p.counts = in.routing.counts.data();
  p.capacity = cfg.capacity;
  p.gather = cfg.gather ? in.routing.gather.data() : nullptr;
  p.c = out.data() + buffers.c_offset();
  p.ldc = ws.ldc;
  p.out_type = cfg.out_type;
  reference::moe_gemm(p, threads);
  return out;
}

namespace {

// `expected` (for the NaN poison) with the cells of the rows nobody owns holding `poison`.
std::vector<std::uint8_t> repoison(const MoeWeightSet& ws, const MoeBuffers& buffers, const Routing& routing,
                                   std::vector<std::uint8_t> expected, Poison poison) {
  const MoeConfig& cfg = ws.config();
  const std::size_t elem = out_type_size(cfg.out_type);
  std::uint8_t pattern[4];
  poison_pattern(poison, cfg.out_type, pattern);
  const std::vector<int> owner = row_owners(cfg, routing);
  for (int r = 0; r < cfg.rows(); ++r) {
    if (owner[static_cast<std::size_t>(r)] >= 0) continue;
    std::uint8_t* row = expected.data() + buffers.c_offset() + static_cast<std::size_t>(r) * ws.ldc * elem;
    for (int n = 0; n < cfg.n; ++n) std::memcpy(row + static_cast<std::size_t>(n) * elem, pattern, elem);
  }
  return expected;
}

}  // namespace

std::vector<std::uint8_t> owned_cells(const MoeWeightSet& ws, const MoeBuffers& buffers, const Routing& routing,
                                      std::span<const std::uint8_t> arena) {
  const MoeConfig& cfg = ws.config();
  const std::size_t elem = out_type_size(cfg.out_type), row_bytes = static_cast<std::size_t>(cfg.n) * elem;
  const std::vector<int> owner = row_owners(cfg, routing);
  std::vector<std::uint8_t> out;
  for (int r = 0; r < cfg.rows(); ++r) {
    if (owner[static_cast<std::size_t>(r)] < 0) continue;
    const std::uint8_t* row = arena.data() + buffers.c_offset() + static_cast<std::size_t>(r) * ws.ldc * elem;
    out.insert(out.end(), row, row + row_bytes);
  }
  return out;
}

::testing::AssertionResult check_c(const MoeWeightSet& ws, const MoeBuffers& buffers, const MoeInputs& in,
                                   std::span<const std::uint8_t> got, std::span<const std::uint8_t> expected,
                                   const std::vector<char>* skip_rows, int max_reports) {
  const MoeConfig& cfg = ws.config();
  const OutType type = cfg.out_type;
  const std::size_t elem = out_type_size(type);
  const std::size_t c0 = buffers.c_offset(), row_stride = static_cast<std::size_t>(ws.ldc) * elem;
  const std::size_t row_bytes = static_cast<std::size_t>(cfg.n) * elem;
  if (got.size() != expected.size())
    return ::testing::AssertionFailure() << "arena of " << got.size() << " bytes, expected " << expected.size();
  std::ostringstream report;
  int reported = 0;
  const auto note = [&](const std::string& line) {
    if (reported++ < max_reports) report << "\n  " << line;
  };

  // 1. Nothing outside the C cells changed: guard bands and row padding.
  std::int64_t changed = 0;
  const auto compare = [&](std::size_t begin, std::size_t end, const auto& where) {
    if (begin >= end || std::memcmp(got.data() + begin, expected.data() + begin, end - begin) == 0) return;
    for (std::size_t i = begin; i < end; ++i)
      if (got[i] != expected[i]) {
        if (changed++ == 0 || got[i - 1] == expected[i - 1]) {
          char buf[48];
          std::snprintf(buf, sizeof buf, ": 0x%02x -> 0x%02x", expected[i], got[i]);
          note("write outside C: " + where(i) + buf);
        }
      }
  };
  compare(0, c0, [&](std::size_t i) { return "guard band before C, " + std::to_string(c0 - i) + " bytes before it"; });
  for (int r = 0; r < cfg.rows(); ++r) {
    const std::size_t row = c0 + static_cast<std::size_t>(r) * row_stride;
    compare(row + row_bytes, row + row_stride, [&](std::size_t i) {
      return "row padding of C row " + std::to_string(r) + " (element " + std::to_string((i - row) / elem) +
             ", N = " + std::to_string(cfg.n) + ", ldc = " + std::to_string(ws.ldc) + ")";
    });
  }
  const std::size_t c_end = c0 + buffers.c_bytes();
  compare(c_end, got.size(),
          [&](std::size_t i) { return "guard band after C, " + std::to_string(i - c_end) + " bytes past it"; });

  // 2. Rows no expert owns hold the poison; 3. owned rows match the reference.
  const std::vector<int> owner = row_owners(cfg, in.routing);
  bool exact = cfg.values == Values::gpumode;
  for (float a : in.alphas) exact = exact && power_of_two_or_zero(a);
  const int K = cfg.k, vec = scale_block_size(cfg.format);
  // Dequantised activation rows (exact floats), built when a full-range element needs the bound.
  std::vector<std::vector<float>> a_dq(static_cast<std::size_t>(cfg.a_rows()));
  const auto act_row = [&](int src) -> const std::vector<float>& {
    std::vector<float>& v = a_dq[static_cast<std::size_t>(src)];
    if (!v.empty()) return v;
    v.resize(static_cast<std::size_t>(K));
    const std::uint8_t* row = in.a.data() + src * ws.lda;
    for (int k = 0; k < K; ++k) {
      if (cfg.activation == MoeActivation::fp4) {
        v[static_cast<std::size_t>(k)] =
            formats::e2m1_to_float(formats::get_nibble(row, k)) *
            formats::scale_to_float(cfg.format, in.a_scales[static_cast<std::size_t>(src * ws.cols + k / vec)]);
      } else {
        std::uint16_t bits;
        std::memcpy(&bits, row + 2 * k, 2);
        v[static_cast<std::size_t>(k)] = static_cast<float>(bf16_to_double(bits));
      }
    }
    return v;
  };
  std::int64_t wrong = 0, unwritten = 0, stray = 0, compared = 0;
  for (int r = 0; r < cfg.rows(); ++r) {
    const std::size_t row = c0 + static_cast<std::size_t>(r) * row_stride;
    const int e = owner[static_cast<std::size_t>(r)];
    if (e < 0) {
      if (std::memcmp(got.data() + row, expected.data() + row, row_bytes) != 0) {
        ++stray;
        int col = 0;
        while (std::memcmp(got.data() + row + col * elem, expected.data() + row + col * elem, elem) == 0) ++col;
        const std::uint32_t g = load_output_bits(got.data() + row, type, col);
        note("row " + std::to_string(r) + " belongs to no expert but was written (col " + std::to_string(col) + ": " +
             hex_bits(g, type) + ")");
      }
      continue;
    }
    if (skip_rows != nullptr && (*skip_rows)[static_cast<std::size_t>(r)]) continue;
    const int src = cfg.gather ? in.routing.gather[static_cast<std::size_t>(r)] : r;
    const double alpha = in.alphas[static_cast<std::size_t>(e)];
    for (int n = 0; n < cfg.n; ++n) {
      ++compared;
      const std::uint32_t gb = load_output_bits(got.data() + row, type, n);
      const std::uint32_t wb = load_output_bits(expected.data() + row, type, n);
      if (gb == wb) continue;
      const double gv = output_bits_to_double(gb, type), wv = output_bits_to_double(wb, type);
      std::string detail;
      bool ok;
      if (std::isnan(gv) || std::isnan(wv)) {
        ok = std::isnan(gv) && std::isnan(wv);  // NaN exactly where the reference has NaN (any NaN bits)
      } else if (exact) {
        ok = gv == 0.0 && wv == 0.0;  // +0 == -0
        if (!ok) detail = " (bit-exact required)";
      } else {
        // SPEC §3: |out - x| <= u |x| + 2 K 2^-24 sum_k |a_k b_k| (x: the exact value; u: half an
        // output ulp, absolute below the normal range), plus one FP32 rounding of the alpha product.
        const std::vector<float>& a = act_row(src);
        const std::vector<float>& b = ws.dequantised(e);
        const float* brow = b.data() + static_cast<std::size_t>(n) * K;
        double dot = 0, abs_sum = 0;
        for (int k = 0; k < K; ++k) {
          const double prod = static_cast<double>(a[static_cast<std::size_t>(k)]) * brow[k];  // exact
          dot += prod;
          abs_sum += std::fabs(prod);
        }
        const double x = dot * alpha, s = abs_sum * std::fabs(alpha);
        const double slack = 2.0 * K * std::ldexp(s, -24) + std::ldexp(std::fabs(x), -24);
        if (std::isinf(gv))
          ok = std::signbit(gv) == std::signbit(x) && std::fabs(x) + slack >= output_overflow(type);
        else
          ok = std::fabs(gv - x) <= slack + output_half_ulp(type, std::max(std::fabs(gv), std::fabs(x)));
        detail = " (exact " + fmt(x) + ", allowed +-" +
                 fmt(slack + output_half_ulp(type, std::max(std::isinf(gv) ? 0.0 : std::fabs(gv), std::fabs(x)))) +
                 ", sum|ab| " + fmt(s) + ")";
      }
      if (ok) continue;
      ++wrong;
      const bool poison = gb == poison_bits(Poison::nan, type) || gb == poison_bits(Poison::finite, type);
      unwritten += poison;
      note("row " + std::to_string(r) + " (expert " + std::to_string(e) + ", A row " + std::to_string(src) + ") col " +
           std::to_string(n) + ": got " + fmt(gv) + " (" + hex_bits(gb, type) + ")" +
           (poison ? " = poison, never written" : "") + ", expected " + fmt(wv) + " (" + hex_bits(wb, type) + ")" +
           detail);
    }
  }
  if (changed == 0 && wrong == 0 && stray == 0) return ::testing::AssertionSuccess();
  ::testing::AssertionResult failure = ::testing::AssertionFailure();
  failure << wrong << " wrong elements (" << unwritten << " never written; " << compared << " compared, "
          << (exact ? "bit-exact" : "FP32 bound") << "), " << stray << " rows written that no expert owns, " << changed
          << " bytes changed outside C";
  if (reported > max_reports) report << "\n  ... (" << reported - max_reports << " more)";
  failure << report.str();
  return failure;
}

// ---- running --------------------------------------------------------------------------------------

Stream::Stream() { FP4GEMM_TEST_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
Stream::~Stream() { cudaStreamDestroy(s_); }

Graph::Graph(const MoeGemm& plan, const MoeArgs& args, cudaStream_t stream) {
  FP4GEMM_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    plan.run(args, stream);
  } catch (...) {
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  FP4GEMM_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  const cudaError_t instantiated = cudaGraphInstantiate(&exec_, graph, 0);
  cudaGraphDestroy(graph);
  FP4GEMM_TEST_CUDA(instantiated);
}

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

void Graph::launch(cudaStream_t stream) const { FP4GEMM_TEST_CUDA(cudaGraphLaunch(exec_, stream)); }

::testing::AssertionResult run_and_check(const MoeGemm& plan, const MoeWeightSet& ws, const MoeBuffers& buffers,
                                         const MoeInputs& in, const MoeRunOptions& options) {
  const std::string context = ws.config().describe() + "\n  routing " + in.routing.describe() +
                              (options.launch == Launch::graph ? " [graph]" : "");
  try {
    const Stream stream;
    buffers.upload(in, stream);
    std::unique_ptr<Graph> graph;
    if (options.launch == Launch::graph) graph = std::make_unique<Graph>(plan, buffers.args(), stream);
    const std::vector<std::uint8_t> expected_nan = expected_c(ws, buffers, in, Poison::nan, options.reference_threads);
    std::vector<std::uint8_t> first;
    for (int run = 0; run < 2; ++run) {
      const Poison poison = run == 0 ? Poison::nan : Poison::finite;
      buffers.reset_c(poison, stream);
      if (graph)
        graph->launch(stream);
      else
        plan.run(buffers.args(), stream);
      const std::vector<std::uint8_t> got = buffers.download_c(stream);
      FP4GEMM_TEST_CUDA(cudaGetLastError());
      const std::vector<std::uint8_t> expected =
          run == 0 ? expected_nan : repoison(ws, buffers, in.routing, expected_nan, poison);
      const ::testing::AssertionResult result = check_c(ws, buffers, in, got, expected);
      if (!result)
        return ::testing::AssertionFailure()
               << context << "\n  run " << run << " (" << to_string(poison) << "): " << result.message();
      std::vector<std::uint8_t> cells = owned_cells(ws, buffers, in.routing, got);
      if (run == 0) {
        first = std::move(cells);
      } else if (cells != first) {
        return ::testing::AssertionFailure() << context << "\n  the owned cells of the two runs differ bitwise "
                                             << "(an element unwritten, or nondeterministic)";
      }
    }
    try {
      plan.check(stream);
    } catch (const Error& e) {
      return ::testing::AssertionFailure()
             << context << "\n  plan.check() threw after valid runs: Error(" << e.argument() << "): " << e.what();
    }
    if (options.check_inputs) {
      const ::testing::AssertionResult result = buffers.inputs_unchanged(in, stream);
      if (!result) return ::testing::AssertionFailure() << context << "\n  " << result.message();
    }
    return ::testing::AssertionSuccess();
  } catch (const Error& e) {
    return ::testing::AssertionFailure() << context << "\n  fp4gemm::Error(" << e.argument() << ", " << e.group()
                                         << "): " << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << context << "\n  exception: " << e.what();
  }
}

}  // namespace fp4gemm::test::moe
