// Consumer of an installed fp4gemm: host-only calls into the public headers, each checked against
// values computed here independently (bit layouts of SPEC §1, not the library's own code).
// Exits non-zero on any wrong answer. Needs no GPU.
#include <fp4gemm/formats.hpp>
#include <fp4gemm/fp4gemm.hpp>
#include <fp4gemm/reference.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  }
}

// Same value, treating NaN == NaN and distinguishing nothing else (-0 == +0).
bool same(double x, double y) { return (std::isnan(x) && std::isnan(y)) || x == y; }

// e2m1: sign | 2-bit exponent (bias 1) | 1-bit mantissa; exponent 0 is subnormal (m * 0.5).
double e2m1_value(unsigned n) {
  const double s = (n & 8) ? -1.0 : 1.0;
  const unsigned e = (n >> 1) & 3, m = n & 1;
  return s * (e == 0 ? m * 0.5 : (1.0 + m / 2.0) * std::ldexp(1.0, static_cast<int>(e) - 1));
}

// E4M3 (fn): sign | 4-bit exponent (bias 7) | 3-bit mantissa; S.1111.111 is NaN, no infinities.
double e4m3_value(unsigned c) {
  const double s = (c & 0x80) ? -1.0 : 1.0;
  const unsigned e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return NAN;
  if (e == 0) return s * (m / 8.0) * std::ldexp(1.0, -6);
  return s * (1.0 + m / 8.0) * std::ldexp(1.0, static_cast<int>(e) - 7);
}

// IEEE half bits of a value known to be a normal, exactly representable f16.
std::uint16_t half_bits(double v) {
  int exp = 0;
  const double mant = std::frexp(std::fabs(v), &exp);  // |v| = mant * 2^exp, mant in [0.5, 1)
  const auto frac = static_cast<std::uint16_t>((mant * 2.0 - 1.0) * 1024.0);
  return static_cast<std::uint16_t>((v < 0 ? 0x8000 : 0) | ((exp - 1 + 15) << 10) | frac);
}

void check_enums() {
  using namespace fp4gemm;
  check(std::string(to_string(Format::nvfp4)) == "nvfp4", "to_string(nvfp4)");
  check(std::string(to_string(ScaleLayout::blocked)) == "blocked", "to_string(blocked)");
  check(scale_block_size(Format::nvfp4) == 16 && scale_block_size(Format::mxfp4) == 32,
        "scale_block_size");
  check(out_type_size(OutType::f16) == 2 && out_type_size(OutType::bf16) == 2 &&
            out_type_size(OutType::f32) == 4,
        "out_type_size");
}

void check_codecs() {
  namespace f = fp4gemm::formats;
  for (unsigned n = 0; n < 16; ++n) {
    const double v = e2m1_value(n);
    check(same(f::e2m1_to_float(static_cast<std::uint8_t>(n)), v), "e2m1_to_float(" + std::to_string(n) + ")");
    check(same(f::e2m1_to_float(f::float_to_e2m1(static_cast<float>(v))), v),
          "e2m1 round trip of " + std::to_string(v));
  }
  // Round to nearest, ties to the even mantissa; saturate at +-6; NaN -> 0.
  const struct { float x; double want; } e2m1_cases[] = {
      {2.5f, 2.0}, {5.0f, 4.0}, {0.25f, 0.0}, {0.75f, 1.0}, {1.75f, 2.0}, {2.4f, 2.0},
      {-3.6f, -4.0}, {100.0f, 6.0}, {-100.0f, -6.0}, {NAN, 0.0}};
  for (const auto& t : e2m1_cases)
    check(same(f::e2m1_to_float(f::float_to_e2m1(t.x)), t.want),
          "float_to_e2m1(" + std::to_string(t.x) + ") != " + std::to_string(t.want));

  for (unsigned c = 0; c < 256; ++c) {
    const double v = e4m3_value(c);
    check(same(f::e4m3_to_float(static_cast<std::uint8_t>(c)), v), "e4m3_to_float(" + std::to_string(c) + ")");
    if (!std::isnan(v))
      check(same(f::e4m3_to_float(f::float_to_e4m3(static_cast<float>(v))), v),
            "e4m3 round trip of code " + std::to_string(c));
  }
  check(f::float_to_e4m3(1.0f) == 0x38, "float_to_e4m3(1) == 0x38");
  check(f::float_to_e4m3(448.0f) == 0x7E, "float_to_e4m3(448) == 0x7E");
  check(f::float_to_e4m3(1.0e6f) == 0x7E, "float_to_e4m3 saturates at 448");
  check(f::float_to_e4m3(NAN) == 0x7F, "float_to_e4m3(NaN) == 0x7F");

  check(f::ue8m0_to_float(127) == 1.0f && f::ue8m0_to_float(130) == 8.0f, "ue8m0_to_float");
  check(std::isnan(f::ue8m0_to_float(0xFF)), "ue8m0_to_float(0xFF) is NaN");
  check(f::float_to_ue8m0(3.0f) == 129 && f::float_to_ue8m0(0.75f) == 127, "float_to_ue8m0 rounds up");
}

