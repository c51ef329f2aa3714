// GPU-test harness: random grouped problems, guarded device buffers, checks against the reference.
#include "gpu/problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/reference.hpp"

namespace fp4gemm::test {

void cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                           cudaGetErrorString(err) + ")");
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) {
  FP4GEMM_TEST_CUDA(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<std::size_t>(bytes, 1)));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

const char* to_string(Values v) { return v == Values::gpumode ? "gpumode" : "full"; }

const char* to_string(Poison p) { return p == Poison::nan ? "NaN poison" : "finite poison"; }

std::uint32_t poison_bits(Poison p, OutType type) {
  if (p == Poison::nan) return type == OutType::f32 ? 0xFFFFFFFFu : 0xFFFFu;
  switch (type) {
    case OutType::f16: return 0xFBFFu;       // -65504
    case OutType::bf16: return 0xFF7Fu;      // -3.39e38
    case OutType::f32: return 0xFF7FFFFFu;   // -FLT_MAX
  }
  return 0;
}

namespace {

std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

int uniform(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

bool chance(std::mt19937_64& rng, double p) {
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p;
}

// Random bytes, eight per draw.
void random_bytes(std::mt19937_64& rng, std::uint8_t* dst, std::size_t bytes) {
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const std::uint64_t r = rng();
    std::memcpy(dst + i, &r, 8);
  }
  if (i < bytes) {
    const std::uint64_t r = rng();
    std::memcpy(dst + i, &r, bytes - i);
  }
}

bool is_nan_scale(Format format, std::uint8_t code) {
  return format == Format::nvfp4 ? (code & 0x7F) == 0x7F : code == 0xFF;
}

bool is_power_of_two_or_zero(float a) {
  if (a == 0.0f) return true;
  if (!std::isfinite(a)) return false;
  int e = 0;
  return std::fabs(std::frexp(a, &e)) == 0.5f;
}

float group_alpha(const ProblemConfig& cfg, std::size_t g) {
  if (cfg.alphas.empty()) return 1.0f;
  return cfg.alphas.size() == 1 ? cfg.alphas[0] : cfg.alphas[g];
}

// Packed e2m1 rows with stride ld; bytes past K/2 in each row are garbage.
std::vector<std::uint8_t> make_packed(std::mt19937_64& rng, Values values, int rows, int k,
                                      std::int64_t ld) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows) * static_cast<std::size_t>(ld));
  random_bytes(rng, out.data(), out.size());
  if (values == Values::gpumode) {
    // Keep magnitude codes 0..3 ({0, 0.5, 1, 1.5}) and the sign bit of both nibbles.
    for (int r = 0; r < rows; ++r) {
      std::uint8_t* row = out.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(ld);
      for (int i = 0; i < k / 2; ++i) row[i] &= 0xBB;
    }
  }
  return out;
}

// Linear scales [rows, cols].
std::vector<std::uint8_t> make_scales(std::mt19937_64& rng, const ProblemConfig& cfg, int rows,
                                      std::int64_t cols) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  const bool nv = cfg.format == Format::nvfp4;
  for (int r = 0; r < rows; ++r) {
    std::uint8_t* row = out.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(cols);
    if (cfg.values == Values::gpumode) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const bool two = rng() & 1;
        row[c] = nv ? (two ? 0x40 : 0x38) : (two ? 128 : 127);
      }
      continue;
    }
    // full: 70% of rows clustered within a few binades around a random base (every block then
    // matters for the sum), 30% anything in range.
    const bool clustered = chance(rng, 0.7);
    if (nv) {
      const int base = uniform(rng, 0, 15);  // E4M3 exponent field; 0 = subnormals (and zero)
      for (std::int64_t c = 0; c < cols; ++c) {
        int code;
        if (clustered) {
          const int e = std::clamp(base + uniform(rng, -1, 1), 0, 15);
          code = (e << 3) | uniform(rng, 0, 7);
        } else {
          code = uniform(rng, 0, 0x7E);
        }
        row[c] = static_cast<std::uint8_t>(std::min(code, 0x7E));  // 0x7F is NaN
      }
    } else {
      const int base = uniform(rng, 107, 147);
      for (std::int64_t c = 0; c < cols; ++c)
        row[c] = static_cast<std::uint8_t>(clustered ? std::clamp(base + uniform(rng, -2, 2), 107, 147)
                                                     : uniform(rng, 107, 147));
    }
  }
  return out;
}

// Linear scales converted to `layout`; blocked padding optionally poisoned with NaN codes.
std::vector<std::uint8_t> to_layout(const std::vector<std::uint8_t>& linear, int rows,
                                    std::int64_t cols, const ProblemConfig& cfg) {
  if (cfg.layout == ScaleLayout::linear) return linear;
  std::vector<std::uint8_t> blocked(formats::blocked_scale_bytes(rows, cols), 0);
  if (blocked.empty()) return blocked;
  formats::linear_to_blocked(linear.data(), rows, cols, blocked.data());
  if (cfg.poison_scale_padding) {
    std::vector<bool> used(blocked.size(), false);
    for (int r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) used[formats::blocked_offset(r, c, cols)] = true;
    for (std::size_t i = 0; i < blocked.size(); ++i)
      if (!used[i]) blocked[i] = 0xFF;  // NaN in E4M3 and UE8M0
  }
  return blocked;
}

std::uint32_t load_bits(const std::uint8_t* base, OutType type, std::int64_t index) {
  if (type == OutType::f32) {
    std::uint32_t v;
    std::memcpy(&v, base + index * 4, 4);
    return v;
  }
  std::uint16_t v;
  std::memcpy(&v, base + index * 2, 2);
  return v;
}

