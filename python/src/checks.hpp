// Array checks shared by the grouped GEMM (groups.cpp) and the MoE GEMM (moe.cpp) bindings: 2-D
// matrices with a row stride, dense row-major arrays, and byte ranges inside an array's allocation.
#pragma once

#include <cstdint>
#include <string>

#include "fp4gemm/fp4gemm.hpp"
#include "tensor_view.hpp"

namespace fp4gemm::python {

struct Matrix {
  std::int64_t rows = 0, cols = 0, ld = 0;  // ld in elements
};

// A 2-D [rows, cols] array — or, with `allow_batch`, 3-D with a trailing batch dimension of 1
// (GPU MODE's `l`) — contiguous along cols, rows not overlapping. Errors name `arg` and `group`.
Matrix read_matrix(const TensorView& t, const std::string& arg, int group, bool allow_batch);

// Scale codes: uint8, or the format's float8 type (float8_e4m3fn for nvfp4, float8_e8m0fnu for mxfp4).
void check_scale_dtype(const TensorView& t, const std::string& arg, int group, Format format);

// Every element at its row-major dense offset (dimensions of size 1 ignored).
bool is_row_major_dense(const TensorView& t);

std::string hex(std::uintptr_t p);

// Bytes from the first to the last byte of `rows` rows of `row_bytes` with stride `stride_bytes`
// (the extent fp4gemm's validation uses, validate.cpp); -1 when it overflows.
std::int64_t strided_bytes(std::int64_t rows, std::int64_t stride_bytes, std::int64_t row_bytes);

// The kernel touches `bytes` bytes from t.ptr; they must lie in the allocation the array lives in
// where the binding can see it (a torch storage resized under its views, a NumPy as_strided view
// past its buffer: a shape check alone cannot tell). `verb` is "read" or "write"; `detail` is
// appended to the byte range in the message. No-op where the allocation is unknown.
void check_in_allocation(const TensorView& t, const std::string& arg, int group, std::int64_t bytes, const char* verb,
                         const std::string& detail);

// The Python exception fp4gemm raises for `e`: DeviceError for failures of the environment (CUDA
// errors -- FP4GEMM_CUDA_CHECK's "... failed: cuda..." text -- and errors naming the device, the
// backend, the plan or the launch), ArgumentError for the rest.
bool is_runtime_failure(const Error& e);

}  // namespace fp4gemm::python
