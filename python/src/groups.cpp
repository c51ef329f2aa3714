// Group assembly and binding-level validation.
#include "groups.hpp"

#include <string>

#include "checks.hpp"
#include "fp4gemm/formats.hpp"

namespace fp4gemm::python {

namespace {

std::string name(const char* what, int g) { return std::string(what) + "[" + std::to_string(g) + "]"; }

// GPU MODE's "reordered" view: shape (32, 4, rest_rows, 4, rest_cols[, l=1]) over a dense
// buffer in the blocked layout. Checks each stride against SPEC §2's offset formula.
bool is_gpumode_blocked_view(const TensorView& t, std::int64_t rows, std::int64_t cols) {
  if (t.ndim != 5 && !(t.ndim == 6 && t.shape[5] == 1)) return false;
  const std::int64_t rest_r = formats::padded_rows(rows) / 128, rest_c = formats::padded_scale_cols(cols) / 4;
  const std::int64_t shape[5] = {32, 4, rest_r, 4, rest_c};
  const std::int64_t stride[5] = {16, 4, rest_c * 512, 1, 512};
  for (int i = 0; i < 5; ++i) {
    if (t.shape[i] != shape[i]) return false;
    if (t.shape[i] > 1 && t.strides[i] != stride[i]) return false;
  }
  return true;
}

void check_scales(const TensorView& t, const char* what, int g, std::int64_t rows, std::int64_t cols,
                  const CallOptions& o) {
  const std::string arg = name(what, g);
  check_scale_dtype(t, arg, g, o.format);
  const std::int64_t bytes = static_cast<std::int64_t>(formats::scale_bytes(o.layout, rows, cols));
  if (o.layout == ScaleLayout::blocked && is_gpumode_blocked_view(t, rows, cols)) return;
  const std::string expected =
      o.layout == ScaleLayout::linear
          ? "[" + std::to_string(rows) + ", " + std::to_string(cols) + "] (linear layout)"
          : std::to_string(bytes) + " bytes in the blocked layout ([" + std::to_string(formats::padded_rows(rows)) +
                ", " + std::to_string(formats::padded_scale_cols(cols)) +
                "] padded, flat, or GPU MODE's (32, 4, rest_m, 4, rest_k, l) view)";
  if (t.numel() != bytes)
    throw Error(arg, g, "has shape " + t.shape_text() + " (" + std::to_string(t.numel()) + " scales); expected " + expected);
  if (o.layout == ScaleLayout::linear && t.ndim >= 2) {
    bool shape_ok = t.shape[0] == rows && t.shape[1] == cols;
    for (int i = 2; i < t.ndim; ++i) shape_ok = shape_ok && t.shape[i] == 1;
    if (!shape_ok) throw Error(arg, g, "has shape " + t.shape_text() + "; expected " + expected);
  }
  if (!is_row_major_dense(t))
    throw Error(arg, g, "must be dense and row-major (strides " + t.strides_text() + " for shape " + t.shape_text() + ")");
}

// Every [begin, end) the kernel will touch for a group with M, N, K > 0: A and B rows (lda, ldb),
// both scale tensors (the blocked layout pads rows to 128 and scale columns to 4), C rows (ldc).
void check_allocations(int g, const GroupViews& v, const GroupDesc& d, const CallOptions& o) {
  if (d.m <= 0 || d.n <= 0 || d.k <= 0) return;  // nothing touched (M = 0), or rejected by the validation
  const std::int64_t cols = d.k / scale_block_size(o.format);
  const std::string scale_note = o.layout == ScaleLayout::blocked ? " (blocked layout, padded to 128 rows and a "
                                                                    "multiple of 4 scale columns)"
                                                                  : "";
  check_in_allocation(v.a, name("a", g), g, strided_bytes(d.m, d.lda, d.k / 2), "read", " (lda = " + std::to_string(d.lda) + ")");
  check_in_allocation(v.b, name("b", g), g, strided_bytes(d.n, d.ldb, d.k / 2), "read", " (ldb = " + std::to_string(d.ldb) + ")");
  check_in_allocation(v.sfa, name("sfa", g), g, static_cast<std::int64_t>(formats::scale_bytes(o.layout, d.m, cols)), "read",
                      scale_note);
  check_in_allocation(v.sfb, name("sfb", g), g, static_cast<std::int64_t>(formats::scale_bytes(o.layout, d.n, cols)), "read",
                      scale_note);
  const std::int64_t elem = v.c.itemsize;
  std::int64_t ldc_bytes = 0;
  const bool overflow = __builtin_mul_overflow(d.ldc, elem, &ldc_bytes);
  check_in_allocation(v.c, name("c", g), g, overflow ? -1 : strided_bytes(d.m, ldc_bytes, d.n * elem), "write",
                      " (ldc = " + std::to_string(d.ldc) + " elements)");
}

}  // namespace

GroupDesc describe_group(int g, const GroupViews& v, const CallOptions& o) {
  for (auto [t, what] : {std::pair{&v.a, "a"}, std::pair{&v.b, "b"}})
    if (t->dtype != DType::byte && t->dtype != DType::fp4x2)
      throw Error(name(what, g), g, std::string("has dtype ") + to_string(t->dtype) +
                                        "; packed FP4 must be uint8 (or float4_e2m1fn_x2), two values per byte");
  const Matrix a = read_matrix(v.a, name("a", g), g, true);
  const Matrix b = read_matrix(v.b, name("b", g), g, true);
  if (a.cols != b.cols)
    throw Error(name("b", g), g, "has K/2 = " + std::to_string(b.cols) + " bytes per row but a[" + std::to_string(g) +
                                     "] has " + std::to_string(a.cols) + " (A is [M, K/2], B is [N, K/2])");
  const std::int64_t m = a.rows, n = b.rows, k = 2 * a.cols;
  const int vec = scale_block_size(o.format);
  if (k % vec != 0)
    throw Error(name("a", g), g, "K = " + std::to_string(k) + " is not a multiple of the " + to_string(o.format) +
                                     " scale block (" + std::to_string(vec) + ")");
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    throw Error(name("a", g), g, "dimensions exceed 2^31 - 1");

  const std::int64_t cols = k / vec;
  check_scales(v.sfa, "sfa", g, m, cols, o);
  check_scales(v.sfb, "sfb", g, n, cols, o);

  const DType want = o.out == OutType::f16 ? DType::f16 : o.out == OutType::bf16 ? DType::bf16 : DType::f32;
  const bool c_ok = v.c.dtype == want || (o.out != OutType::f32 && v.c.dtype == DType::raw16);
  if (!c_ok)
    throw Error(name("c", g), g, std::string("has dtype ") + to_string(v.c.dtype) + " but out_dtype is " + to_string(want));
  const Matrix c = read_matrix(v.c, name("c", g), g, true);
  if (c.rows != m || c.cols != n)
    throw Error(name("c", g), g, "has shape " + v.c.shape_text() + "; expected [" + std::to_string(m) + ", " +
                                     std::to_string(n) + "] (M from a, N from b)");

  GroupDesc d;
  d.m = static_cast<int>(m);
  d.n = static_cast<int>(n);
  d.k = static_cast<int>(k);
  d.a = reinterpret_cast<const void*>(v.a.ptr);
  d.lda = a.ld;
  d.b = reinterpret_cast<const void*>(v.b.ptr);
  d.ldb = b.ld;
  d.sfa = reinterpret_cast<const void*>(v.sfa.ptr);
  d.sfb = reinterpret_cast<const void*>(v.sfb.ptr);
  d.c = reinterpret_cast<void*>(v.c.ptr);
  d.ldc = c.ld;
  check_allocations(g, v, d, o);
  return d;
}

Placement common_placement(const std::vector<GroupViews>& groups, const TensorView* alpha) {
  Placement p;
  const TensorView* first = nullptr;
  std::string first_name;
  auto check = [&](const TensorView& t, const std::string& arg, int g) {
    if (!first) {
      first = &t;
      first_name = arg;
      p.cuda = t.cuda;
      p.device = t.device;
      return;
    }
    if (t.cuda != p.cuda || (t.cuda && t.device != p.device))
      throw Error(arg, g, "is on " + t.device_text() + " but " + first_name + " is on " + first->device_text() +
                              "; all arrays of a call must live on one device");
  };
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    const GroupViews& v = groups[g];
    check(v.a, name("a", g), g);
    check(v.b, name("b", g), g);
    check(v.sfa, name("sfa", g), g);
    check(v.sfb, name("sfb", g), g);
    check(v.c, name("c", g), g);
  }
  if (alpha) check(*alpha, "alpha", -1);
  return p;
}

}  // namespace fp4gemm::python