double bits_to_double(std::uint32_t bits, OutType type) {
  switch (type) {
    case OutType::f16: return reference::half_bits_to_double(static_cast<std::uint16_t>(bits));
    case OutType::bf16: return reference::bf16_bits_to_double(static_cast<std::uint16_t>(bits));
    case OutType::f32: {
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
  }
  return 0.0;
}

// Properties of an output type's grid.
struct TypeGrid {
  int mantissa_bits;     // explicit fraction bits
  int min_exponent;      // of the smallest normal
  double min_step;       // spacing of the subnormals
  double overflow;       // values at or beyond this round to infinity
};

TypeGrid grid(OutType type) {
  switch (type) {
    case OutType::f16: return {10, -14, std::ldexp(1.0, -24), 65520.0};
    case OutType::bf16: return {7, -126, std::ldexp(1.0, -133), std::ldexp(1.0, 128) - std::ldexp(1.0, 119)};
    case OutType::f32: return {23, -126, std::ldexp(1.0, -149), std::ldexp(1.0, 128) - std::ldexp(1.0, 103)};
  }
  return {};
}

// Half the spacing of the output grid at magnitude v (finite).
double half_ulp(const TypeGrid& t, double v) {
  v = std::fabs(v);
  if (v < std::ldexp(1.0, t.min_exponent)) return t.min_step / 2;
  int e = 0;
  std::frexp(v, &e);  // v = f * 2^e, f in [0.5, 1): floor(log2 v) = e - 1
  return std::ldexp(1.0, e - 1 - t.mantissa_bits - 1);
}

std::string hex_bits(std::uint32_t bits, OutType type) {
  char buf[16];
  std::snprintf(buf, sizeof buf, type == OutType::f32 ? "0x%08x" : "0x%04x", bits);
  return buf;
}

std::string fmt(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Exact alpha * dot and |alpha| * sum |a_k b_k| of one output element, from the host data.
struct ExactValue {
  double value = 0, abs_sum = 0;
};

ExactValue exact_value(const Problem& p, const GroupData& d, int row, int col) {
  const Format format = p.config.format;
  const int vec = scale_block_size(format);
  const std::int64_t cols = d.k / vec;
  const std::uint8_t* a = d.a.data() + static_cast<std::size_t>(row) * static_cast<std::size_t>(d.lda);
  const std::uint8_t* b = d.b.data() + static_cast<std::size_t>(col) * static_cast<std::size_t>(d.ldb);
  double dot = 0, abs_sum = 0;
  for (std::int64_t c = 0; c < cols; ++c) {
    const double sa = formats::scale_to_float(format, d.sfa_linear[row * cols + c]);
    const double sb = formats::scale_to_float(format, d.sfb_linear[col * cols + c]);
    double block = 0, abs_block = 0;  // exact: sums of products of e2m1 values (multiples of 1/4)
    for (std::int64_t k = c * vec; k < (c + 1) * vec; ++k) {
      const double prod = static_cast<double>(formats::e2m1_to_float(formats::get_nibble(a, k))) *
                          formats::e2m1_to_float(formats::get_nibble(b, k));
      block += prod;
      abs_block += std::fabs(prod);
    }
    dot += block * sa * sb;
    abs_sum += abs_block * std::fabs(sa * sb);
  }
  return {dot * d.alpha, abs_sum * std::fabs(static_cast<double>(d.alpha))};
}

}  // namespace

// ---- data helpers shared with other suites ---------------------------------------------------

void fill_random(std::mt19937_64& rng, std::uint8_t* dst, std::size_t bytes) { random_bytes(rng, dst, bytes); }

std::vector<std::uint8_t> random_packed(std::mt19937_64& rng, Values values, int rows, int k, std::int64_t ld) {
  return make_packed(rng, values, rows, k, ld);
}

std::vector<std::uint8_t> random_scales(std::mt19937_64& rng, Format format, Values values, int rows,
                                        std::int64_t cols) {
  ProblemConfig cfg;
  cfg.format = format;
  cfg.values = values;
  return make_scales(rng, cfg, rows, cols);
}

std::uint32_t load_output_bits(const std::uint8_t* base, OutType type, std::int64_t index) {
  return load_bits(base, type, index);
}

double output_bits_to_double(std::uint32_t bits, OutType type) { return bits_to_double(bits, type); }

double output_half_ulp(OutType type, double v) { return half_ulp(grid(type), v); }
double output_min_step(OutType type) { return grid(type).min_step; }
double output_overflow(OutType type) { return grid(type).overflow; }

GluBound glu_within_bound(OutType type, double got, double G, double U, double mag_g, double mag_u, double x_exact) {
  const double tol = 1.1 * (std::fabs(U) + 1) * mag_g + std::fabs(G) * mag_u + mag_g * mag_u +
                     std::ldexp(std::fabs(x_exact) + std::fabs(G) * (std::fabs(U) + 1), -20) +
                     output_half_ulp(type, std::max(std::isinf(got) ? 0.0 : std::fabs(got), std::fabs(x_exact)));
  const bool ok = std::isinf(got) ? std::fabs(x_exact) + tol >= output_overflow(type) && std::signbit(got) == std::signbit(x_exact)
                                  : std::fabs(got - x_exact) <= tol;
  return {tol, ok};
}

// ---- configuration --------------------------------------------------------------------------

std::string ProblemConfig::describe() const {
  std::ostringstream os;
  os << "seed=" << seed << " " << fp4gemm::to_string(format) << "/" << fp4gemm::to_string(layout)
     << "->" << fp4gemm::to_string(out_type) << " " << test::to_string(values) << " G=" << shapes.size()
     << " MxNxK=[";
  // Runs of equal shapes as "MxNxK*count" (0x0x0 = GroupDesc{}).
  for (std::size_t i = 0; i < shapes.size();) {
    std::size_t j = i + 1;
    while (j < shapes.size() && shapes[j].m == shapes[i].m && shapes[j].n == shapes[i].n && shapes[j].k == shapes[i].k) ++j;
    os << (i ? " " : "") << shapes[i].m << "x" << shapes[i].n << "x" << shapes[i].k;
    if (j - i > 2) {
      os << "*" << j - i;
    } else if (j - i == 2) {
      os << " " << shapes[i].m << "x" << shapes[i].n << "x" << shapes[i].k;
    }
    i = j;
  }
  os << "]";
  if (guard_bytes != 4096) os << " guard=" << guard_bytes;
  if (padded_strides) os << " padded";
  os << " align=" << alignment;
  if (layout == ScaleLayout::blocked) os << (poison_scale_padding ? " pad=NaN" : " pad=0");
  if (nan_scales) os << " nan-scales";
  if (!null_empty_groups) os << " no-null-empty";
  if (!alphas.empty()) {
    os << " alpha=[";
    for (std::size_t i = 0; i < alphas.size(); ++i) os << (i ? " " : "") << fmt(alphas[i]);
    os << "]";
  }
  if (alpha_on_device) os << " alpha_device";
  return os.str();
}

bool Problem::bit_exact() const {
  if (config.values != Values::gpumode) return false;
  for (const GroupData& g : groups)
    if (!is_power_of_two_or_zero(g.alpha)) return false;
  return true;
}

double Problem::macs() const {
  double total = 0;
  for (const GroupData& g : groups) total += static_cast<double>(g.m) * g.n * g.k;
  return total;
}

Problem make_problem(const ProblemConfig& cfg) {
  if (cfg.alignment < 16 || cfg.alignment > 256 || (cfg.alignment & (cfg.alignment - 1)) != 0)
    throw std::invalid_argument("ProblemConfig::alignment must be a power of two in [16, 256]");
  if (cfg.alphas.size() > 1 && cfg.alphas.size() != cfg.shapes.size())
    throw std::invalid_argument("ProblemConfig::alphas needs 0, 1 or one value per group");
  const int vec = scale_block_size(cfg.format);
  std::mt19937_64 rng(cfg.seed);
  Problem p;
  p.config = cfg;
  p.groups.reserve(cfg.shapes.size());
  for (std::size_t i = 0; i < cfg.shapes.size(); ++i) {
    const Shape& s = cfg.shapes[i];
    if (s.m < 0 || (s.m > 0 && (s.n < 1 || s.k < 1 || s.k % vec != 0)))
      throw std::invalid_argument("ProblemConfig::shapes[" + std::to_string(i) + "] is not a valid shape");
    GroupData d;
    d.m = s.m, d.n = s.n, d.k = s.k;
    d.alpha = group_alpha(cfg, i);
    if (s.m == 0 && s.n == 0 && s.k == 0) {  // GroupDesc{}
      d.blank = true;
      d.null_pointers = true;
      d.alpha = 1.0f;
      p.groups.push_back(std::move(d));
      continue;
    }
    const bool degenerate = s.n < 1 || s.k < 1 || s.k % vec != 0;  // only possible with M = 0
    if (s.m == 0 && (degenerate || (cfg.null_empty_groups && (rng() & 1)))) {
      d.null_pointers = true;
      p.groups.push_back(std::move(d));
      continue;
    }
    const bool pad = cfg.padded_strides;
    const auto row_bytes = static_cast<std::size_t>(s.k / 2);
    d.lda = static_cast<std::int64_t>(round_up(row_bytes, 16)) + (pad ? 16 * uniform(rng, 0, 3) : 0);
    d.ldb = static_cast<std::int64_t>(round_up(row_bytes, 16)) + (pad ? 16 * uniform(rng, 0, 3) : 0);
    d.ldc = static_cast<std::int64_t>(round_up(static_cast<std::size_t>(s.n), 8)) + (pad ? 8 * uniform(rng, 0, 2) : 0);
    d.a = make_packed(rng, cfg.values, s.m, s.k, d.lda);
    d.b = make_packed(rng, cfg.values, s.n, s.k, d.ldb);
    const std::int64_t cols = s.k / vec;
    d.sfa_linear = make_scales(rng, cfg, s.m, cols);
    d.sfb_linear = make_scales(rng, cfg, s.n, cols);
    if (cfg.nan_scales && cfg.values == Values::full) {
      const auto nan_code = [&] {
        return cfg.format == Format::nvfp4 ? static_cast<std::uint8_t>((rng() & 1) ? 0x7F : 0xFF)
                                           : std::uint8_t{0xFF};
      };
      if (s.m > 0 && (rng() & 1))
        d.sfa_linear[static_cast<std::size_t>(uniform(rng, 0, s.m - 1) * cols + uniform(rng, 0, static_cast<int>(cols) - 1))] = nan_code();
      if (rng() & 1)
        d.sfb_linear[static_cast<std::size_t>(uniform(rng, 0, s.n - 1) * cols + uniform(rng, 0, static_cast<int>(cols) - 1))] = nan_code();
    }
    d.sfa = to_layout(d.sfa_linear, s.m, cols, cfg);
    d.sfb = to_layout(d.sfb_linear, s.n, cols, cfg);
    p.groups.push_back(std::move(d));
  }
  return p;
}

// ---- random problems ------------------------------------------------------------------------

std::vector<Shape> random_shapes(std::mt19937_64& rng, Format format, const RandomLimits& lim) {
  const int vec = scale_block_size(format);
  const int max_blocks = std::max(1, lim.max_k / vec);
  const int max_n = std::max(1, lim.max_n), max_m = std::max(1, lim.max_m);
  const int max_groups = std::max(1, lim.max_groups);
  const int groups = [&] {
    const int r = uniform(rng, 0, 9);
    if (r < 4) return uniform(rng, 1, std::min(4, max_groups));
    if (r < 8) return uniform(rng, 1, std::min(16, max_groups));
    return uniform(rng, 1, max_groups);
  }();
  const auto pick_n = [&] {
    switch (uniform(rng, 0, 5)) {
      case 0: return uniform(rng, 1, std::min(16, max_n));                    // tiny, odd too
      case 1: return std::min(max_n, 8 * uniform(rng, 1, std::max(1, max_n / 8)));
      case 2: return std::min(max_n, 1 << uniform(rng, 3, 10));               // powers of two
      default: return uniform(rng, 1, max_n);
    }
  };
  const auto pick_k = [&] {
    switch (uniform(rng, 0, 3)) {
      case 0: return vec * uniform(rng, 1, std::min(4, max_blocks));          // one block or few
      case 1: return vec * std::min(max_blocks, 1 << uniform(rng, 0, 7));
      default: return vec * uniform(rng, 1, max_blocks);
    }
  };
  const auto pick_m = [&] {
    if (chance(rng, lim.zero_m_rate)) return 0;
    switch (uniform(rng, 0, 4)) {
      case 0: return uniform(rng, 1, std::min(8, max_m));
      case 1: return std::min(max_m, 2 * uniform(rng, 0, max_m / 2) + 1);     // odd
      case 2: return std::clamp(64 * uniform(rng, 1, 4) + uniform(rng, -1, 1), 1, max_m);  // tile edges
      default: return uniform(rng, 1, max_m);
    }
  };
  const bool varying = chance(rng, lim.varying_nk_rate);
  const int n0 = pick_n(), k0 = pick_k();
  std::vector<Shape> shapes(static_cast<std::size_t>(groups));
  for (Shape& s : shapes) s = {pick_m(), varying ? pick_n() : n0, varying ? pick_k() : k0};

  const auto macs = [&] {
    double total = 0;
    for (const Shape& s : shapes) total += static_cast<double>(s.m) * s.n * s.k;
    return total;
  };
  for (int step = 0; step < 256 && macs() > lim.mac_budget; ++step) {
    switch (uniform(rng, 0, 2)) {
      case 0: for (Shape& s : shapes) s.m = s.m > 1 ? (s.m + 1) / 2 : s.m; break;
      case 1: for (Shape& s : shapes) s.n = std::max(1, s.n / 2); break;
      default: for (Shape& s : shapes) s.k = std::max(vec, s.k / 2 / vec * vec); break;
    }
  }
  return shapes;
}

ProblemConfig random_config(std::uint64_t seed, const RandomLimits& limits) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  ProblemConfig cfg;
  cfg.format = (rng() & 1) ? Format::mxfp4 : Format::nvfp4;
  cfg.layout = (rng() & 1) ? ScaleLayout::blocked : ScaleLayout::linear;
  cfg.out_type = static_cast<OutType>(uniform(rng, 0, 2));
  cfg.values = (rng() & 1) ? Values::full : Values::gpumode;
  cfg.shapes = random_shapes(rng, cfg.format, limits);
  cfg.seed = rng();
  cfg.padded_strides = chance(rng, 0.4);
  cfg.alignment = chance(rng, 0.5) ? 16 : (1 << uniform(rng, 5, 8));
  cfg.nan_scales = cfg.values == Values::full && chance(rng, 0.25);
  cfg.null_empty_groups = chance(rng, 0.5);
  const auto pick_alpha = [&] {
    if (cfg.values == Values::gpumode) {  // powers of two keep the output bit-exact
      constexpr float kExact[] = {1.0f, 2.0f, 0.5f, 0.25f, 4.0f, -1.0f, -0.5f, 0.0f};
      return kExact[uniform(rng, 0, 7)];
    }
    return static_cast<float>(std::uniform_real_distribution<double>(-3.0, 3.0)(rng));
  };
  switch (uniform(rng, 0, 2)) {
    case 0: break;
    case 1: cfg.alphas = {pick_alpha()}; break;
    default:
      for (std::size_t i = 0; i < cfg.shapes.size(); ++i) cfg.alphas.push_back(pick_alpha());
  }
  cfg.alpha_on_device = chance(rng, 0.3);

  // Blank groups (GroupDesc{}) among the real ones, from a separate generator so that everything
  // drawn above is what it was before blank groups existed.
  std::mt19937_64 blank_rng(seed * 0xD1B54A32D192ED03ull + 0x8BB84B93962EACC9ull);
  for (Shape& s : cfg.shapes)
    if (s.m == 0 && chance(blank_rng, limits.blank_rate)) s = Shape{};
  if (chance(blank_rng, limits.blank_insert_rate)) {
    const int extra = uniform(blank_rng, 1, 3);
    for (int i = 0; i < extra; ++i) {
      const auto at = static_cast<std::ptrdiff_t>(uniform(blank_rng, 0, static_cast<int>(cfg.shapes.size())));
      cfg.shapes.insert(cfg.shapes.begin() + at, Shape{});
      if (cfg.alphas.size() > 1) cfg.alphas.insert(cfg.alphas.begin() + at, 1.0f);
    }
  }
  return cfg;
}

