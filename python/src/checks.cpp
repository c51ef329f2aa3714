// Array checks shared by the bindings (see checks.hpp).
#include "checks.hpp"

#include <string_view>

#include <algorithm>
#include <cstdio>

#include "fp4gemm/fp4gemm.hpp"

namespace fp4gemm::python {

Matrix read_matrix(const TensorView& t, const std::string& arg, int g, bool allow_batch) {
  if (allow_batch && t.ndim == 3 && t.shape[2] != 1)
    throw Error(arg, g, "has a batch dimension l = " + std::to_string(t.shape[2]) +
                            " (shape " + t.shape_text() + "); only l = 1 is supported, pass each batch as a group");
  if (t.ndim != 2 && !(allow_batch && t.ndim == 3))
    throw Error(arg, g, std::string("must be 2-D [rows, cols]") +
                            (allow_batch ? " (or 3-D with a trailing dimension of 1)" : "") + ", got shape " +
                            t.shape_text());
  Matrix m{t.shape[0], t.shape[1], 0};
  // With no or a single row the row stride is meaningless (frameworks report anything, 0 for
  // empty arrays); use a dense one, rounded up to what fp4gemm requires of strides.
  const std::int64_t align = std::max<std::int64_t>(16 / t.itemsize, 8);  // 16 bytes, and ldc % 8 == 0
  m.ld = (m.cols + align - 1) / align * align;
  if (m.rows == 0 || m.cols == 0) return m;
  if (t.strides[0] < 0 || t.strides[1] < 0)
    throw Error(arg, g, "has negative strides " + t.strides_text());
  if (m.cols > 1 && t.strides[1] != 1)
    throw Error(arg, g, "must be contiguous along its last dimension, got strides " + t.strides_text() +
                            " for shape " + t.shape_text());
  if (m.rows > 1) {
    // Rows must not overlap (a broadcast / as_strided view with a row stride below the row
    // length): the GEMM reads each row as cols contiguous elements and writes C rows in parallel.
    if (t.strides[0] < m.cols)
      throw Error(arg, g, "has overlapping rows: row stride " + std::to_string(t.strides[0]) + " < " +
                              std::to_string(m.cols) + " elements per row (strides " + t.strides_text() +
                              " for shape " + t.shape_text() + ")");
    m.ld = t.strides[0];
  }
  return m;
}

void check_scale_dtype(const TensorView& t, const std::string& arg, int g, Format format) {
  const bool byte_like = t.dtype == DType::byte || (format == Format::nvfp4 && t.dtype == DType::e4m3) ||
                         (format == Format::mxfp4 && t.dtype == DType::ue8m0);
  if (!byte_like)
    throw Error(arg, g, std::string("has dtype ") + to_string(t.dtype) + "; " + to_string(format) +
                            " scales must be uint8 or " + (format == Format::nvfp4 ? "float8_e4m3fn" : "float8_e8m0fnu"));
}

bool is_row_major_dense(const TensorView& t) {
  if (t.numel() == 0) return true;
  std::int64_t expect = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] == 1) continue;
    if (t.strides[i] != expect) return false;
    expect *= t.shape[i];
  }
  return true;
}

std::string hex(std::uintptr_t p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(p));
  return buf;
}

std::int64_t strided_bytes(std::int64_t rows, std::int64_t stride_bytes, std::int64_t row_bytes) {
  std::int64_t extent = 0;
  if (__builtin_mul_overflow(rows - 1, stride_bytes, &extent) || __builtin_add_overflow(extent, row_bytes, &extent))
    return -1;
  return extent;
}

void check_in_allocation(const TensorView& t, const std::string& arg, int g, std::int64_t bytes, const char* verb,
                         const std::string& detail) {
  if (!t.has_alloc) return;
  const std::uintptr_t begin = t.ptr;
  std::uintptr_t end = 0;
  const bool wraps = bytes < 0 || __builtin_add_overflow(begin, static_cast<std::uintptr_t>(bytes), &end);
  if (!wraps && begin >= t.alloc_begin && end <= t.alloc_end) return;
  const std::string range = wraps ? "from " + hex(begin) + " more bytes than the address space holds"
                                  : "[" + hex(begin) + ", " + hex(end) + ")";
  throw Error(arg, g,
              std::string("the kernel would ") + verb + " bytes " + range + detail + " but the " +
                  (t.framework == Framework::torch ? "tensor's storage" : "buffer the array lives in") + " is [" +
                  hex(t.alloc_begin) + ", " + hex(t.alloc_end) + "): the array reaches past its memory");
}

bool is_runtime_failure(const Error& e) {
  if (std::string_view(e.what()).find(" failed: cuda") != std::string_view::npos) return true;
  const std::string& a = e.argument();
  return a == "device" || a == "run" || a == "plan" || a == "options.backend" || a == "options.device";
}

}  // namespace fp4gemm::python
