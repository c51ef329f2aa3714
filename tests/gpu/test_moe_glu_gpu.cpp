// GPU tier: the MoE GEMM with a GLU epilogue (SwiGLU / gpt-oss swigluoai, issue 21 part 1).
//
// Every case: random expert weights with gate and up rows in one of the three layouts (stacked,
// interleaved, separate -- the separate up buffer below or above the gate one), scales linear or
// blocked, W4A4 (NVFP4 / MXFP4) or W4A16, a few routings with one plan (random rows per expert,
// all rows to one expert, empty), an optional gather index, gate and up alphas per expert.
// C lives in an arena with random guard bands and row padding, its cells poisoned (NaN, then a
// finite sentinel: both runs must agree bit for bit, so every owned cell was written). Checked:
//  - GPU MODE data (values {0, +-0.5, +-1, +-1.5}, scales {1, 2}, power-of-two alphas): every
//    FP32 sum is exact, so the output equals reference::moe_gemm's FP32 epilogue (glu_fp32: the
//    kernel's own activation code on the host) bit for bit;
//  - full-range data: within the FP32 products' bound (SPEC §3) carried through the activation
//    (derivative bounds below), plus the activation's FP32 evaluation, of the float64 value;
//  - rows no expert owns, guard bands and padding: unchanged.
// A quarter of the cases plan with rescale_each_run and write new scale bytes in place before each
// routing after the first: the reference uses the new ones, so a stale plan copy fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "fp4gemm/formats.hpp"
#include "fp4gemm/moe.hpp"
#include "fp4gemm/reference.hpp"
#include "gpu/problem.hpp"

namespace fp4gemm::test {
namespace {

bool glu_kernel_available() { return device_count() > 0 && device_info().has_fast_kernel; }

struct GluCase {
  Format format = Format::nvfp4;
  MoeActivation act = MoeActivation::fp4;
  Values values = Values::gpumode;
  MoeEpilogue epilogue = MoeEpilogue::silu;
  GateUpLayout gate_up = GateUpLayout::stacked;
  bool up_below = false;  // separate: w_up at a lower address than w (the swapped map)
  ScaleLayout scale_layout = ScaleLayout::blocked;
  OutType out = OutType::bf16;
  int experts = 8, width = 64, k = 256, capacity = 300;
  bool gather = false;
  bool alpha_up = true;  // own up alphas (else the gate's)
  bool rescale = false;  // MoeOptions::rescale_each_run, new scale bytes written in place between runs
  bool pieces = false;   // MoeOptions::weight_layout pieces: w packed by pack_pieces_gate_up (dense rows, K % 32 == 0)
  std::uint64_t seed = 1;

  std::string describe() const {
    std::ostringstream os;
    os << to_string(format) << (act == MoeActivation::bf16 ? " W4A16" : " W4A4") << " " << to_string(values) << " "
       << to_string(epilogue) << " " << to_string(gate_up) << (up_below ? " (up below)" : "") << " "
       << to_string(scale_layout) << " scales -> " << to_string(out) << ", E " << experts << " I " << width << " K "
       << k << " capacity " << capacity << (gather ? " gather" : "") << (alpha_up ? " alpha_up" : "") << (rescale ? " rescale_each_run" : "") << (pieces ? " pieces" : "") << " seed "
       << seed;
    return os.str();
  }
};

std::uint16_t bf16_bits(double v) { return reference::float_to_bf16_bits(v); }

// Activations: packed e2m1 + linear scales, or bf16 bits, `rows` rows of row stride lda bytes.
struct Activations {
  std::vector<std::uint8_t> a, scales;
  std::int64_t lda = 0;
  std::vector<std::vector<double>> dq;  // dequantised rows (exact)
};

Activations make_activations(const GluCase& c, std::mt19937_64& rng, int rows) {
  Activations x;
  const int vec = scale_block_size(c.format), cols = c.k / vec;
  x.dq.assign(rows, std::vector<double>(c.k));
  if (c.act == MoeActivation::fp4) {
    x.lda = (c.k / 2 + 15) / 16 * 16;
    x.a = random_packed(rng, c.values, rows, c.k, x.lda);
    x.scales = random_scales(rng, c.format, c.values, rows, cols);
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < c.k; ++k)
        x.dq[r][k] = static_cast<double>(formats::e2m1_to_float(formats::get_nibble(x.a.data() + r * x.lda, k))) *
                     formats::scale_to_float(c.format, x.scales[static_cast<std::size_t>(r) * cols + k / vec]);
    return x;
  }
  x.lda = static_cast<std::int64_t>(c.k) * 2;
  x.a.resize(static_cast<std::size_t>(rows) * x.lda);
  std::uniform_int_distribution<int> pick(0, 6);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> binade(-6, 6);
  static const double kGpuMode[7] = {0, 0.5, -0.5, 1, -1, 1.5, -1.5};
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < c.k; ++k) {
      const double v = c.values == Values::gpumode ? kGpuMode[pick(rng)] : std::ldexp(normal(rng), binade(rng));
      const std::uint16_t b = bf16_bits(v);
      std::memcpy(x.a.data() + r * x.lda + 2 * k, &b, 2);
      x.dq[r][k] = reference::bf16_bits_to_double(b);
    }
  return x;
}