RandomLimits fused_random_limits() {
  RandomLimits limits;
  limits.max_groups = 64;
  limits.max_m = 600;
  limits.max_n = 1536;
  limits.max_k = 4096;
  limits.mac_budget = 3.0e7;
  return limits;
}

// ---- device buffers -------------------------------------------------------------------------

DeviceProblem::DeviceProblem(const Problem& problem)
    : problem_(&problem), guard_bytes_(problem.config.guard_bytes) {
  const ProblemConfig& cfg = problem.config;
  const std::size_t elem = out_type_size(cfg.out_type);
  std::mt19937_64 rng(cfg.seed ^ 0xA0761D6478BD642Full);
  std::size_t pos = 0;
  // Every buffer starts at a random multiple of cfg.alignment past a 256-byte boundary.
  const auto place = [&](std::size_t bytes) {
    std::size_t offset = round_up(pos, 256);
    if (cfg.alignment < 256) offset += static_cast<std::size_t>(cfg.alignment) * uniform(rng, 0, 256 / cfg.alignment - 1);
    pos = offset + bytes;
    return offset;
  };
  offsets_.resize(problem.groups.size());
  for (std::size_t g = 0; g < problem.groups.size(); ++g) {
    const GroupData& d = problem.groups[g];
    if (d.null_pointers) continue;
    Offsets& o = offsets_[g];
    pos += 256;
    o.a = place(d.a.size());
    o.b = place(d.b.size());
    o.sfa = place(d.sfa.size());
    o.sfb = place(d.sfb.size());
    if (cfg.alpha_on_device) o.alpha = place(sizeof(float));
    pos += guard_bytes_;
    o.c_bytes = static_cast<std::size_t>(d.m) * static_cast<std::size_t>(d.ldc) * elem;
    o.c = place(o.c_bytes);
    pos += guard_bytes_;
  }
  image_.resize(round_up(pos + 256, 256));
  random_bytes(rng, image_.data(), image_.size());  // guards, gaps: garbage
  for (std::size_t g = 0; g < problem.groups.size(); ++g) {
    const GroupData& d = problem.groups[g];
    if (d.null_pointers) continue;
    const Offsets& o = offsets_[g];
    std::copy(d.a.begin(), d.a.end(), image_.begin() + static_cast<std::ptrdiff_t>(o.a));
    std::copy(d.b.begin(), d.b.end(), image_.begin() + static_cast<std::ptrdiff_t>(o.b));
    std::copy(d.sfa.begin(), d.sfa.end(), image_.begin() + static_cast<std::ptrdiff_t>(o.sfa));
    std::copy(d.sfb.begin(), d.sfb.end(), image_.begin() + static_cast<std::ptrdiff_t>(o.sfb));
    if (o.alpha != kNone) std::memcpy(image_.data() + o.alpha, &d.alpha, sizeof(float));
    // The NaN poison in the C cells; the row padding (ldc > N) keeps its garbage, the same for
    // both poisons.
    for (int r = 0; r < d.m; ++r)
      std::fill_n(image_.begin() + static_cast<std::ptrdiff_t>(o.c + static_cast<std::size_t>(r) * static_cast<std::size_t>(d.ldc) * elem),
                  static_cast<std::size_t>(d.n) * elem, std::uint8_t{0xFF});
  }

  FP4GEMM_TEST_CUDA(cudaMalloc(reinterpret_cast<void**>(&device_), image_.size()));
  try {
    reset();
  } catch (...) {
    cudaFree(device_);
    throw;
  }

  descs_.resize(problem.groups.size());
  for (std::size_t g = 0; g < problem.groups.size(); ++g) {
    const GroupData& d = problem.groups[g];
    const Offsets& o = offsets_[g];
    GroupDesc& desc = descs_[g];
    if (d.blank) continue;  // GroupDesc{} exactly
    desc.m = d.m, desc.n = d.n, desc.k = d.k;
    desc.lda = d.lda, desc.ldb = d.ldb, desc.ldc = d.ldc;
    desc.alpha = d.alpha;
    if (d.null_pointers) continue;
    desc.a = device_ + o.a;
    desc.b = device_ + o.b;
    desc.sfa = device_ + o.sfa;
    desc.sfb = device_ + o.sfb;
    desc.c = device_ + o.c;
    if (o.alpha != kNone) {
      desc.alpha_device = reinterpret_cast<const float*>(device_ + o.alpha);
      desc.alpha = std::numeric_limits<float>::quiet_NaN();  // must not be used
    }
  }
}