void check_layouts() {
  namespace f = fp4gemm::formats;
  check(f::scale_cols(fp4gemm::Format::nvfp4, 7168) == 448, "scale_cols nvfp4");
  check(f::scale_cols(fp4gemm::Format::mxfp4, 7168) == 224, "scale_cols mxfp4");
  check(f::padded_rows(129) == 256 && f::padded_scale_cols(5) == 8, "padding");
  check(f::blocked_scale_bytes(129, 5) == 256 * 8, "blocked_scale_bytes");
  // cuBLASLt "blocked" scales: 512-byte atoms of 128 rows x 4 columns, row r at
  // (r % 32) * 16 + (r % 128) / 32 * 4 within its atom, atoms row-major over [rows/128, cols/4].
  const std::int64_t cols = 10;  // 3 column blocks
  for (std::int64_t r : {0, 1, 31, 32, 100, 127, 128, 300})
    for (std::int64_t c : {0, 3, 4, 9}) {
      const std::size_t want = static_cast<std::size_t>(((r / 128) * 3 + c / 4) * 512 + (r % 32) * 16 +
                                                        (r % 128) / 32 * 4 + c % 4);
      check(f::blocked_offset(r, c, cols) == want,
            "blocked_offset(" + std::to_string(r) + ", " + std::to_string(c) + ")");
    }
}

void check_quantize() {
  namespace f = fp4gemm::formats;
  // One row, K = 32: two NVFP4 blocks holding every e2m1 value, the second one halved.
  // amax 6 -> scale 1.0 (E4M3 0x38); amax 3 -> scale 0.5 (0x30); every element is exact.
  std::vector<float> x(32);
  for (int k = 0; k < 16; ++k) {
    x[k] = static_cast<float>(e2m1_value(static_cast<unsigned>(k)));
    x[16 + k] = x[k] * 0.5f;
  }
  std::vector<std::uint8_t> packed(16), scales(2);
  f::quantize(fp4gemm::Format::nvfp4, x.data(), 1, 32, 32, packed.data(), scales.data());
  check(scales[0] == 0x38 && scales[1] == 0x30, "quantize: block scales");
  for (int k = 0; k < 32; ++k) {
    const std::uint8_t want = static_cast<std::uint8_t>(k % 16);
    const std::uint8_t got = (packed[k / 2] >> (4 * (k % 2))) & 0xF;  // even k in the low nibble
    // -0 may legitimately encode as +0.
    check(got == want || (want == 8 && got == 0), "quantize: element " + std::to_string(k));
  }
  std::vector<float> back(32);
  f::dequantize(fp4gemm::Format::nvfp4, fp4gemm::ScaleLayout::linear, packed.data(), 1, 32, 16,
                scales.data(), back.data());
  for (int k = 0; k < 32; ++k) check(back[k] == x[k], "dequantize: element " + std::to_string(k));
}