// Rows per expert: random (some empty), all to one expert, or none.
std::vector<int> make_offsets(const GluCase& c, std::mt19937_64& rng, int kind) {
  std::vector<int> counts(c.experts, 0);
  std::uniform_int_distribution<int> total_d(1, c.capacity);
  const int total = kind == 2 ? 0 : total_d(rng);
  if (kind == 1) {
    counts[std::uniform_int_distribution<int>(0, c.experts - 1)(rng)] = total;
  } else if (total > 0) {
    std::vector<double> weight(c.experts);
    std::uniform_real_distribution<double> u(0, 1);
    for (double& x : weight) x = u(rng) < 0.3 ? 0.0 : u(rng);
    weight[0] += 1e-3;
    std::discrete_distribution<int> d(weight.begin(), weight.end());
    for (int i = 0; i < total; ++i) ++counts[d(rng)];
  }
  std::vector<int> offsets(c.experts + 1, 0);
  for (int e = 0; e < c.experts; ++e) offsets[e + 1] = offsets[e] + counts[e];
  return offsets;
}

::testing::AssertionResult run_glu_case(const GluCase& c) {
  std::mt19937_64 rng(c.seed);
  const int E = c.experts, I = c.width, K = c.k, vec = scale_block_size(c.format), cols = K / vec;
  const bool separate = c.gate_up == GateUpLayout::separate;
  const int wrows = separate ? I : 2 * I;
  const std::int64_t ldw = c.pieces ? K / 2 : (K / 2 + 15) / 16 * 16 + (c.seed % 2 ? 16 : 0);
  const std::int64_t expert_stride = wrows * ldw;
  // Weights (and the separate up rows) in one device buffer: gate at offset 0 or after the up rows.
  const std::vector<std::uint8_t> w = random_packed(rng, c.values, E * wrows, K, ldw);
  const std::vector<std::uint8_t> w_up = separate ? random_packed(rng, c.values, E * wrows, K, ldw) : std::vector<std::uint8_t>{};
  auto scales_of = [&](int rows_per_expert) {
    const std::vector<std::uint8_t> lin = random_scales(rng, c.format, c.values, E * rows_per_expert, cols);
    if (c.scale_layout == ScaleLayout::linear) return std::make_pair(lin, lin);
    const std::size_t blk = formats::blocked_scale_bytes(rows_per_expert, cols);
    std::vector<std::uint8_t> out(blk * E, 0x7F);
    for (int e = 0; e < E; ++e)
      formats::linear_to_blocked(lin.data() + static_cast<std::size_t>(e) * rows_per_expert * cols, rows_per_expert, cols,
                                 out.data() + e * blk);
    return std::make_pair(out, lin);
  };
  std::vector<std::uint8_t> s_main, s_main_lin, s_up, s_up_lin;
  std::tie(s_main, s_main_lin) = scales_of(wrows);
  if (separate) std::tie(s_up, s_up_lin) = scales_of(wrows);
  const std::int64_t scale_stride = static_cast<std::int64_t>(formats::scale_bytes(c.scale_layout, wrows, cols));
  // Alphas: powers of two on GPU MODE data (products stay exact), else random.
  std::vector<float> alpha(E), alpha_up(E);
  std::uniform_int_distribution<int> p2(-3, 3);
  std::uniform_real_distribution<float> ur(0.25f, 2.0f);
  for (int e = 0; e < E; ++e) {
    alpha[e] = c.values == Values::gpumode ? std::ldexp(1.0f, p2(rng)) : ur(rng);
    alpha_up[e] = c.alpha_up ? (c.values == Values::gpumode ? std::ldexp(1.0f, p2(rng)) : ur(rng)) : alpha[e];
  }

  const std::size_t w_bytes = w.size(), gap = 4096;
  DeviceBuffer d_w(w_bytes * (separate ? 2 : 1) + gap);
  std::uint8_t* dw_gate = d_w.get() + (separate && c.up_below ? w_bytes + gap : 0);
  std::uint8_t* dw_up = separate ? d_w.get() + (c.up_below ? 0 : w_bytes + gap) : nullptr;
  FP4GEMM_TEST_CUDA(cudaMemcpy(dw_gate, w.data(), w_bytes, cudaMemcpyHostToDevice));
  if (separate) FP4GEMM_TEST_CUDA(cudaMemcpy(dw_up, w_up.data(), w_bytes, cudaMemcpyHostToDevice));
  const std::size_t up_at = (s_main.size() + 15) / 16 * 16;  // the up scales: 16-byte aligned, as required
  DeviceBuffer d_s(up_at + s_up.size() + 16);
  FP4GEMM_TEST_CUDA(cudaMemcpy(d_s.get(), s_main.data(), s_main.size(), cudaMemcpyHostToDevice));
  if (separate) FP4GEMM_TEST_CUDA(cudaMemcpy(d_s.get() + up_at, s_up.data(), s_up.size(), cudaMemcpyHostToDevice));
  DeviceBuffer d_alpha(8 * E);
  FP4GEMM_TEST_CUDA(cudaMemcpy(d_alpha.get(), alpha.data(), 4 * E, cudaMemcpyHostToDevice));
  FP4GEMM_TEST_CUDA(cudaMemcpy(d_alpha.get() + 4 * E, alpha_up.data(), 4 * E, cudaMemcpyHostToDevice));

  MoeWeights mw;
  mw.experts = E, mw.n = I, mw.k = K;
  mw.w = dw_gate, mw.ldw = ldw, mw.expert_stride = expert_stride;
  mw.scales = d_s.get(), mw.scale_expert_stride = scale_stride;
  mw.alpha_device = reinterpret_cast<const float*>(d_alpha.get());
  if (c.alpha_up) mw.alpha_up_device = reinterpret_cast<const float*>(d_alpha.get() + 4 * E);
  if (separate) mw.w_up = dw_up, mw.scales_up = d_s.get() + up_at;
  std::unique_ptr<DeviceBuffer> d_pieces;
  if (c.pieces) {  // the rows packed into pieces: what the plan reads
    const std::size_t bytes = static_cast<std::size_t>(pieces_bytes(wrows, K) * E);
    d_pieces = std::make_unique<DeviceBuffer>(bytes);
    FP4GEMM_TEST_CUDA(cudaMemset(d_pieces->get(), 0xA5, bytes));
    pack_pieces_gate_up(dw_gate, d_pieces->get(), E, I, K, c.gate_up, c.format);
    mw.w = d_pieces->get(), mw.ldw = 0, mw.expert_stride = 0;
  }
  MoeOptions mo;
  mo.format = c.format, mo.scale_layout = c.scale_layout, mo.out_type = c.out, mo.activation = c.act;
  mo.capacity = c.capacity, mo.epilogue = c.epilogue, mo.gate_up = c.gate_up, mo.rescale_each_run = c.rescale;
  if (c.pieces) mo.weight_layout = WeightLayout::pieces;
  const MoeGemm plan(mw, mo);

  // Activations (gathered: 1..capacity token rows), C arena.
  const int a_rows = c.gather ? std::uniform_int_distribution<int>(1, c.capacity)(rng) : c.capacity;
  const Activations x = make_activations(c, rng, a_rows);
  DeviceBuffer d_a(x.a.size() + 16), d_as(x.scales.size() + 16);
  FP4GEMM_TEST_CUDA(cudaMemcpy(d_a.get(), x.a.data(), x.a.size(), cudaMemcpyHostToDevice));
  if (!x.scales.empty()) FP4GEMM_TEST_CUDA(cudaMemcpy(d_as.get(), x.scales.data(), x.scales.size(), cudaMemcpyHostToDevice));
  const std::size_t elem = out_type_size(c.out);
  const std::int64_t ldc = (I + 7) / 8 * 8 + 8 * static_cast<std::int64_t>(c.seed % 3);
  const std::size_t guard = 4096, c_bytes = static_cast<std::size_t>(c.capacity) * ldc * elem;
  std::vector<std::uint8_t> image(guard + c_bytes + guard);
  fill_random(rng, image.data(), image.size());
  DeviceBuffer d_c(image.size()), d_route(4 * (E + 1) + 4 * c.capacity + 64);
  int* d_offsets = reinterpret_cast<int*>(d_route.get());
  int* d_gather = d_offsets + E + 1 + 3;  // (16-byte aligned not required: 4)

  const reference::DualActivation act{c.epilogue == MoeEpilogue::silu ? reference::Activation::silu
                                                                     : reference::Activation::swigluoai};
  const bool exact = c.values == Values::gpumode;
  std::ostringstream fails;
  int bad = 0;
  int round = 0;
  for (int kind : {0, 1, 0, 2}) {
    if (c.rescale && round++ > 0) {  // new scale bytes in the same buffers: the next run must use them
      std::tie(s_main, s_main_lin) = scales_of(wrows);
      if (separate) std::tie(s_up, s_up_lin) = scales_of(wrows);
      FP4GEMM_TEST_CUDA(cudaMemcpy(d_s.get(), s_main.data(), s_main.size(), cudaMemcpyHostToDevice));
      if (separate) FP4GEMM_TEST_CUDA(cudaMemcpy(d_s.get() + up_at, s_up.data(), s_up.size(), cudaMemcpyHostToDevice));
    }
    const std::vector<int> offsets = make_offsets(c, rng, kind);
    std::vector<int> gather(c.capacity);
    std::uniform_int_distribution<int> tok(0, a_rows - 1);
    for (int& g : gather) g = c.gather ? tok(rng) : 0;
    FP4GEMM_TEST_CUDA(cudaMemcpy(d_offsets, offsets.data(), 4 * (E + 1), cudaMemcpyHostToDevice));
    FP4GEMM_TEST_CUDA(cudaMemcpy(d_gather, gather.data(), 4 * c.capacity, cudaMemcpyHostToDevice));
    MoeArgs args;
    args.a = d_a.get(), args.lda = x.lda;
    args.a_scales = c.act == MoeActivation::fp4 ? d_as.get() : nullptr;
    args.expert_offsets = d_offsets;
    if (c.gather) args.gather_index = d_gather, args.num_tokens = a_rows;
    args.c = d_c.get() + guard, args.ldc = ldc;

    // Expected image: the poison in C's cells, the reference's rows over it.
    auto poisoned = [&](Poison poison) {
      std::vector<std::uint8_t> img = image;
      const std::uint32_t pb = poison_bits(poison, c.out);
      for (int r = 0; r < c.capacity; ++r)
        for (int i = 0; i < I; ++i) std::memcpy(img.data() + guard + (r * ldc + i) * elem, &pb, elem);
      return img;
    };
    std::vector<std::vector<std::uint8_t>> runs;
    for (Poison poison : {Poison::nan, Poison::finite}) {
      const std::vector<std::uint8_t> img = poisoned(poison);
      FP4GEMM_TEST_CUDA(cudaMemcpy(d_c.get(), img.data(), img.size(), cudaMemcpyHostToDevice));
      plan.run(args);
      FP4GEMM_TEST_CUDA(cudaDeviceSynchronize());
      plan.check();
      std::vector<std::uint8_t> got(img.size());
      FP4GEMM_TEST_CUDA(cudaMemcpy(got.data(), d_c.get(), got.size(), cudaMemcpyDeviceToHost));
      runs.push_back(std::move(got));
    }
    std::vector<std::uint8_t> expected = poisoned(Poison::nan);
    reference::MoeHostProblem rp;
    rp.experts = E, rp.n = I, rp.k = K, rp.format = c.format, rp.bf16_activations = c.act == MoeActivation::bf16;
    rp.a = x.a.data(), rp.lda = x.lda, rp.a_scales = x.scales.empty() ? nullptr : x.scales.data(), rp.a_rows = a_rows;
    rp.w = w.data(), rp.ldw = ldw, rp.w_expert_stride = expert_stride;
    rp.w_scales = s_main.data(), rp.w_layout = c.scale_layout, rp.w_scale_expert_stride = scale_stride;
    rp.alpha = alpha.data(), rp.alpha_up = alpha_up.data();
    rp.offsets = offsets.data(), rp.gather = c.gather ? gather.data() : nullptr;
    rp.c = expected.data() + guard, rp.ldc = ldc, rp.out_type = c.out;
    rp.glu = &act, rp.gate_up = static_cast<int>(c.gate_up), rp.glu_fp32 = exact;
    if (separate) rp.w_up = w_up.data(), rp.w_up_scales = s_up.data();
    reference::moe_gemm(rp);

    // Outside the owned cells: unchanged (guard bands, padding, unowned rows keep the poison).
    const auto& got = runs[0];
    for (std::size_t b = 0; b < guard; ++b)
      if (got[b] != expected[b] || got[guard + c_bytes + b] != expected[guard + c_bytes + b]) {
        fails << "\n  guard band changed near byte " << b;
        ++bad;
        break;
      }
    for (int r = 0; r < c.capacity; ++r) {
      const bool owned = r >= offsets[0] && r < offsets[E];
      const std::uint8_t* gr = got.data() + guard + r * ldc * elem;
      const std::uint8_t* er = expected.data() + guard + r * ldc * elem;
      if (std::memcmp(gr + I * elem, er + I * elem, (ldc - I) * elem) != 0) {
        if (bad++ < 8) fails << "\n  row " << r << " padding written";
      }
      if (!owned) {
        if (std::memcmp(gr, er, I * elem) != 0 && bad++ < 8) fails << "\n  row " << r << " (no expert) written";
        continue;
      }
      if (std::memcmp(gr, runs[1].data() + guard + r * ldc * elem, I * elem) != 0 && bad++ < 8)
        fails << "\n  row " << r << ": the NaN- and finite-poisoned runs differ (unwritten or nondeterministic)";
      int e = 0;
      while (offsets[e + 1] <= r) ++e;
      const std::vector<double>& arow = x.dq[c.gather ? gather[r] : r];
      for (int i = 0; i < I; ++i) {
        const std::uint32_t gb = load_output_bits(gr, c.out, i), wb = load_output_bits(er, c.out, i);
        const double gv = output_bits_to_double(gb, c.out), wv = output_bits_to_double(wb, c.out);
        if (exact) {
          if (gb == wb || (gv == 0 && wv == 0)) continue;
          if (bad++ < 8)
            fails << "\n  row " << r << " (expert " << e << ") col " << i << ": got " << gv << ", expected " << wv
                  << " (bit-exact: the kernel's FP32 epilogue on exact sums)";
          continue;
        }
        // Full range: the exact products and |a b| sums of gate and up.
        auto row_of = [&](bool up, int& row, const std::vector<std::uint8_t>*& wq, const std::vector<std::uint8_t>*& sl) {
          wq = separate && up ? &w_up : &w;
          sl = separate && up ? &s_up_lin : &s_main_lin;
          row = c.gate_up == GateUpLayout::stacked ? (up ? I + i : i) : c.gate_up == GateUpLayout::interleaved ? 2 * i + up : i;
        };
        double val[2], mag[2];
        for (int up = 0; up < 2; ++up) {
          int row;
          const std::vector<std::uint8_t>* wq;
          const std::vector<std::uint8_t>* sl;
          row_of(up, row, wq, sl);
          const std::uint8_t* wr = wq->data() + (static_cast<std::int64_t>(e) * wrows + row) * ldw;
          const std::uint8_t* sr = sl->data() + (static_cast<std::size_t>(e) * wrows + row) * cols;
          double dot = 0, s = 0;
          for (int k = 0; k < K; ++k) {
            const double b = static_cast<double>(formats::e2m1_to_float(formats::get_nibble(wr, k))) *
                             formats::scale_to_float(c.format, sr[k / vec]);
            dot += arow[k] * b, s += std::fabs(arow[k] * b);
          }
          const double al = up ? alpha_up[e] : alpha[e];
          val[up] = dot * al;
          mag[up] = 2.0 * K * std::ldexp(s * al, -24) + std::ldexp(std::fabs(val[up]), -24);
        }
        const double G = val[0], U = val[1], x_exact = reference::activate(act, G, U);
        const GluBound b = glu_within_bound(c.out, gv, G, U, mag[0], mag[1], x_exact);
        if (!b.ok && bad++ < 8)
          fails << "\n  row " << r << " (expert " << e << ") col " << i << ": got " << gv << ", exact " << x_exact
                << " +- " << b.tol << " (g " << G << ", u " << U << ")";
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << c.describe() << ": " << bad << " failures" << fails.str();
}

GluCase random_glu_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + 13);
  GluCase c;
  c.seed = seed;
  const int f = static_cast<int>(rng() % 3);  // nvfp4 W4A4, mxfp4 W4A4, mxfp4 W4A16
  c.format = f == 0 ? Format::nvfp4 : Format::mxfp4;
  c.act = f == 2 ? MoeActivation::bf16 : MoeActivation::fp4;
  c.values = rng() % 2 ? Values::gpumode : Values::full;
  c.epilogue = rng() % 2 ? MoeEpilogue::silu : MoeEpilogue::swigluoai;
  c.gate_up = static_cast<GateUpLayout>(rng() % 3);
  c.up_below = rng() % 2;
  c.scale_layout = rng() % 2 ? ScaleLayout::blocked : ScaleLayout::linear;
  c.out = static_cast<OutType>(rng() % 3);
  c.experts = 1 + static_cast<int>(rng() % 40);
  c.width = 8 * (1 + static_cast<int>(rng() % 40));
  c.k = (c.format == Format::nvfp4 ? 16 : 32) * (1 + static_cast<int>(rng() % 24));
  c.capacity = 1 + static_cast<int>(rng() % 700);
  c.gather = rng() % 2;
  c.alpha_up = rng() % 2;
  c.rescale = rng() % 4 == 0;
  return c;
}

// Cases covering every combination of format, layout and activation at least once (the random
// set below covers the rest).
class MoeGlu : public ::testing::TestWithParam<int> {};

TEST_P(MoeGlu, RandomCasesMatchTheReference) {
  if (!glu_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE GEMM cannot run here";
  const GluCase c = random_glu_case(static_cast<std::uint64_t>(GetParam()));
  SCOPED_TRACE(c.describe());
  EXPECT_TRUE(run_glu_case(c));
}
INSTANTIATE_TEST_SUITE_P(Seeds, MoeGlu, ::testing::Range(0, 60));

// For every gate/up layout: `base` (with that layout and seed0 + layout) as NVFP4 W4A4 on GPU MODE
// data with silu, then as MXFP4 W4A16 on full-range data with swigluoai, further edited by
// `w4a16`.
void expect_layouts_both_activations(GluCase base, std::uint64_t seed0, const std::function<void(GluCase&)>& w4a16) {
  for (GateUpLayout gu : {GateUpLayout::stacked, GateUpLayout::interleaved, GateUpLayout::separate}) {
    GluCase c = base;
    c.gate_up = gu, c.seed = seed0 + static_cast<std::uint64_t>(gu);
    c.values = Values::gpumode, c.epilogue = MoeEpilogue::silu;
    EXPECT_TRUE(run_glu_case(c));
    c.format = Format::mxfp4, c.act = MoeActivation::bf16, c.values = Values::full, c.epilogue = MoeEpilogue::swigluoai;
    w4a16(c);
    EXPECT_TRUE(run_glu_case(c));
  }
}

TEST(MoeGluShapes, ModelShapedTilesAndBothHeights) {
  if (!glu_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE GEMM cannot run here";
  // Wide tiles (>128 tokens per expert), 256-row narrow tiles, I not a multiple of 64.
  GluCase c;
  c.experts = 4, c.width = 328, c.k = 512, c.capacity = 1100;
  expect_layouts_both_activations(c, 77, [](GluCase& w) { w.experts = 160, w.width = 64, w.capacity = 400, w.out = OutType::f16; });
}

// GLU plans in the stream-K regime (few rows, long K: tiles split over several CTAs; the owner
// runs the GLU epilogue on the summed partials), every gate/up layout and both activations.
TEST(MoeGluShapes, StreamKSplitTiles) {
  if (!glu_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE GEMM cannot run here";
  GluCase c;
  c.experts = 6, c.width = 136, c.k = 2048, c.capacity = 24;
  expect_layouts_both_activations(c, 501, [](GluCase& w) { w.k = 4096, w.gather = true; });
}

// GLU plans whose 16- / 32-token classes have full rounds and a partial last one (the last
// round split by stream-K, moe_sk_tiles): 150 experts with ~10 rows each, one 256-row block (I 128),
// K of 16 and 32 k-blocks; every gate/up layout and both activations.
TEST(MoeGluShapes, SplitLastRound) {
  if (!glu_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE GEMM cannot run here";
  GluCase c;
  c.experts = 150, c.width = 128, c.k = 1024, c.capacity = 1500;
  expect_layouts_both_activations(c, 611, [](GluCase& w) { w.k = 2048, w.gather = true; });
}

// GLU plans on weights in pieces (pack_pieces_gate_up): random cases of both packable gate / up layouts, every format,
// activation, scale layout and output type; then the model-shaped, stream-K and split-last-round shapes.
class MoeGluPieces : public ::testing::TestWithParam<int> {};

TEST_P(MoeGluPieces, RandomCasesMatchTheReference) {
  if (!glu_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE GEMM cannot run here";
  GluCase c = random_glu_case(static_cast<std::uint64_t>(1000 + GetParam()));
  c.pieces = true;
  if (c.gate_up == GateUpLayout::separate) c.gate_up = GetParam() % 2 ? GateUpLayout::stacked : GateUpLayout::interleaved;
  c.k = (c.k + 31) / 32 * 32;
  SCOPED_TRACE(c.describe());
  EXPECT_TRUE(run_glu_case(c));
}
INSTANTIATE_TEST_SUITE_P(Seeds, MoeGluPieces, ::testing::Range(0, 24));

TEST(MoeGluPiecesShapes, TilesStreamKAndSplitLastRound) {
  if (!glu_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE GEMM cannot run here";
  std::uint64_t seed = 1700;
  for (const GateUpLayout gu : {GateUpLayout::stacked, GateUpLayout::interleaved})
    for (const int shape : {0, 1, 2}) {
      GluCase c;
      c.pieces = true, c.gate_up = gu, c.seed = seed++;
      if (shape == 0) c.experts = 4, c.width = 328, c.k = 512, c.capacity = 1100;  // wide tiles, 256-row narrow tiles
      if (shape == 1) c.experts = 6, c.width = 136, c.k = 2048, c.capacity = 24;    // stream-K split tiles
      if (shape == 2) c.experts = 150, c.width = 128, c.k = 1024, c.capacity = 1500;  // split last round
      c.values = Values::gpumode, c.epilogue = MoeEpilogue::silu;
      EXPECT_TRUE(run_glu_case(c));
      c.format = Format::mxfp4, c.act = MoeActivation::bf16, c.values = Values::full, c.epilogue = MoeEpilogue::swigluoai;
      EXPECT_TRUE(run_glu_case(c));
    }
}

TEST(MoeGluArgs, BadArgumentsNamed) {
  if (!glu_kernel_available()) GTEST_SKIP() << "no sm_90 GPU: the MoE GEMM cannot run here";
  DeviceBuffer w(1 << 20), s(1 << 20);
  MoeWeights mw;
  mw.experts = 2, mw.n = 64, mw.k = 128, mw.w = w.get(), mw.scales = s.get();
  MoeOptions mo;
  mo.capacity = 64, mo.epilogue = MoeEpilogue::silu;
  auto expect_error = [&](const MoeWeights& ww, const MoeOptions& oo, const std::string& argument) {
    try {
      MoeGemm plan(ww, oo);
      ADD_FAILURE() << "no error for " << argument;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  };
  MoeWeights bad = mw;
  bad.n = 60;
  expect_error(bad, mo, "weights.n");
  MoeOptions o2 = mo;
  o2.epilogue = MoeEpilogue::swigluoai, o2.swiglu_limit = 0;
  expect_error(mw, o2, "options.swiglu_limit");
  o2 = mo;
  o2.gate_up = GateUpLayout::separate;
  expect_error(mw, o2, "weights.w_up");
  bad = mw;
  bad.w_up = w.get() + 4096;
  expect_error(bad, mo, "weights.w_up");  // not a separate layout
  bad = mw;
  bad.alpha_up = 2.0f;
  MoeOptions none = mo;
  none.epilogue = MoeEpilogue::none;
  expect_error(bad, none, "weights.alpha_up");
  bad = mw;
  bad.expert_stride = 64 * 64;  // < 2I * ldw
  expect_error(bad, mo, "weights.expert_stride");
  // 2 experts x 2I rows x 64 bytes = 16 KB of weights: a 8 KB buffer is too small.
  DeviceBuffer small(8192);
  bad = mw;
  bad.w = small.get();
  expect_error(bad, mo, "weights.w");
}

}  // namespace
}  // namespace fp4gemm::test