DeviceProblem::~DeviceProblem() {
  if (device_) cudaFree(device_);
}

Options DeviceProblem::options(Backend backend) const {
  Options o;
  o.format = problem_->config.format;
  o.scale_layout = problem_->config.layout;
  o.out_type = problem_->config.out_type;
  o.backend = backend;
  o.device = -1;
  return o;
}

void DeviceProblem::reset(Poison poison) const {
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
  if (poison == Poison::nan) {
    FP4GEMM_TEST_CUDA(cudaMemcpy(device_, image_.data(), image_.size(), cudaMemcpyHostToDevice));
  } else {
    const OutType type = problem_->config.out_type;
    const std::size_t elem = out_type_size(type);
    const std::uint32_t bits = poison_bits(poison, type);
    std::uint8_t pattern[4];
    std::memcpy(pattern, &bits, elem);  // little endian: the low `elem` bytes
    std::vector<std::uint8_t> image = image_;
    for (std::size_t g = 0; g < problem_->groups.size(); ++g) {
      const GroupData& d = problem_->groups[g];
      const Offsets& o = offsets_[g];
      if (o.c == kNone) continue;
      for (int r = 0; r < d.m; ++r) {
        std::uint8_t* row = image.data() + o.c + static_cast<std::size_t>(r) * static_cast<std::size_t>(d.ldc) * elem;
        for (int n = 0; n < d.n; ++n) std::memcpy(row + static_cast<std::size_t>(n) * elem, pattern, elem);
      }
    }
    FP4GEMM_TEST_CUDA(cudaMemcpy(device_, image.data(), image.size(), cudaMemcpyHostToDevice));
  }
  // A pageable upload may still be in flight when cudaMemcpy returns; other streams must not
  // race it.
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
}