void check_reference() {
  // C[2, 2] = alpha * dq(A) dq(B)^T, K = 16 (one NVFP4 block), f16 out.
  // A row 0: 1.0 (e2m1 0x2) scale 1; row 1: -1.5 (0xB) scale 2 -> -3.
  // B row 0: 0.5 (0x1) scale 1; row 1: 6.0 (0x7) scale 1.
  const int M = 2, N = 2, K = 16;
  std::uint8_t a[2][8], b[2][8];
  std::memset(a[0], 0x22, 8);
  std::memset(a[1], 0xBB, 8);
  std::memset(b[0], 0x11, 8);
  std::memset(b[1], 0x77, 8);
  const std::uint8_t sfa[2] = {0x38, 0x40}, sfb[2] = {0x38, 0x38};
  std::uint16_t c[2][2] = {};
  fp4gemm::reference::HostGroup g;
  g.m = M; g.n = N; g.k = K;
  g.a = &a[0][0]; g.lda = 8; g.b = &b[0][0]; g.ldb = 8;
  g.sfa = sfa; g.sfb = sfb; g.c = &c[0][0]; g.ldc = 2; g.alpha = 0.25f;
  fp4gemm::reference::grouped_gemm({&g, 1}, fp4gemm::Format::nvfp4, fp4gemm::ScaleLayout::linear,
                                   fp4gemm::OutType::f16, 1);
  const double av[2] = {1.0, -3.0}, bv[2] = {0.5, 6.0};
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      const double want = 0.25 * K * av[i] * bv[j];  // 2, 24, -6, -72
      char what[96];
      std::snprintf(what, sizeof what, "reference C[%d][%d] = f16 0x%04x, want %g (0x%04x)", i, j,
                    static_cast<unsigned>(c[i][j]), want, static_cast<unsigned>(half_bits(want)));
      check(c[i][j] == half_bits(want), what);
    }
}

void check_errors() {
  const fp4gemm::Error e("groups[3].ldb", 3, "bad stride");
  check(e.argument() == "groups[3].ldb" && e.group() == 3, "Error accessors");
  check(std::string(e.what()) == "fp4gemm: groups[3].ldb: bad stride", std::string("Error::what: ") + e.what());

  // Group 1 has ldb below K/2. Pointers are never dereferenced: validation rejects the plan
  // first. Without a GPU the plan cannot even pick a device, and says so.
  std::vector<fp4gemm::GroupDesc> groups(2);
  for (int i = 0; i < 2; ++i) {
    auto base = static_cast<std::uintptr_t>(0x100000) * (i + 1);
    auto& d = groups[i];
    d.m = 64; d.n = 64; d.k = 128;
    d.a = reinterpret_cast<const void*>(base);
    d.b = reinterpret_cast<const void*>(base + 0x10000);
    d.sfa = reinterpret_cast<const void*>(base + 0x20000);
    d.sfb = reinterpret_cast<const void*>(base + 0x30000);
    d.c = reinterpret_cast<void*>(base + 0x40000);
    d.lda = d.ldb = 64;
    d.ldc = 64;
  }
  groups[1].ldb = 32;  // < K/2 = 64
  const bool have_gpu = fp4gemm::device_count() > 0;
  const std::string want_arg = have_gpu ? "groups[1].ldb" : "device";
  const int want_group = have_gpu ? 1 : -1;
  try {
    fp4gemm::Plan plan(groups, fp4gemm::Options{});
    check(false, "Plan accepted ldb < K/2");
  } catch (const fp4gemm::Error& err) {
    check(err.argument() == want_arg && err.group() == want_group,
          "Plan error names '" + err.argument() + "' (group " + std::to_string(err.group()) +
              "), want '" + want_arg + "': " + err.what());
    std::printf("plan rejected as expected (%s): %s\n", have_gpu ? "GPU" : "no GPU", err.what());
  }
}

}  // namespace

int main() {
  check_enums();
  check_codecs();
  check_layouts();
  check_quantize();
  check_reference();
  check_errors();
  if (failures != 0) {
    std::fprintf(stderr, "install consumer: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("install consumer: all checks passed\n");
  return 0;
}
