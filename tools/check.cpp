// --check: copies a problem back, runs the exact CPU reference and compares per SPEC 3.
#include "check.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fp4gemm/reference.hpp"

namespace fp4gemm::cli {

std::vector<std::uint8_t> download(const DeviceBuffer& buffer) {
  std::vector<std::uint8_t> host(buffer.bytes());
  if (!host.empty())
    CLI_CUDA_CHECK(cudaMemcpy(host.data(), buffer.get(), host.size(), cudaMemcpyDeviceToHost), "check (copy back)");
  return host;
}

namespace {

struct HostCopy {
  std::vector<std::uint8_t> a, b, sfa, sfb, out, ref;
};

}  // namespace

void compare_rows(const std::uint8_t* out, const std::uint8_t* ref, std::int64_t rows, int n, std::int64_t ldc,
                  OutType type, CheckReport& r, const double* exact, const double* slack) {
  const std::size_t esize = out_type_size(type);
  // Unit roundoff of the output type: half an ulp relative.
  const double u = type == OutType::f16 ? 0x1p-11 : type == OutType::bf16 ? 0x1p-8 : 0x1p-24;
  for (std::int64_t row = 0; row < rows; ++row) {
    for (int col = 0; col < n; ++col) {
      const std::int64_t i = row * ldc + col;
      const double want = reference::load_output(ref, type, i);
      const double got = reference::load_output(out, type, i);
      ++r.elements;
      if (std::isnan(want) || std::isnan(got)) {
        if (std::isnan(want) != std::isnan(got)) ++r.nan_mismatches;
        continue;
      }
      const double diff = got == want ? 0.0 : std::fabs(got - want);
      if (!(diff <= 1e-3 + 1e-3 * std::fabs(want))) ++r.tolerance_failures;
      if (diff > r.max_abs || std::isnan(diff)) r.max_abs = diff;
      if (want != 0 && diff / std::fabs(want) > r.max_rel) r.max_rel = diff / std::fabs(want);
      if (std::memcmp(out + i * esize, ref + i * esize, esize) != 0) ++r.bit_mismatches;
      if (r.fp32_bound) {
        const double x = exact[row * n + col];
        const bool same_overflow = std::isinf(got) && got == want;  // `want` is x rounded to the type
        if (!same_overflow && !(std::fabs(got - x) <= u * std::fabs(x) + slack[row * n + col])) ++r.bound_failures;
      }
    }
    for (std::int64_t col = n; col < ldc; ++col)  // padding must still hold the 0xFF poison
      for (std::size_t byte = 0; byte < esize; ++byte)
        if (out[(row * ldc + col) * esize + byte] != 0xFF) {
          ++r.outside_writes;
          break;
        }
  }
}

void count_outside_writes(const std::uint8_t* out, std::int64_t rows, std::int64_t ldc, OutType type, CheckReport& r) {
  const std::size_t esize = out_type_size(type);
  for (std::int64_t i = 0; i < rows * ldc; ++i)
    for (std::size_t byte = 0; byte < esize; ++byte)
      if (out[i * esize + byte] != 0xFF) {
        ++r.outside_writes;
        break;
      }
}

std::string CheckReport::summary() const {
  char text[600];
  char bound[96] = "";
  if (fp32_bound)
    std::snprintf(bound, sizeof bound, ", outside the FP32 bound %lld (must be 0)", static_cast<long long>(bound_failures));
  std::snprintf(text, sizeof text,
                "check: %lld elements, max abs err %.3g, max rel err %.3g, tolerance failures %lld%s, "
                "NaN mismatches %lld, not bit-identical %lld%s%s, writes outside C %lld: %s",
                static_cast<long long>(elements), max_abs, max_rel, static_cast<long long>(tolerance_failures),
                fp32_bound ? " (GPU MODE rule, informative on full-range data)" : "",
                static_cast<long long>(nan_mismatches), static_cast<long long>(bit_mismatches),
                require_bit_identical ? " (must be 0 for GPU MODE values)" : "", bound,
                static_cast<long long>(outside_writes), pass() ? "PASS" : "FAIL");
  return text;
}

CheckReport check_against_reference(const ProblemData& data) {
  CLI_CUDA_CHECK(cudaDeviceSynchronize(), "check");
  const auto& groups = data.groups();
  const DataSettings& s = data.settings();
  std::vector<HostCopy> copies(groups.size());
  std::vector<reference::HostGroup> host_groups;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const GroupBuffers& gb = groups[g];
    if (gb.m == 0) continue;
    HostCopy& h = copies[g];
    h.a = download(gb.a);
    h.b = download(gb.b);
    h.sfa = download(gb.sfa);
    h.sfb = download(gb.sfb);
    h.out = download(gb.c);
    h.ref.assign(h.out.size(), 0xFF);
    reference::HostGroup hg;
    hg.m = gb.m;
    hg.n = gb.n;
    hg.k = gb.k;
    hg.a = h.a.data();
    hg.lda = gb.lda;
    hg.b = h.b.data();
    hg.ldb = gb.ldb;
    hg.sfa = h.sfa.data();
    hg.sfb = h.sfb.data();
    hg.c = h.ref.data();
    hg.ldc = gb.ldc;
    hg.alpha = 1.0f;
    host_groups.push_back(hg);
  }
  reference::grouped_gemm(host_groups, s.format, s.layout, s.out);

  CheckReport report;
  for (std::size_t g = 0; g < groups.size(); ++g)
    if (groups[g].m > 0)
      compare_rows(copies[g].out.data(), copies[g].ref.data(), groups[g].m, groups[g].n, groups[g].ldc, s.out, report);
  return report;
}

OutputSnapshot snapshot_outputs(const ProblemData& data) {
  CLI_CUDA_CHECK(cudaDeviceSynchronize(), "cross-check");
  OutputSnapshot snap;
  for (const GroupBuffers& gb : data.groups()) snap.push_back(download(gb.c));
  return snap;
}

Agreement compare_identical(const ProblemData& data, const OutputSnapshot& x, const OutputSnapshot& y) {
  Agreement a;
  const std::size_t esize = out_type_size(data.settings().out);
  const auto& groups = data.groups();
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (std::int64_t row = 0; row < groups[g].m; ++row)
      for (std::int64_t col = 0; col < groups[g].n; ++col) {
        const std::size_t offset = (row * groups[g].ldc + col) * esize;
        ++a.elements;
        if (std::memcmp(x[g].data() + offset, y[g].data() + offset, esize) != 0) ++a.mismatches;
      }
  return a;
}

Agreement compare_with_bf16(const ProblemData& data, const OutputSnapshot& ours, const OutputSnapshot& bf16) {
  constexpr double kRelTolerance = 1.0 / 128;
  Agreement a;
  const OutType type = data.settings().out;
  const auto& groups = data.groups();
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (std::int64_t row = 0; row < groups[g].m; ++row)
      for (std::int64_t col = 0; col < groups[g].n; ++col) {
        const std::int64_t i = row * groups[g].ldc + col;
        const double x = reference::load_output(ours[g].data(), type, i);
        const double y = reference::load_output(bf16[g].data(), OutType::bf16, i);
        const double diff = x == y ? 0.0 : std::fabs(x - y);
        ++a.elements;
        if (!(diff <= kRelTolerance * std::fabs(x))) ++a.mismatches;
        if (x != 0 && diff / std::fabs(x) > a.max_rel) a.max_rel = diff / std::fabs(x);
      }
  return a;
}

}  // namespace fp4gemm::cli