std::vector<std::uint8_t> DeviceProblem::download() const {
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<std::uint8_t> out(image_.size());
  FP4GEMM_TEST_CUDA(cudaMemcpy(out.data(), device_, out.size(), cudaMemcpyDeviceToHost));
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
  return out;
}

// ---- expected outputs -----------------------------------------------------------------------

Expected cpu_expected(const Problem& p, double mac_budget) {
  const ProblemConfig& cfg = p.config;
  const std::size_t elem = out_type_size(cfg.out_type);
  const int vec = scale_block_size(cfg.format);
  const double total = p.macs();
  const bool sample = total > mac_budget;
  std::mt19937_64 rng(cfg.seed ^ 0x5851F42D4C957F2Dull);

  Expected e;
  e.source = sample ? "CPU reference (sampled rows)" : "CPU reference";
  const std::size_t groups = p.groups.size();
  e.rows.resize(groups);
  e.values.resize(groups);
  std::vector<std::vector<std::uint8_t>> sub_a(groups), sub_sfa(groups);
  std::vector<reference::HostGroup> host;
  for (std::size_t g = 0; g < groups; ++g) {
    const GroupData& d = p.groups[g];
    if (d.m == 0) continue;
    std::vector<int>& rows = e.rows[g];
    if (!sample) {
      rows.resize(static_cast<std::size_t>(d.m));
      for (int r = 0; r < d.m; ++r) rows[static_cast<std::size_t>(r)] = r;
    } else {
      const int want = std::clamp(static_cast<int>(d.m * (mac_budget / total)), std::min(d.m, 4), d.m);
      std::vector<int> all(static_cast<std::size_t>(d.m));
      for (int r = 0; r < d.m; ++r) all[static_cast<std::size_t>(r)] = r;
      std::shuffle(all.begin() + 1, all.end() - (d.m > 1 ? 1 : 0), rng);  // keep first and last
      rows.assign(all.begin(), all.begin() + std::max(0, want - (d.m > 1 ? 1 : 0)));
      if (d.m > 1) rows.push_back(d.m - 1);
      std::sort(rows.begin(), rows.end());
      rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    }
    const std::int64_t cols = d.k / vec;
    const std::uint8_t* a = d.a.data();
    const std::uint8_t* sfa = d.sfa_linear.data();
    if (rows.size() != static_cast<std::size_t>(d.m)) {  // gather the sampled rows
      sub_a[g].resize(rows.size() * static_cast<std::size_t>(d.lda));
      sub_sfa[g].resize(rows.size() * static_cast<std::size_t>(cols));
      for (std::size_t i = 0; i < rows.size(); ++i) {
        std::memcpy(sub_a[g].data() + i * static_cast<std::size_t>(d.lda),
                    d.a.data() + static_cast<std::size_t>(rows[i]) * static_cast<std::size_t>(d.lda),
                    static_cast<std::size_t>(d.lda));
        std::memcpy(sub_sfa[g].data() + i * static_cast<std::size_t>(cols),
                    d.sfa_linear.data() + static_cast<std::size_t>(rows[i]) * static_cast<std::size_t>(cols),
                    static_cast<std::size_t>(cols));
      }
      a = sub_a[g].data();
      sfa = sub_sfa[g].data();
    }
    e.values[g].assign(rows.size() * static_cast<std::size_t>(d.n) * elem, 0);
    reference::HostGroup h;
    h.m = static_cast<int>(rows.size());
    h.n = d.n;
    h.k = d.k;
    h.a = a;
    h.lda = d.lda;
    h.b = d.b.data();
    h.ldb = d.ldb;
    h.sfa = sfa;
    h.sfb = d.sfb_linear.data();
    h.c = e.values[g].data();
    h.ldc = d.n;
    h.alpha = d.alpha;
    host.push_back(h);
  }
  // The host data keeps linear scales; the device layout is exercised on the GPU side.
  reference::grouped_gemm(host, cfg.format, ScaleLayout::linear, cfg.out_type);
  return e;
}

Expected backend_expected(const Problem& p, const DeviceProblem& device, Backend oracle) {
  const std::size_t elem = out_type_size(p.config.out_type);
  const Plan plan(device.descs(), device.options(oracle));
  const std::vector<std::uint8_t> arena = run_plan(plan, device, Launch::stream, Poison::nan);
  if (run_plan(plan, device, Launch::stream, Poison::finite) != arena)
    throw std::runtime_error(std::string("oracle backend ") + fp4gemm::to_string(oracle) + " (" +
                             plan.kernel_name() +
                             ") gives different arenas with the NaN and the finite poison: it leaves "
                             "elements unwritten (or is nondeterministic)");
  Expected e;
  e.source = std::string("backend ") + fp4gemm::to_string(oracle) + " (" + plan.kernel_name() + ")";
  e.rows.resize(p.groups.size());
  e.values.resize(p.groups.size());
  for (std::size_t g = 0; g < p.groups.size(); ++g) {
    const GroupData& d = p.groups[g];
    if (d.m == 0) continue;
    const std::size_t row_bytes = static_cast<std::size_t>(d.n) * elem;
    e.values[g].resize(static_cast<std::size_t>(d.m) * row_bytes);
    for (int r = 0; r < d.m; ++r) {
      e.rows[g].push_back(r);
      std::memcpy(e.values[g].data() + static_cast<std::size_t>(r) * row_bytes,
                  arena.data() + device.offsets()[g].c + static_cast<std::size_t>(r) * static_cast<std::size_t>(d.ldc) * elem,
                  row_bytes);
    }
  }
  return e;
}

// ---- running --------------------------------------------------------------------------------

namespace {

class Stream {
 public:
  Stream() { FP4GEMM_TEST_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

void run_through_graph(const Plan& plan, cudaStream_t stream) {
  FP4GEMM_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaGraph_t graph = nullptr;
  try {
    plan.run(stream);
  } catch (...) {
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  FP4GEMM_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  if (instantiated != cudaSuccess) {
    cudaGraphDestroy(graph);
    cuda_check(instantiated, "cudaGraphInstantiate");
  }
  const cudaError_t launched = cudaGraphLaunch(exec, stream);
  const cudaError_t synced = cudaStreamSynchronize(stream);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cuda_check(launched, "cudaGraphLaunch");
  cuda_check(synced, "cudaStreamSynchronize after the graph");
}

}  // namespace

std::vector<std::uint8_t> run_plan(const Plan& plan, const DeviceProblem& device, Launch launch,
                                   Poison poison) {
  device.reset(poison);
  const Stream stream;
  if (launch == Launch::graph)
    run_through_graph(plan, stream.get());
  else
    plan.run(stream.get());
  FP4GEMM_TEST_CUDA(cudaStreamSynchronize(stream.get()));
  FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
  FP4GEMM_TEST_CUDA(cudaGetLastError());
  return device.download();
}

// ---- checking -------------------------------------------------------------------------------

namespace {

// Where an arena byte lives, for reports.
std::string locate(const Problem& p, const DeviceProblem& device, std::size_t offset) {
  const std::size_t elem = out_type_size(p.config.out_type);
  const auto& offsets = device.offsets();
  for (std::size_t g = 0; g < offsets.size(); ++g) {
    const GroupData& d = p.groups[g];
    const DeviceProblem::Offsets& o = offsets[g];
    if (o.c == DeviceProblem::kNone) continue;
    const std::string group = "group " + std::to_string(g);
    const auto inside = [&](std::size_t begin, std::size_t bytes) {
      return begin != DeviceProblem::kNone && offset >= begin && offset < begin + bytes;
    };
    if (inside(o.a, d.a.size())) {
      const std::size_t rel = offset - o.a;
      return "input A of " + group + " (row " + std::to_string(rel / static_cast<std::size_t>(d.lda)) +
             ", byte " + std::to_string(rel % static_cast<std::size_t>(d.lda)) + ")";
    }
    if (inside(o.b, d.b.size())) {
      const std::size_t rel = offset - o.b;
      return "input B of " + group + " (row " + std::to_string(rel / static_cast<std::size_t>(d.ldb)) +
             ", byte " + std::to_string(rel % static_cast<std::size_t>(d.ldb)) + ")";
    }
    if (inside(o.sfa, d.sfa.size())) return "scales of A of " + group;
    if (inside(o.sfb, d.sfb.size())) return "scales of B of " + group;
    if (inside(o.alpha, sizeof(float))) return "alpha_device of " + group;
    if (inside(o.c, o.c_bytes)) {
      const std::size_t rel = (offset - o.c) / elem;
      const std::size_t col = rel % static_cast<std::size_t>(d.ldc);
      return "C of " + group + ", row " + std::to_string(rel / static_cast<std::size_t>(d.ldc)) + ", col " +
             std::to_string(col) +
             (col >= static_cast<std::size_t>(d.n)
                  ? " (row padding: N = " + std::to_string(d.n) + ", ldc = " + std::to_string(d.ldc) + ")"
                  : std::string());
    }
    if (offset < o.c && offset + device.guard_bytes() >= o.c)
      return "guard band before C of " + group + " (" + std::to_string(o.c - offset) + " bytes before)";
    if (offset >= o.c + o.c_bytes && offset < o.c + o.c_bytes + device.guard_bytes())
      return "guard band after C of " + group + " (" + std::to_string(offset - o.c - o.c_bytes) +
             " bytes after the last row)";
  }
  return "unused gap of the arena";
}

}  // namespace

::testing::AssertionResult check_outputs(const Problem& p, const DeviceProblem& device,
                                         const Expected& expected,
                                         std::span<const std::uint8_t> arena,
                                         const CheckOptions& options) {
  const ProblemConfig& cfg = p.config;
  const OutType type = cfg.out_type;
  const std::size_t elem = out_type_size(type);
  const TypeGrid tg = grid(type);
  const std::vector<std::uint8_t>& image = device.image();
  if (arena.size() != image.size())
    return ::testing::AssertionFailure() << "arena of " << arena.size() << " bytes, expected " << image.size();
  if (expected.rows.size() != p.groups.size() || expected.values.size() != p.groups.size())
    return ::testing::AssertionFailure() << "expected outputs do not match the problem's groups";

  std::ostringstream report;
  int reported = 0;
  const auto note = [&](const std::string& line) {
    if (reported++ < options.max_reports) report << "\n  " << line;
  };

  // 1. Nothing outside the C cells changed (inputs, guard bands, row padding, gaps).
  std::vector<std::pair<std::size_t, std::size_t>> cells;  // [begin, end) of each C row
  for (std::size_t g = 0; g < p.groups.size(); ++g) {
    const GroupData& d = p.groups[g];
    const DeviceProblem::Offsets& o = device.offsets()[g];
    if (d.m == 0 || o.c == DeviceProblem::kNone) continue;
    for (int r = 0; r < d.m; ++r) {
      const std::size_t begin = o.c + static_cast<std::size_t>(r) * static_cast<std::size_t>(d.ldc) * elem;
      cells.emplace_back(begin, begin + static_cast<std::size_t>(d.n) * elem);
    }
  }
  std::sort(cells.begin(), cells.end());
  std::int64_t changed_bytes = 0;
  const auto compare_span = [&](std::size_t begin, std::size_t end) {
    if (begin >= end || std::memcmp(arena.data() + begin, image.data() + begin, end - begin) == 0) return;
    for (std::size_t i = begin; i < end; ++i) {
      if (arena[i] == image[i]) continue;
      ++changed_bytes;
      if (i == begin || arena[i - 1] == image[i - 1]) {  // first byte of a changed run
        if (reported >= options.max_reports) {  // counted only: locate() walks every group
          ++reported;
          continue;
        }
        char buf[64];
        std::snprintf(buf, sizeof buf, " changed 0x%02x -> 0x%02x", image[i], arena[i]);
        note("write outside C: arena byte " + std::to_string(i) + ", " + locate(p, device, i) + buf);
      }
    }
  };
  std::size_t pos = 0;
  for (const auto& [begin, end] : cells) {
    compare_span(pos, begin);
    pos = std::max(pos, end);
  }
  compare_span(pos, arena.size());

  // 2. Every element of C: checked rows against `expected`, the others for "written" and NaN.
  const bool exact = p.bit_exact();
  std::int64_t mismatches = 0, checked = 0, unwritten = 0;
  for (std::size_t g = 0; g < p.groups.size(); ++g) {
    const GroupData& d = p.groups[g];
    const DeviceProblem::Offsets& o = device.offsets()[g];
    if (d.m == 0) continue;
    const int vec = scale_block_size(cfg.format);
    const std::int64_t cols = d.k / vec;
    // An output is NaN iff its row of A or its row of B has a NaN scale (values are finite).
    std::vector<char> nan_row(static_cast<std::size_t>(d.m), 0), nan_col(static_cast<std::size_t>(d.n), 0);
    for (int r = 0; r < d.m; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        if (is_nan_scale(cfg.format, d.sfa_linear[static_cast<std::size_t>(r * cols + c)])) nan_row[static_cast<std::size_t>(r)] = 1;
    for (int n = 0; n < d.n; ++n)
      for (std::int64_t c = 0; c < cols; ++c)
        if (is_nan_scale(cfg.format, d.sfb_linear[static_cast<std::size_t>(n * cols + c)])) nan_col[static_cast<std::size_t>(n)] = 1;

    std::vector<int> expected_index(static_cast<std::size_t>(d.m), -1);
    for (std::size_t i = 0; i < expected.rows[g].size(); ++i) expected_index[static_cast<std::size_t>(expected.rows[g][i])] = static_cast<int>(i);
    const std::uint8_t* out = arena.data() + o.c;
    for (int r = 0; r < d.m; ++r) {
      const int ei = expected_index[static_cast<std::size_t>(r)];
      for (int n = 0; n < d.n; ++n) {
        const std::uint32_t got_bits = load_bits(out, type, static_cast<std::int64_t>(r) * d.ldc + n);
        const double got = bits_to_double(got_bits, type);
        const auto where = [&] {
          return "group " + std::to_string(g) + " row " + std::to_string(r) + " col " + std::to_string(n);
        };
        const bool poison = got_bits == poison_bits(Poison::nan, type) || got_bits == poison_bits(Poison::finite, type);
        if (ei < 0) {  // not in the reference subset: written, NaN exactly where predicted
          const bool want_nan = nan_row[static_cast<std::size_t>(r)] || nan_col[static_cast<std::size_t>(n)];
          if (std::isnan(got) != want_nan) {
            ++mismatches;
            if (poison) ++unwritten;
            note(where() + ": got " + fmt(got) + " (" + hex_bits(got_bits, type) + ")" +
                 (poison ? " = poison, never written" : want_nan ? ", expected NaN" : ", expected a number"));
          }
          continue;
        }
        ++checked;
        const std::uint32_t want_bits = load_bits(expected.values[g].data(), type, static_cast<std::int64_t>(ei) * d.n + n);
        const double want = bits_to_double(want_bits, type);
        bool ok;
        std::string detail;
        if (std::isnan(want) || std::isnan(got)) {
          ok = std::isnan(want) && std::isnan(got);
        } else if (exact) {
          ok = got_bits == want_bits || (got == 0.0 && want == 0.0);
          if (!ok) detail = " (bit-exact required)";
        } else if (got == want) {
          ok = true;
        } else {
          const double diff = std::fabs(got - want);
          const double kk = d.k;
          ok = (options.tolerance == Tolerance::gpumode_rule && diff <= 1e-3 + 1e-3 * std::fabs(want)) ||
               (options.tolerance == Tolerance::fp32_bound && std::isfinite(want) &&
                std::fabs(want) >= std::ldexp(1.0, tg.min_exponent) &&
                diff <= kk * std::ldexp(0.99, -22) * std::fabs(want));
          if (!ok) {  // the exact value and the FP32-accumulation bound decide
            const ExactValue x = exact_value(p, d, r, n);
            double slack = kk * std::ldexp(x.abs_sum, -22) + std::ldexp(std::fabs(x.value), -22) + tg.min_step;
            if (options.tolerance == Tolerance::gpumode_rule) slack += 1e-3 + 1e-3 * std::fabs(x.value);
            if (std::isinf(got))
              ok = std::signbit(got) == std::signbit(x.value) && std::fabs(x.value) + slack >= tg.overflow;
            else
              ok = std::fabs(got - x.value) <= slack + half_ulp(tg, std::max(std::fabs(got), std::fabs(x.value)));
            detail = " (exact " + fmt(x.value) + ", allowed +-" +
                     fmt(slack + half_ulp(tg, std::max(std::isinf(got) ? 0.0 : std::fabs(got), std::fabs(x.value)))) +
                     ", sum|ab| " + fmt(x.abs_sum) + ")";
          }
        }
        if (!ok) {
          ++mismatches;
          if (poison) ++unwritten;
          note(where() + ": got " + fmt(got) + " (" + hex_bits(got_bits, type) + ")" +
               (poison ? " = poison, never written" : "") + ", expected " + fmt(want) + " (" +
               hex_bits(want_bits, type) + ")" + detail);
        }
      }
    }
  }

  if (changed_bytes == 0 && mismatches == 0) return ::testing::AssertionSuccess();
  ::testing::AssertionResult failure = ::testing::AssertionFailure();
  failure << p.describe() << "\n  " << mismatches << " wrong elements (" << unwritten
          << " never written; " << checked << " compared with the " << expected.source << ", "
          << (exact ? "bit-exact" : options.tolerance == Tolerance::gpumode_rule ? "gpumode rule" : "fp32 bound")
          << "), " << changed_bytes << " bytes changed outside C";
  if (reported > options.max_reports) report << "\n  ... (" << reported - options.max_reports << " more)";
  failure << report.str();
  return failure;
}

::testing::AssertionResult run_plan_and_check(const Problem& problem, const DeviceProblem& device,
                                              const Plan& plan, const Expected& expected,
                                              const RunOptions& options) {
  const std::string context = "[kernel " + plan.kernel_name() +
                              (options.launch == Launch::graph ? ", graph" : "") + "]";
  try {
    std::vector<std::uint8_t> first;
    for (int run = 0; run < std::max(2, options.runs); ++run) {
      const Poison poison = run % 2 == 0 ? Poison::nan : Poison::finite;
      std::vector<std::uint8_t> arena = run_plan(plan, device, options.launch, poison);
      ::testing::AssertionResult result = check_outputs(problem, device, expected, arena, options.check);
      if (!result)
        return ::testing::AssertionFailure() << context << " run " << run << " (" << to_string(poison)
                                             << "): " << result.message();
      if (run == 0) {
        first = std::move(arena);
      } else if (arena != first) {
        // Outside the C cells both images are the same and unchanged (checked above): a
        // difference is an element left unwritten in one run, or a nondeterministic one.
        const auto diff = std::mismatch(arena.begin(), arena.end(), first.begin());
        const auto at = static_cast<std::size_t>(diff.first - arena.begin());
        char bytes[64];
        std::snprintf(bytes, sizeof bytes, " (byte 0x%02x in run 0, 0x%02x in run %d)", first[at], arena[at], run);
        return ::testing::AssertionFailure()
               << problem.describe() << " " << context << ": run " << run << " (" << to_string(poison)
               << ") differs bitwise from run 0 (NaN poison): unwritten or nondeterministic at "
               << locate(problem, device, at) << bytes;
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const Error& e) {
    return ::testing::AssertionFailure() << problem.describe() << " " << context << ": fp4gemm::Error("
                                         << e.argument() << ", " << e.group() << "): " << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << problem.describe() << " " << context << ": exception: " << e.what();
  }
}

::testing::AssertionResult run_and_check(const ProblemConfig& config, Backend backend,
                                         const RunOptions& options) {
  const std::string context = config.describe() + " [backend " + fp4gemm::to_string(backend) +
                              (options.launch == Launch::graph ? ", graph" : "") + "]";
  try {
    const Problem problem = make_problem(config);
    const DeviceProblem device(problem);
    Options plan_options = device.options(backend);
    plan_options.tuning = options.tuning;
    const Plan plan(device.descs(), plan_options);
    const Expected expected = cpu_expected(problem, options.mac_budget);
    ::testing::AssertionResult result = run_plan_and_check(problem, device, plan, expected, options);
    if (!result)
      return ::testing::AssertionFailure() << "[backend " << fp4gemm::to_string(backend) << "] "
                                           << result.message();
    return result;
  } catch (const Error& e) {
    return ::testing::AssertionFailure() << context << ": fp4gemm::Error(" << e.argument() << ", "
                                         << e.group() << "): " << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << context << ": exception: " << e.what();
  }
}

}  // namespace fp4gemm::test
